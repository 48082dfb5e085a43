/* Waits through exactly one kind of call (argv[1], the mode) for about WAIT_MS, so the shim's
 * report thread can only start at that call (tests/wait_points.rs). Every mode first keeps a
 * 4321-byte block (the marker, so periodic reports have a sample), prints what it did on
 * stdout (identical with and without the shim) and exits 0.
 *
 * argv[2], when given, is a file the program writes its observations to (the number of threads
 * of the process at named moments), which differ under the shim by design.
 *
 * Modes of the signal checks:
 *   handler_waits  a SIGALRM handler calls poll, read and waitpid for a second while main
 *                  spins; then main polls (outside the handler).
 *   longjmp        a SIGALRM handler leaves by siglongjmp; then main polls, then nanosleeps.
 *   dispositions   sigaction, signal, sysv_signal and sigset queried back, SA_RESETHAND.
 *   vfork          a vfork child calls read and waitpid before _exit; then the parent polls.
 *   cancel_read    a thread blocked in read is cancelled.
 *   spin           no wait at all: computation only.
 */
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* sigset, checked on purpose */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 3000
#define STEP_MS 100
#define STEPS (WAIT_MS / STEP_MS)

void *kept; /* the marker block, retained */
static FILE *notes;

__attribute__((noinline)) void keep_marker(void) { kept = malloc(4321); memset(kept, 1, 4321); }

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Busy for `ms` without any call the shim watches. */
static void spin_ms(double ms) {
    double end = now_ms() + ms;
    volatile unsigned long x = 0;
    while (now_ms() < end) x++;
}

static int threads(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    if (!d) return -1;
    while ((e = readdir(d))) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void note(const char *what) {
    if (notes) {
        fprintf(notes, "%s=%d\n", what, threads());
        fflush(notes);
    }
}

static struct timespec step = {0, STEP_MS * 1000000L};

/* A child that lives WAIT_MS and exits 3 (reaped by the caller's wait). */
static pid_t late_child(void) {
    pid_t p = fork();
    if (p == 0) {
        struct timespec t = {WAIT_MS / 1000, (WAIT_MS % 1000) * 1000000L};
        while (clock_nanosleep(CLOCK_MONOTONIC, 0, &t, &t) == EINTR) {
        }
        _exit(3);
    }
    return p;
}

/* A child (auto-reaped: SIGCHLD ignored) that writes one byte every STEP_MS, STEPS times. */
static int writer_pipe(void) {
    int fd[2];
    if (pipe(fd)) exit(2);
    signal(SIGCHLD, SIG_IGN);
    if (fork() == 0) {
        close(fd[0]);
        for (int i = 0; i < STEPS; i++) {
            clock_nanosleep(CLOCK_MONOTONIC, 0, &step, NULL);
            if (write(fd[1], "x", 1) != 1) _exit(1);
        }
        _exit(0);
    }
    close(fd[1]);
    return fd[0];
}

static void alarm_every_step(void) {
    struct itimerval it = {{0, STEP_MS * 1000}, {0, STEP_MS * 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
}

static void alarm_off(void) {
    struct itimerval it = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &it, NULL);
}

static volatile sig_atomic_t alarms;
static void on_alarm(int sig) { (void)sig; alarms++; }

/* handler_waits: the handler calls async-signal-safe waits. */
static int handler_pipe[2];
static volatile sig_atomic_t handler_calls;
static void waiting_handler(int sig) {
    (void)sig;
    int e = errno;
    char c;
    poll(NULL, 0, 0);
    if (read(handler_pipe[0], &c, 1) != 1) abort();
    if (write(handler_pipe[1], "y", 1) != 1) abort();
    waitpid(-1, NULL, WNOHANG);
    handler_calls++;
    errno = e;
}

static void *blocked_reader(void *p) {
    char c;
    (void)!read(*(int *)p, &c, 1); /* never returns: nothing is written */
    return NULL;
}

static sigjmp_buf jump;
static void jumping_handler(int sig) { siglongjmp(jump, sig); }

static int counted_info;
static void info_handler(int sig, siginfo_t *info, void *uc) {
    (void)uc;
    counted_info += info && info->si_signo == sig;
}
static void plain_handler(int sig) { (void)sig; }

static void show(const char *label, int sig) {
    struct sigaction o;
    memset(&o, 0, sizeof o);
    if (sigaction(sig, NULL, &o)) {
        printf("%s: sigaction failed\n", label);
        return;
    }
    const char *h = o.sa_handler == SIG_DFL ? "SIG_DFL"
                    : o.sa_handler == SIG_IGN ? "SIG_IGN"
                    : o.sa_handler == plain_handler ? "plain_handler"
                    : (void *)o.sa_sigaction == (void *)info_handler ? "info_handler"
                    : o.sa_handler == on_alarm ? "on_alarm"
                                               : "other";
    printf("%s: %s flags=%#x usr2_masked=%d\n", label, h, (unsigned)o.sa_flags,
           sigismember(&o.sa_mask, SIGUSR2));
}

static void dispositions(void) {
    struct sigaction a, old;
    memset(&a, 0, sizeof a);
    a.sa_sigaction = info_handler;
    a.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&a.sa_mask);
    sigaddset(&a.sa_mask, SIGUSR2);
    sigaction(SIGUSR1, &a, &old);
    printf("old usr1 was default: %d\n", old.sa_handler == SIG_DFL);
    show("usr1 installed", SIGUSR1);
    raise(SIGUSR1);
    printf("info handler ran with its siginfo: %d\n", counted_info);
    show("usr1 after one delivery (SA_RESETHAND)", SIGUSR1);

    a.sa_handler = plain_handler;
    a.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &a, NULL);
    a.sa_handler = on_alarm;
    a.sa_flags = 0;
    sigaction(SIGUSR1, &a, &old);
    printf("replaced plain_handler: %d flags=%#x\n", old.sa_handler == plain_handler,
           (unsigned)old.sa_flags);
    show("usr1 on_alarm", SIGUSR1);
    raise(SIGUSR1);
    printf("on_alarm ran: %d\n", (int)alarms);

    printf("signal old is on_alarm: %d\n", signal(SIGUSR1, plain_handler) == on_alarm);
    show("usr1 by signal", SIGUSR1);
    printf("signal old is plain_handler: %d\n", signal(SIGUSR1, SIG_IGN) == plain_handler);
    show("usr1 ignored", SIGUSR1);
    printf("sysv_signal old is SIG_IGN: %d\n", sysv_signal(SIGUSR1, plain_handler) == SIG_IGN);
    show("usr1 by sysv_signal", SIGUSR1);
    raise(SIGUSR1);
    show("usr1 after sysv delivery", SIGUSR1);
    printf("sigset old is SIG_DFL: %d\n", sigset(SIGUSR1, plain_handler) == SIG_DFL);
    show("usr1 by sigset", SIGUSR1);
    printf("sigset old is plain_handler: %d\n", sigset(SIGUSR1, SIG_DFL) == plain_handler);
    show("usr1 back to default", SIGUSR1);
    printf("invalid signal: %d\n", sigaction(0, &a, NULL) == -1 && errno == EINVAL);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (argc > 2) notes = fopen(argv[2], "w");
    keep_marker();
    printf("mode %s\n", mode);
    fflush(stdout);
    int n = 0;
    if (!strcmp(mode, "sleep")) {
        n = sleep(WAIT_MS / 1000 + 1);
    } else if (!strcmp(mode, "sleep_loop")) {
        for (int i = 0; i < 3; i++) n += sleep(1);
    } else if (!strcmp(mode, "usleep_loop")) {
        for (int i = 0; i < STEPS; i++) n += usleep(STEP_MS * 1000);
    } else if (!strcmp(mode, "thrd_sleep")) {
        for (int i = 0; i < STEPS; i++) n += thrd_sleep(&step, NULL);
    } else if (!strcmp(mode, "poll")) {
        n = poll(NULL, 0, WAIT_MS);
    } else if (!strcmp(mode, "poll_loop")) {
        for (int i = 0; i < STEPS; i++) n += poll(NULL, 0, STEP_MS);
    } else if (!strcmp(mode, "ppoll")) {
        for (int i = 0; i < STEPS; i++) n += ppoll(NULL, 0, &step, NULL);
    } else if (!strcmp(mode, "select")) {
        for (int i = 0; i < STEPS; i++) {
            struct timeval t = {0, STEP_MS * 1000};
            n += select(0, NULL, NULL, NULL, &t);
        }
    } else if (!strcmp(mode, "pselect")) {
        for (int i = 0; i < STEPS; i++) n += pselect(0, NULL, NULL, NULL, &step, NULL);
    } else if (!strcmp(mode, "epoll_pwait2")) {
        int ep = epoll_create1(0);
        struct epoll_event ev;
        for (int i = 0; i < STEPS; i++) n += epoll_pwait2(ep, &ev, 1, &step, NULL);
    } else if (!strcmp(mode, "read_pipe")) {
        int fd = writer_pipe();
        char c;
        while (read(fd, &c, 1) == 1) n++;
    } else if (!strcmp(mode, "read_timerfd")) {
        int fd = timerfd_create(CLOCK_MONOTONIC, 0);
        struct itimerspec it = {step, step};
        timerfd_settime(fd, 0, &it, NULL);
        uint64_t ticks;
        for (int i = 0; i < STEPS; i++)
            if (read(fd, &ticks, sizeof ticks) == sizeof ticks) n++;
        n = n == STEPS;
    } else if (!strcmp(mode, "cond_timedwait")) {
        pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
        pthread_cond_t c = PTHREAD_COND_INITIALIZER;
        pthread_mutex_lock(&m);
        for (int i = 0; i < STEPS; i++) {
            struct timespec t;
            clock_gettime(CLOCK_REALTIME, &t);
            t.tv_nsec += STEP_MS * 1000000L;
            if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
            n += pthread_cond_timedwait(&c, &m, &t) == ETIMEDOUT;
        }
        pthread_mutex_unlock(&m);
        n = n == STEPS;
    } else if (!strcmp(mode, "cond_wait")) {
        /* A process-shared condition signalled by a child process (no thread of ours). */
        struct shared {
            pthread_mutex_t m;
            pthread_cond_t c;
            int count;
        } *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        pthread_mutexattr_t ma;
        pthread_condattr_t ca;
        pthread_mutexattr_init(&ma);
        pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
        pthread_condattr_init(&ca);
        pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
        pthread_mutex_init(&s->m, &ma);
        pthread_cond_init(&s->c, &ca);
        signal(SIGCHLD, SIG_IGN);
        if (fork() == 0) {
            for (int i = 0; i < STEPS; i++) {
                clock_nanosleep(CLOCK_MONOTONIC, 0, &step, NULL);
                pthread_mutex_lock(&s->m);
                s->count++;
                pthread_cond_signal(&s->c);
                pthread_mutex_unlock(&s->m);
            }
            _exit(0);
        }
        pthread_mutex_lock(&s->m);
        while (s->count < STEPS) pthread_cond_wait(&s->c, &s->m);
        pthread_mutex_unlock(&s->m);
        n = s->count;
    } else if (!strcmp(mode, "sigwait") || !strcmp(mode, "sigwaitinfo") ||
               !strcmp(mode, "sigtimedwait")) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGALRM);
        sigprocmask(SIG_BLOCK, &set, NULL);
        alarm_every_step();
        for (int i = 0; i < STEPS; i++) {
            int sig = 0;
            siginfo_t info;
            struct timespec t = {5, 0};
            if (mode[7] == 0) sigwait(&set, &sig);
            else if (mode[7] == 'i') sig = sigwaitinfo(&set, &info);
            else sig = sigtimedwait(&set, &info, &t);
            n += sig == SIGALRM;
        }
        alarm_off();
    } else if (!strcmp(mode, "sigsuspend") || !strcmp(mode, "pause")) {
        struct sigaction a;
        memset(&a, 0, sizeof a);
        a.sa_handler = on_alarm;
        sigaction(SIGALRM, &a, NULL);
        sigset_t block, old;
        sigemptyset(&block);
        sigaddset(&block, SIGALRM);
        sigprocmask(SIG_BLOCK, &block, &old);
        alarm_every_step();
        while (alarms < STEPS) {
            if (mode[0] == 's') {
                sigsuspend(&old);
            } else {
                sigprocmask(SIG_SETMASK, &old, NULL);
                pause(); /* a signal that came just before is caught by the next one */
                sigprocmask(SIG_BLOCK, &block, NULL);
            }
        }
        alarm_off();
        n = alarms >= STEPS;
    } else if (!strcmp(mode, "waitpid") || !strcmp(mode, "wait") || !strcmp(mode, "wait4") ||
               !strcmp(mode, "waitid")) {
        pid_t p = late_child();
        int status = 0;
        if (!strcmp(mode, "waitpid")) waitpid(p, &status, 0);
        else if (!strcmp(mode, "wait")) wait(&status);
        else if (!strcmp(mode, "wait4")) {
            struct rusage ru;
            wait4(p, &status, 0, &ru);
        } else {
            siginfo_t info;
            waitid(P_PID, p, &info, WEXITED);
            status = info.si_status << 8;
        }
        n = WEXITSTATUS(status);
    } else if (!strcmp(mode, "accept") || !strcmp(mode, "accept4")) {
        int l = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
            getsockname(l, (struct sockaddr *)&a, &len))
            return 2;
        signal(SIGCHLD, SIG_IGN);
        if (fork() == 0) {
            struct timespec t = {WAIT_MS / 1000, (WAIT_MS % 1000) * 1000000L};
            clock_nanosleep(CLOCK_MONOTONIC, 0, &t, NULL);
            int c = socket(AF_INET, SOCK_STREAM, 0);
            _exit(connect(c, (struct sockaddr *)&a, sizeof a) != 0);
        }
        int c = mode[6] ? accept4(l, NULL, NULL, SOCK_CLOEXEC) : accept(l, NULL, NULL);
        n = c >= 0;
    } else if (!strcmp(mode, "handler_waits")) {
        if (pipe(handler_pipe) || write(handler_pipe[1], "y", 1) != 1) return 2;
        struct sigaction a;
        memset(&a, 0, sizeof a);
        a.sa_handler = waiting_handler;
        a.sa_flags = SA_RESTART;
        sigaction(SIGALRM, &a, NULL);
        struct itimerval it = {{0, 20000}, {0, 20000}};
        setitimer(ITIMER_REAL, &it, NULL);
        spin_ms(1200);
        alarm_off();
        note("after_handlers");
        n = handler_calls > 5;
        poll(NULL, 0, WAIT_MS);
        note("after_poll");
    } else if (!strcmp(mode, "longjmp")) {
        signal(SIGALRM, jumping_handler);
        if (sigsetjmp(jump, 1) == 0) {
            alarm_every_step();
            spin_ms(5000);
        }
        alarm_off();
        n = 1;
        poll(NULL, 0, 500);
        note("after_poll");
        clock_nanosleep(CLOCK_MONOTONIC, 0, &(struct timespec){WAIT_MS / 1000, 500000000L},
                        NULL);
        note("after_nanosleep");
    } else if (!strcmp(mode, "dispositions")) {
        dispositions();
        n = 1;
    } else if (!strcmp(mode, "vfork")) {
        int fd[2];
        if (pipe2(fd, O_NONBLOCK)) return 2;
        pid_t p = vfork();
        if (p == 0) {
            char c;
            (void)!read(fd[0], &c, 1); /* EAGAIN: empty */
            waitpid(-1, NULL, WNOHANG);
            poll(NULL, 0, 0);
            _exit(7);
        }
        note("after_vfork");
        int status = 0;
        waitpid(p, &status, 0);
        n = WEXITSTATUS(status);
        poll(NULL, 0, WAIT_MS);
        note("after_poll");
    } else if (!strcmp(mode, "cancel_read")) {
        /* A thread cancelled while blocked in read (a cancellation point): the cancellation
         * unwinds through the shim's read. */
        int fd[2];
        if (pipe(fd)) return 2;
        pthread_t t;
        void *r = NULL;
        pthread_create(&t, NULL, blocked_reader, &fd[0]);
        clock_nanosleep(CLOCK_MONOTONIC, 0, &step, NULL);
        pthread_cancel(t);
        pthread_join(t, &r);
        n = r == PTHREAD_CANCELED;
        poll(NULL, 0, WAIT_MS);
    } else if (!strcmp(mode, "spin")) {
        spin_ms(WAIT_MS);
        n = 1;
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("done %d\n", n);
    return 0;
}

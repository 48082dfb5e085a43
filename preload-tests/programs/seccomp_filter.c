/* Installs a seccomp filter that punishes one system call the program never makes itself,
 * then goes on allocating and exits normally (tests/seccomp.rs).
 *
 * usage: seccomp_filter HOW ACTION CALL SLEEP_BEFORE
 *   HOW:    prctl | seccomp | tsync (seccomp(2) with SECCOMP_FILTER_FLAG_TSYNC) | strict
 *   ACTION: kill (SECCOMP_RET_KILL_PROCESS) | trap (SECCOMP_RET_TRAP: SIGSYS) | errno (EPERM)
 *   CALL:   a system call name below; `write` punishes writes to any descriptor but 1
 *   SLEEP_BEFORE: 1 sleeps (a safe point: the report thread starts) before the filter; 2
 *   does too, and forks under the filter (the child allocates, sleeps and exits)
 * HOW `calls` instead prints what `syscall` and `prctl` return and leave in errno.
 * Strict mode (only read, write, exit, rt_sigreturn) ignores ACTION and CALL, allocates
 * nothing after it and ends with SYS_exit, as such programs must. */
#define _GNU_SOURCE
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define KEEP 64
void *kept[2 * KEEP];

__attribute__((noinline)) void marker_seccomp_before(int i) {
    kept[i] = malloc(3001 + i);
    memset(kept[i], i, 3001 + i);
}

__attribute__((noinline)) void marker_seccomp_after(int i) {
    kept[KEEP + i] = malloc(5003 + i);
    memset(kept[KEEP + i], i, 5003 + i);
}

static long checksum(int n) {
    long s = 0;
    for (int i = 0; i < n; i++) s += ((unsigned char *)kept[i])[0] + i;
    return s;
}

static void pause_a_moment(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long call_number(const char *name) {
    static const struct { const char *name; long nr; } calls[] = {
        {"openat", SYS_openat}, {"mmap", SYS_mmap}, {"munmap", SYS_munmap},
        {"mprotect", SYS_mprotect}, {"madvise", SYS_madvise}, {"clone", SYS_clone},
#ifdef SYS_clone3
        {"clone3", SYS_clone3},
#endif
        {"socket", SYS_socket}, {"write", SYS_write}, {"renameat", SYS_renameat},
#ifdef SYS_renameat2
        {"renameat2", SYS_renameat2},
#endif
        {"futex", SYS_futex}, {"rt_sigprocmask", SYS_rt_sigprocmask},
        {"sched_getaffinity", SYS_sched_getaffinity}, {"sched_yield", SYS_sched_yield},
        {"nanosleep", SYS_nanosleep}, {"tgkill", SYS_tgkill}, {"newfstatat", SYS_newfstatat},
        {"fstat", SYS_fstat}, {"getdents64", SYS_getdents64}, {"gettid", SYS_gettid},
        {"close", SYS_close},
        /* Calls Ying never makes. */
        {"ptrace", SYS_ptrace}, {"execve", SYS_execve}, {"mount", SYS_mount},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
        if (strcmp(calls[i].name, name) == 0) return calls[i].nr;
    fprintf(stderr, "unknown call %s\n", name);
    exit(2);
}

/* One call's result and errno (set to 1234 before, so an untouched errno shows). */
#define SHOW(expr)                                                             \
    do {                                                                       \
        errno = 1234;                                                          \
        long r_ = (long)(expr);                                                \
        int e_ = errno;                                                        \
        printf("%-60s = %ld, errno %d\n", #expr, r_, e_);                       \
    } while (0)

static int calls(void) {
    char name[32] = {0};
    unsigned int action = SECCOMP_RET_KILL_PROCESS;
    SHOW(syscall(SYS_getpid) == getpid());
    SHOW(syscall(SYS_close, -1));
    SHOW(syscall(SYS_read, -1, NULL, 0));
    SHOW(syscall(SYS_write, 1, "", 0));
    SHOW(syscall(99999));
    /* The sixth argument (on the stack on x86_64): a page-misaligned offset fails. */
    SHOW(syscall(SYS_mmap, 0, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 4095));
    SHOW(syscall(SYS_mmap, 0, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) > 0);
    SHOW(syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action));
    SHOW(syscall(SYS_seccomp, 77, 0, NULL));
    SHOW(prctl(PR_SET_NAME, "seccomp-calls"));
    SHOW(prctl(PR_GET_NAME, name));
    printf("name %s\n", name);
    SHOW(prctl(PR_GET_DUMPABLE));
    SHOW(prctl(PR_GET_SECCOMP));
    SHOW(prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
    SHOW(prctl(99999));
    SHOW(prctl(PR_SET_SECCOMP, 77));
    SHOW(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, NULL)); /* fails: no filter there */
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s HOW ACTION CALL SLEEP_BEFORE\n", argv[0]);
        return 2;
    }
    if (strcmp(argv[1], "calls") == 0) return calls();
    const char *how = argv[1], *action = argv[2];
    long nr = call_number(argv[3]);
    int is_write = strcmp(argv[3], "write") == 0;
    for (int i = 0; i < KEEP; i++) marker_seccomp_before(i);
    if (atoi(argv[4])) pause_a_moment(2500);
    printf("before: %ld\n", checksum(KEEP));
    fflush(stdout);

    if (strcmp(how, "strict") == 0) {
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT) != 0) {
            perror("strict");
            return 1;
        }
        static const char msg[] = "strict mode: still alive\n";
        write(1, msg, sizeof msg - 1);
        syscall(SYS_exit, 0);
        return 99; /* not reached */
    }

    unsigned int ret = strcmp(action, "kill") == 0   ? SECCOMP_RET_KILL_PROCESS
                       : strcmp(action, "trap") == 0 ? SECCOMP_RET_TRAP
                                                     : SECCOMP_RET_ERRNO | 1 /* EPERM */;
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW), /* another architecture: not tested */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned int)nr, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        /* The call: `write` only to descriptors other than 1. */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 1, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, is_write ? SECCOMP_RET_ALLOW : ret),
        BPF_STMT(BPF_RET | BPF_K, ret),
    };
    struct sock_fprog prog = {sizeof filter / sizeof filter[0], filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        perror("no_new_privs");
        return 1;
    }
    long rc;
    if (strcmp(how, "prctl") == 0)
        rc = prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
    else if (strcmp(how, "seccomp") == 0)
        rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
    else
        rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
    if (rc != 0) {
        perror("seccomp");
        return 1;
    }
    for (int i = 0; i < KEEP; i++) marker_seccomp_after(i);
    /* Blocks sampled before the filter move (their records with them, or not) and go. */
    for (int i = 0; i < KEEP; i += 2) kept[i] = realloc(kept[i], 7001 + i);
    for (int i = 1; i < KEEP; i += 8) {
        free(kept[i]);
        kept[i] = calloc(1, 1);
    }
    if (atoi(argv[4]) == 2) {
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            for (int i = 0; i < KEEP; i++) kept[i] = realloc(kept[i], 9001 + i);
            pause_a_moment(300);
            printf("child: %ld\n", checksum(KEEP));
            exit(0);
        }
        int status = -1;
        waitpid(child, &status, 0);
        printf("child status %d\n", status);
    }
    pause_a_moment(1200); /* a safe point under the filter */
    for (int i = 0; i < KEEP; i += 2) free(kept[KEEP + i]), kept[KEEP + i] = malloc(77);
    printf("after: %ld\n", checksum(KEEP));
    return 0;
}

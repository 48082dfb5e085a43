/* fork and exec under the shim. Modes (argv[1]):
 *   fork      parent keeps PARENT_N x PARENT_SIZE under marker_parent, forks; the child keeps
 *             CHILD_N x CHILD_SIZE under marker_child and returns from main; the parent waits.
 *   exec      forks twice: one child execs this program with "execd", the other /bin/true;
 *             the parent waits for both.
 *   execd     (run by exec) keeps EXECD_N x EXECD_SIZE under marker_execd.
 *   forkloop  a thread allocates and frees in a loop while the main thread forks FORKS times;
 *             every child allocates and exits normally (running its exit handlers).
 * Output never contains pids, so it is the same in every run. The numbers are mirrored in
 * tests/fork.rs. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PARENT_N 3
#define PARENT_SIZE 30003
#define CHILD_N 7
#define CHILD_SIZE 12345
#define EXECD_N 5
#define EXECD_SIZE 7007
#define FORKS 20

/* Global, so the compiler cannot drop the stores (and with them the allocations). */
void *kept[64];
int nkept;

static void keep(size_t n) {
    void *p = malloc(n);
    memset(p, 0x42, n);
    kept[nkept++] = p;
}

__attribute__((noinline)) void marker_parent(void) {
    for (int i = 0; i < PARENT_N; i++) keep(PARENT_SIZE);
}
__attribute__((noinline)) void marker_child(void) {
    for (int i = 0; i < CHILD_N; i++) keep(CHILD_SIZE);
}
__attribute__((noinline)) void marker_execd(void) {
    for (int i = 0; i < EXECD_N; i++) keep(EXECD_SIZE);
}

static int wait_for(pid_t pid, const char *what) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) {
        perror("waitpid");
        return 1;
    }
    if (WIFEXITED(status)) {
        printf("%s exited with %d\n", what, WEXITSTATUS(status));
        return WEXITSTATUS(status) != 0;
    }
    printf("%s died with signal %d\n", what, WIFSIGNALED(status) ? WTERMSIG(status) : -1);
    return 1;
}

static int mode_fork(void) {
    marker_parent();
    printf("parent before fork\n");
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        marker_child();
        printf("child kept %d blocks\n", nkept);
        return 0; /* normal exit: exit handlers run, the shim writes the child's report */
    }
    int bad = wait_for(pid, "child");
    printf("parent kept %d blocks\n", nkept);
    return bad;
}

static int mode_exec(const char *self) {
    fflush(stdout);
    pid_t a = fork();
    if (a == 0) {
        execl(self, self, "execd", (char *)NULL);
        perror("execl self");
        _exit(127);
    }
    int bad = wait_for(a, "exec'd self");
    fflush(stdout);
    pid_t b = fork();
    if (b == 0) {
        execl("/bin/true", "true", (char *)NULL);
        perror("execl /bin/true");
        _exit(127);
    }
    bad |= wait_for(b, "/bin/true");
    return bad;
}

static atomic_int stop;

static void *churn(void *arg) {
    (void)arg;
    unsigned long n = 0;
    while (!atomic_load(&stop)) {
        void *p = malloc((n % 500) * 16 + 1);
        void *q = calloc(1, (n % 300) + 8);
        p = realloc(p, (n % 700) * 8 + 32);
        free(q);
        free(p);
        n++;
    }
    return NULL;
}

static int mode_forkloop(void) {
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, churn, NULL);
    int bad = 0;
    pid_t kids[FORKS];
    for (int i = 0; i < FORKS; i++) {
        fflush(stdout);
        kids[i] = fork();
        if (kids[i] < 0) {
            perror("fork");
            return 1;
        }
        if (kids[i] == 0) {
            /* Only this thread exists in the child; it allocates and exits normally. */
            marker_child();
            exit(0);
        }
        usleep(20000);
    }
    for (int i = 0; i < FORKS; i++) {
        int status = 0;
        if (waitpid(kids[i], &status, 0) != kids[i] || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            bad = 1;
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    printf("forkloop: %d children, %s\n", FORKS, bad ? "some failed" : "all exited with 0");
    return bad;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "fork") == 0) return mode_fork();
    if (strcmp(mode, "exec") == 0) return mode_exec(argv[0]);
    if (strcmp(mode, "execd") == 0) {
        marker_execd();
        printf("execd kept %d blocks\n", nkept);
        return 0;
    }
    if (strcmp(mode, "forkloop") == 0) return mode_forkloop();
    fprintf(stderr, "usage: %s fork|exec|execd|forkloop\n", argv[0]);
    return 2;
}

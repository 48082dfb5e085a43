/* Forks CHILDREN children one after the other (argv[1], default 100); each keeps CHILD_N
   blocks of CHILD_SIZE bytes under marker_child and exits, writing its own exit report when it
   took a sample. For tests/fork_estimates.rs: the children's estimates of marker_child must be
   independent draws, not one draw repeated. The numbers are mirrored there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILD_N 8
#define CHILD_SIZE 10007

void *kept[CHILD_N];

__attribute__((noinline)) void marker_child(void) {
    for (int i = 0; i < CHILD_N; i++) {
        kept[i] = malloc(CHILD_SIZE);
        memset(kept[i], 0x5a, CHILD_SIZE);
    }
}

int main(int argc, char **argv) {
    int children = argc > 1 ? atoi(argv[1]) : 100;
    int failed = 0;
    for (int i = 0; i < children; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            marker_child();
            exit(0);
        }
        int status = 0;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            failed++;
        }
    }
    printf("%d children, %d failed\n", children, failed);
    return failed != 0;
}

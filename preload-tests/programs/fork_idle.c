/* A parent that takes samples (it keeps an 8 MiB block: default sampling samples it except with
 * probability e^-16), then forks 3 children that allocate nothing and exit normally, running
 * their exit handlers, like a shell's subshells. Only the parent took samples of its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void *volatile kept;

int main(void) {
    kept = malloc(8u << 20);
    memset(kept, 1, 4096);
    int ok = 0;
    for (int i = 0; i < 3; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) exit(0);
        int st = 0;
        ok += waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    printf("%d children exited with 0\n", ok);
    return 0;
}

/* Instructions a safe-point wait and a wrapped signal handler cost (BENCHMARKS.md):
 *   wait_calls poll N     N calls of poll(NULL, 0, 0), a safe point under the shim
 *   wait_calls signal N   N raise(SIGUSR1) with a handler installed by signal()
 * Run under valgrind --tool=callgrind --toggle-collect=main, with and without the shim, and
 * with N = 0 to subtract start-up.
 */
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static volatile int hits;
static void handler(int sig) { (void)sig; hits++; }

int main(int argc, char **argv) {
    int n = argc > 2 ? atoi(argv[2]) : 1000000;
    if (argc > 1 && !strcmp(argv[1], "signal")) {
        signal(SIGUSR1, handler);
        for (int i = 0; i < n; i++) raise(SIGUSR1);
    } else {
        for (int i = 0; i < n; i++) poll(NULL, 0, 0);
    }
    return 0;
}

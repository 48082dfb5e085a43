/* Signal handlers the program installs run inside one of these trampolines (signals.rs says
 * why): the thread's handler depth is raised around the program's handler, so a wait called by
 * a handler is not taken for a safe point.
 *
 * The program's handler of each signal is kept in one table per signature. The trampoline the
 * kernel holds says which table to read, so the signature a handler is called with always
 * matches the flags it was installed with, even while another thread replaces it. Nothing here
 * allocates, takes a lock, makes a system call or touches errno: the depth is a plain
 * initial-exec TLS word that only its own thread changes (a nested handler puts it back before
 * it returns), and the tables are read with one atomic load.
 */
#include <signal.h>
#include <stddef.h>

#define YING_NSIG 65

__attribute__((visibility("hidden"), tls_model("initial-exec"))) __thread volatile unsigned int
    ying_signal_depth;

/* Written by signals.rs (as AtomicUsize), read here. */
__attribute__((visibility("hidden"))) void *ying_plain_handlers[YING_NSIG];
__attribute__((visibility("hidden"))) void *ying_info_handlers[YING_NSIG];

__attribute__((visibility("hidden"))) unsigned int ying_signal_depth_now(void) {
    return ying_signal_depth;
}

__attribute__((visibility("hidden"))) void ying_plain_trampoline(int sig) {
    if (sig <= 0 || sig >= YING_NSIG) return;
    void (*h)(int) = (void (*)(int))__atomic_load_n(&ying_plain_handlers[sig], __ATOMIC_ACQUIRE);
    if ((size_t)h <= 2) return; /* never recorded (SIG_DFL, SIG_IGN, SIG_HOLD are not kept) */
    ying_signal_depth++;
    h(sig);
    ying_signal_depth--;
}

__attribute__((visibility("hidden"))) void ying_info_trampoline(int sig, siginfo_t *info,
                                                                 void *uc) {
    if (sig <= 0 || sig >= YING_NSIG) return;
    void (*h)(int, siginfo_t *, void *) = (void (*)(int, siginfo_t *, void *))__atomic_load_n(
        &ying_info_handlers[sig], __ATOMIC_ACQUIRE);
    if ((size_t)h <= 2) return;
    ying_signal_depth++;
    h(sig, info, uc);
    ying_signal_depth--;
}

/* The first code of every thread the program creates through the shim's pthread_create
 * (thread_start.rs says why). It is C so that nothing about it depends on Rust's panic
 * strategy: pthread_exit and cancellation unwind through it (gcc gives it unwind tables and no
 * cleanups), and at -O2 the call of the program's start routine is a sibling call, so no frame
 * of ours stays below the program's.
 */

struct ying_start {
    void *(*routine)(void *);
    void *arg;
    void (*begin)(void *); /* frees the record, then sets the thread up */
    _Bool program;         /* read by begin only */
};

__attribute__((visibility("hidden"))) void *ying_thread_trampoline(void *p) {
    struct ying_start s = *(struct ying_start *)p;
    s.begin(p);
    return s.routine(s.arg);
}

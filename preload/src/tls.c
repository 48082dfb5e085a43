/* The shim's per-thread hook state, in initial-exec TLS.
 *
 * A Rust thread_local! in a shared object is reached through __tls_get_addr, which may call
 * malloc after a dlopen and so recurse into the hooks. Initial-exec TLS is a fixed offset from
 * the thread pointer: no call, no allocation. Stable Rust cannot choose the TLS model, so the
 * block is defined here. Its initial image is Rust's ThreadState::new(): zero, except the
 * filter and reject pointers, which name a map of all ones so that a thread's frees take the slow path
 * until the thread is set up (the dynamic linker relocates the image before any thread copies
 * it, as for glibc's own initialised TLS). On x86_64 the hooks address the fields %fs-relative
 * (host.rs); elsewhere they call the accessor below.
 */
#include <stddef.h>
#include <stdint.h>

/* A map of all ones, as long as the engine's filter map (2^19 bytes, filter.rs). */
__attribute__((visibility("hidden"))) const unsigned char ying_reject_none[1 << 19] = {
    [0 ...(1 << 19) - 1] = 0xff};

struct ying_tls {
    uint64_t budget, drawn, freed;
    const unsigned char *filter, *reject;
    unsigned char rest[128 - 40];
};
_Static_assert(offsetof(struct ying_tls, filter) == 24, "FILTER_OFFSET in thread_state.rs");
_Static_assert(offsetof(struct ying_tls, reject) == 32, "REJECT_OFFSET in thread_state.rs");

__attribute__((visibility("hidden"), tls_model("initial-exec"), aligned(64))) __thread
    struct ying_tls ying_tls_block = {.filter = ying_reject_none, .reject = ying_reject_none};

/* Hidden: a direct call from the hooks, not an interposable one through the GOT. */
__attribute__((visibility("hidden"))) void *ying_tls_state(void) { return &ying_tls_block; }

/* Set while the thread runs a chained allocator's function for the shim (chain.rs): that
 * allocator's own mmaps are its heap, already counted as its blocks. */
__attribute__((visibility("hidden"), tls_model("initial-exec"))) __thread int ying_in_allocator;

__attribute__((visibility("hidden"))) int *ying_in_allocator_flag(void) { return &ying_in_allocator; }

/* The shim's per-thread hook state, in initial-exec TLS.
 *
 * A Rust thread_local! in a shared object is reached through __tls_get_addr, which may call
 * malloc after a dlopen and so recurse into the hooks. Initial-exec TLS is a fixed offset from
 * the thread pointer: no call, no allocation. Stable Rust cannot choose the TLS model, so the
 * block is defined here. It is plain zeroed bytes (Rust's ThreadState, all-zero valid, no
 * destructor). On x86_64 the hooks reach it with two instructions of inline assembly (host.rs);
 * elsewhere they call the accessor below.
 */
__attribute__((visibility("hidden"), tls_model("initial-exec"), aligned(64))) __thread
    unsigned char ying_tls_block[64];

/* Hidden: a direct call from the hooks, not an interposable one through the GOT. */
__attribute__((visibility("hidden"))) void *ying_tls_state(void) { return ying_tls_block; }

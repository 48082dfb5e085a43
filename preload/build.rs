//! Compiles the initial-exec TLS block, the thread-start trampoline and the signal trampolines
//! (see src/tls.c, src/thread_start.c and src/signals.c for why they are C).
fn main() {
    println!("cargo:rerun-if-changed=src/tls.c");
    println!("cargo:rerun-if-changed=src/thread_start.c");
    println!("cargo:rerun-if-changed=src/signals.c");
    cc::Build::new()
        .file("src/tls.c")
        .file("src/thread_start.c")
        .file("src/signals.c")
        .flag("-ftls-model=initial-exec")
        .flag("-fPIC")
        .opt_level(2)
        .compile("ying_tls");
}

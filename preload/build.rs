//! Compiles the initial-exec TLS block and the thread-start trampoline (see src/tls.c and
//! src/thread_start.c for why they are C).
fn main() {
    println!("cargo:rerun-if-changed=src/tls.c");
    println!("cargo:rerun-if-changed=src/thread_start.c");
    cc::Build::new()
        .file("src/tls.c")
        .file("src/thread_start.c")
        .flag("-ftls-model=initial-exec")
        .flag("-fPIC")
        .opt_level(2)
        .compile("ying_tls");
}

//! Compiles the initial-exec TLS block (see src/tls.c for why it is C).
fn main() {
    println!("cargo:rerun-if-changed=src/tls.c");
    cc::Build::new()
        .file("src/tls.c")
        .flag("-ftls-model=initial-exec")
        .flag("-fPIC")
        .opt_level(2)
        .compile("ying_tls");
}

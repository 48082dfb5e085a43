//! The load generator (`System`): `svc-load PORT closed|rate SECONDS CONNECTIONS [RATE]`.
fn main() {
    ying_bench_rust_service::load_main();
}

//! Allocates through jemalloc (the global allocator, exported as `malloc`) and prints a count.

#[global_allocator]
static JEMALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let v: Vec<String> = (0..100_000).map(|i| i.to_string()).collect();
    println!("jemalloc crate: {} strings", v.len());
}

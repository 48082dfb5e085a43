//! A plain Rust program spawning and joining threads (std calls pthread_getattr_np at every
//! thread start). Usage: spawn_threads N. Prints the sum of what the threads returned.
fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let mut sum = 0u64;
    let mut i = 0;
    while i < n {
        let handles: Vec<_> = (i..(i + 4).min(n))
            .map(|k| std::thread::spawn(move || vec![k; 3].iter().sum::<u64>()))
            .collect();
        for h in handles {
            sum += h.join().expect("thread panicked");
        }
        i += 4;
    }
    println!("threads {n}, sum {sum}");
}

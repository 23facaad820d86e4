use plumb_backend_cpu::Pool;
use std::time::Instant;
fn main() {
    let pool = Pool::new(2);
    let iters = 100_000;
    let t = Instant::now();
    for _ in 0..iters {
        pool.run(&|_, _| {});
    }
    println!("empty run: {:.2} us", t.elapsed().as_secs_f64() / iters as f64 * 1e6);
}

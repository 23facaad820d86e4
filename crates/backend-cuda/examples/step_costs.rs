//! What the pieces of a decode step cost on this GPU, each timed alone over many repetitions:
//! a stream-ordered allocation with its memset and free (what every op output cost before the
//! pool), a small upload from pageable memory (what every op's metadata cost before `begin_step`),
//! and a kernel launch (host time to queue it, and device time per launch of a launch-bound
//! chain). Multiply by the counts of a step to see where its time went.
//!
//!   cargo run --release -p plumb-backend-cuda --example step_costs

use cudarc::driver::CudaContext;
use plumb_backend_cuda::CudaBackend;
use plumb_core::{Backend, ElementwiseOps};
use std::time::Instant;

const REPS: usize = 2000;

fn per_op_us(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e6 / REPS as f64
}

fn main() {
    let b = CudaBackend::new(0).expect("a CUDA device");
    let ctx = CudaContext::new(0).expect("context");
    // SAFETY: this stream's buffers are used on it alone.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().expect("stream");
    // 576 floats: one row of SmolLM2-135M's hidden state.
    for _ in 0..100 {
        drop(stream.alloc_zeros::<f32>(576).unwrap());
    }
    stream.synchronize().unwrap();
    let t = Instant::now();
    for _ in 0..REPS {
        drop(stream.alloc_zeros::<f32>(576).unwrap());
    }
    stream.synchronize().unwrap();
    let alloc = per_op_us(t);

    let meta = [7u32; 8];
    let t = Instant::now();
    for _ in 0..REPS {
        drop(stream.clone_htod(&meta).unwrap());
    }
    stream.synchronize().unwrap();
    let upload = per_op_us(t);

    let x = b.upload(&vec![1.0f32; 576], 1, 576);
    let mut acc = b.upload(&vec![0.0f32; 576], 1, 576);
    for _ in 0..100 {
        b.add(&mut acc, &x);
    }
    b.synchronize();
    let t = Instant::now();
    for _ in 0..REPS {
        b.add(&mut acc, &x);
    }
    let launch_host = per_op_us(t);
    b.synchronize();
    let launch_done = per_op_us(t);
    // Every add ran: acc = 1 · (100 + REPS).
    assert_eq!(b.download(&acc)[0], (100 + REPS) as f32);

    println!("stream-ordered alloc + memset + free of 576 f32  {alloc:8.2} us each");
    println!("pageable upload of 8 u32 (new buffer)            {upload:8.2} us each");
    println!("kernel launch, host time to queue                {launch_host:8.2} us each");
    println!("kernel launch, queued back to back, until done   {launch_done:8.2} us each");
}

//! What the pieces of a decode step cost on this GPU, each timed alone over many repetitions:
//! a stream-ordered allocation with its memset and free (what every op output cost before the
//! pool), a small upload from pageable memory (what every op's metadata cost before `begin_step`),
//! and a kernel launch (host time to queue it, and device time per launch of a launch-bound
//! chain); then each op of a SmolLM2-135M decode step at its real shapes, one row, timed over
//! back-to-back launches (each figure is the larger of the host's launch cost and the kernel's
//! device time). Multiply by the counts of a step to see where its time went.
//!
//!   cargo run --release -p plumb-backend-cuda --example step_costs

use cudarc::driver::CudaContext;
use plumb_backend_cuda::CudaBackend;
use plumb_core::{
    AttentionOps, Backend, ElementwiseOps, ForwardBatch, GgmlType, HostBytes, KvSpec, LaneView, LinearOps, RopeOps,
    WeightSource,
};
use plumb_verify::inputs::{Rng, Spread, activations, weight_bytes};
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

    let mut rng = Rng::new(7);
    let time = |name: &str, f: &mut dyn FnMut()| {
        for _ in 0..20 {
            f();
        }
        b.synchronize();
        let t = Instant::now();
        for _ in 0..200 {
            f();
        }
        b.synchronize();
        println!("{name:<48} {:8.2} us each", t.elapsed().as_secs_f64() * 1e6 / 200.0);
    };
    let mut weight = |rows: usize, cols: usize| {
        let bytes = HostBytes::from_vec(weight_bytes(&mut rng, GgmlType::Q4_1, rows, cols));
        b.load_weight(WeightSource { name: format!("{rows}x{cols}"), ty: GgmlType::Q4_1, rows, cols, bytes }).unwrap()
    };
    let (wq, wk, wg, wd, head) =
        (weight(576, 576), weight(192, 576), weight(1536, 576), weight(576, 1536), weight(49152, 576));
    let h = b.upload(&vec![0.5f32; 576], 1, 576);
    let ff = b.upload(&vec![0.5f32; 1536], 1, 1536);
    for (w, x, what) in [
        (&wq, &h, "576x576"),
        (&wk, &h, "192x576"),
        (&wg, &h, "1536x576"),
        (&wd, &ff, "576x1536"),
        (&head, &h, "49152x576 (head)"),
    ] {
        let mut out = b.tensor(1, w.rows);
        time(&format!("linear Q4_1 {what}, 1 row"), &mut || b.linear(x, w, &mut out));
    }
    let norm_w = {
        let bytes = HostBytes::from_vec(vec![1.0f32; 576].iter().flat_map(|v| v.to_le_bytes()).collect());
        b.load_weight(WeightSource { name: "norm".into(), ty: GgmlType::F32, rows: 1, cols: 576, bytes }).unwrap()
    };
    let mut normed = b.tensor(1, 576);
    time("rms_norm 576, 1 row", &mut || b.rms_norm(&h, &norm_w, 1e-5, &mut normed));
    let mut act = b.tensor(1, 1536);
    time("silu_mul 1536, 1 row", &mut || b.silu_mul(&ff, &ff, &mut act));
    let table = b.rope_table(&[5], &[1.0; 32]);
    let mut q = b.upload(&activations(&mut rng, 1, 576, Spread::Normal), 1, 576);
    time("rope 9 heads x 64, 1 row", &mut || b.rope(&mut q, &table, 9, 64));
    // Attention of one row over 64 and 640 cached positions (9 heads, 3 KV heads of 64).
    let spec = KvSpec {
        num_layers: 1,
        num_kv_heads: 3,
        head_dim: 64,
        block_size: 16,
        num_blocks: 40,
        lane_state: plumb_core::LaneStateSpec::NONE,
    };
    let mut kv = b.new_kv_cache(&spec);
    let lane = LaneView { block_table: (0..40).collect() };
    let mut all = ForwardBatch { block_size: 16, lanes: vec![lane.clone()], ..Default::default() };
    for pos in 0..640 {
        all.push_row(0, 0, pos);
    }
    let kvals = b.upload(&activations(&mut rng, 640, 192, Spread::Normal), 640, 192);
    b.write_kv(&mut kv, 0, &kvals, &kvals, &all);
    let k1 = b.upload(&vec![0.1f32; 192], 1, 192);
    let mut one = ForwardBatch { block_size: 16, lanes: vec![lane], ..Default::default() };
    one.push_row(0, 0, 639);
    let mut att = b.tensor(1, 576);
    time("write_kv 3 x 64, 1 row", &mut || b.write_kv(&mut kv, 0, &k1, &k1, &one));
    for ctx in [64usize, 640] {
        let mut batch = ForwardBatch { block_size: 16, lanes: one.lanes.clone(), ..Default::default() };
        batch.push_row(0, 0, ctx - 1);
        time(&format!("attention 9 heads, 1 row over {ctx} positions"), &mut || {
            b.attention(&q, &kv, 0, &batch, 9, 0.125, &mut att)
        });
    }

    println!("stream-ordered alloc + memset + free of 576 f32  {alloc:8.2} us each");
    println!("pageable upload of 8 u32 (new buffer)            {upload:8.2} us each");
    println!("kernel launch, host time to queue                {launch_host:8.2} us each");
    println!("kernel launch, queued back to back, until done   {launch_done:8.2} us each");
}

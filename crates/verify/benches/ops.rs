//! `cargo bench -p plumb-verify`: the conformance harness in timing mode. Each op of the CPU
//! backend runs on the default model's shapes with the suite's input generators; prints
//! microseconds per call and, for `linear`, weight bytes streamed per second.
//! Usage: cargo bench -p plumb-verify [-- FILTER] (env PLUMB_THREADS, default all cores).

use plumb_backend_cpu::CpuBackend;
use plumb_core::*;
use plumb_verify::inputs::{Rng, Spread, activations, weight_bytes};
use std::time::Instant;

fn time<F: FnMut()>(mut f: F) -> f64 {
    f();
    let start = Instant::now();
    let mut iters = 0u64;
    while start.elapsed().as_secs_f64() < 0.5 {
        f();
        iters += 1;
    }
    start.elapsed().as_secs_f64() / iters as f64
}

fn main() {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-')).unwrap_or_default();
    let threads = std::env::var("PLUMB_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let b = CpuBackend::new(threads);
    println!("backend: {}", b.name());
    let mut rng = Rng::new(1);
    let k = 576;
    for (ty, m) in [
        (GgmlType::Q4_1, 1536),
        (GgmlType::Q8_0, 49152),
        (GgmlType::Q4_0, 1536),
        (GgmlType::Q4_K, 1536),
        (GgmlType::Q6_K, 1536),
        (GgmlType::F16, 1536),
    ] {
        let cols = if matches!(ty, GgmlType::Q4_K | GgmlType::Q6_K) { 768 } else { k };
        let bytes = weight_bytes(&mut rng, ty, m, cols);
        let nbytes = bytes.len();
        let w = b
            .load_weight(WeightSource { name: format!("{ty}"), ty, rows: m, cols, bytes: HostBytes::from_vec(bytes) })
            .unwrap();
        for rows in [1, 64] {
            let name = format!("linear {ty} {rows}x{cols} · {m}x{cols}");
            if !name.contains(&filter) {
                continue;
            }
            let x = b.upload(&activations(&mut rng, rows, cols, Spread::Normal), rows, cols);
            let mut out = b.tensor(rows, m);
            let s = time(|| b.linear(&x, &w, &mut out));
            println!("{name:<40} {:>10.1} us  {:>6.1} GB/s of weights", s * 1e6, nbytes as f64 / s / 1e9);
        }
    }
    let (heads, kv_heads, d) = (9, 3, 64);
    for ctx in [128usize, 512] {
        let name = format!("attention decode ctx {ctx}");
        if !name.contains(&filter) {
            continue;
        }
        let spec = KvSpec {
            num_layers: 1,
            num_kv_heads: kv_heads,
            head_dim: d,
            block_size: 16,
            num_blocks: ctx.div_ceil(16),
            lane_state: plumb_core::LaneStateSpec::NONE,
        };
        let mut kv = b.new_kv_cache(&spec);
        let table: Vec<u32> = (0..spec.num_blocks as u32).collect();
        let hist = ForwardBatch::single_lane(&vec![0; ctx], 0, 16, table.clone());
        let kv_rows = b.upload(&activations(&mut rng, ctx, kv_heads * d, Spread::Normal), ctx, kv_heads * d);
        b.write_kv(&mut kv, 0, &kv_rows, &kv_rows, &hist);
        let one = ForwardBatch::single_lane(&[0], ctx - 1, 16, table);
        let q = b.upload(&activations(&mut rng, 1, heads * d, Spread::Normal), 1, heads * d);
        let mut out = b.tensor(1, heads * d);
        let s = time(|| b.attention(&q, &kv, 0, &one, heads, 0.125, &mut out));
        println!("{name:<40} {:>10.1} us", s * 1e6);
    }
    for rows in [1usize, 512] {
        let name = format!("rms_norm + silu_mul {rows} rows");
        if !name.contains(&filter) {
            continue;
        }
        let x = b.upload(&activations(&mut rng, rows, 1536, Spread::Normal), rows, 1536);
        let wsrc = WeightSource {
            name: "n".into(),
            ty: GgmlType::F32,
            rows: 1,
            cols: 1536,
            bytes: HostBytes::from_vec(vec![0u8; 1536 * 4]),
        };
        let w = b.load_weight(wsrc).unwrap();
        let mut out = b.tensor(rows, 1536);
        let s1 = time(|| b.rms_norm(&x, &w, 1e-5, &mut out));
        let s2 = time(|| b.silu_mul(&x, &x, &mut out));
        println!("{name:<40} {:>10.1} us (rms_norm) {:>8.1} us (silu_mul)", s1 * 1e6, s2 * 1e6);
    }
}

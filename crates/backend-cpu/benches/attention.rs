//! `cargo bench -p plumb-backend-cpu --bench attention`: the attention of one decode step of the
//! default model's geometry (30 layers, 9 query heads over 3 KV heads of 64) for several lanes
//! at a context depth, with every layer's K/V distinct (at 8 lanes and depth 256, 94 MB: far more
//! than the caches hold, as in serving). Prints the median milliseconds per step and the K/V
//! bytes read per second; on one thread also the time on a CPU (see the linear bench).
//! Settings (environment): BENCH_LANES=1,8 (lanes decoding together), BENCH_CTX=256 (positions
//! each lane attends to), BENCH_STEPS=15, BENCH_THREADS=0 (all cores).

use plumb_backend_cpu::CpuBackend;
use plumb_core::{AttentionOps, Backend, ForwardBatch, KvSpec, LaneStateSpec, LaneView};
use std::time::Instant;

fn on_cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    stat.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn main() {
    let env = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_string());
    let lane_counts: Vec<usize> = env("BENCH_LANES", "1,8").split(',').map(|s| s.parse().unwrap()).collect();
    let ctx: usize = env("BENCH_CTX", "256").parse().unwrap();
    let steps: usize = env("BENCH_STEPS", "15").parse().unwrap();
    let b = CpuBackend::new(env("BENCH_THREADS", "0").parse().unwrap());
    let (layers, heads, kv_heads, head_dim, block) = (30, 9, 3, 64, 16);
    println!(
        "{} — attention of one decode step: {layers} layers, {heads}/{kv_heads} heads of {head_dim}, depth {ctx}",
        b.name()
    );
    let mut seed = 1u64;
    let mut random = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    };
    for &lanes in &lane_counts {
        let blocks_per_lane = ctx.div_ceil(block);
        let spec = KvSpec {
            num_layers: layers,
            num_kv_heads: kv_heads,
            head_dim,
            block_size: block,
            num_blocks: lanes * blocks_per_lane,
            lane_state: LaneStateSpec::NONE,
        };
        let mut kv = b.new_kv_cache(&spec);
        let mut batch = ForwardBatch { block_size: block, ..Default::default() };
        for lane in 0..lanes {
            let table = (0..blocks_per_lane).map(|i| (lane * blocks_per_lane + i) as u32).collect();
            batch.lanes.push(LaneView { block_table: table });
        }
        // Fill every lane's history, layer by layer, with rows of its own.
        for lane in 0..lanes {
            let mut hist = ForwardBatch { block_size: block, lanes: batch.lanes.clone(), ..Default::default() };
            for p in 0..ctx {
                hist.push_row(lane, 0, p);
            }
            for layer in 0..layers {
                let k = b.upload(&random(ctx * kv_heads * head_dim), ctx, kv_heads * head_dim);
                let v = b.upload(&random(ctx * kv_heads * head_dim), ctx, kv_heads * head_dim);
                b.write_kv(&mut kv, layer, &k, &v, &hist);
            }
        }
        // One decode row per lane, at the last position.
        for lane in 0..lanes {
            batch.token_ids.push(0);
            batch.positions.push((ctx - 1) as u32);
            batch.row_lane.push(lane as u32);
            batch.slot_mapping.push(batch.slot(lane, ctx - 1) as u32);
        }
        let q: Vec<_> =
            (0..layers).map(|_| b.upload(&random(lanes * heads * head_dim), lanes, heads * head_dim)).collect();
        let mut out = b.tensor(lanes, heads * head_dim);
        let mut times = Vec::new();
        let mut cpu = Vec::new();
        for _ in 0..steps + 1 {
            let (t0, c0) = (Instant::now(), on_cpu_ns());
            for (layer, q) in q.iter().enumerate() {
                b.attention(q, &kv, layer, &batch, heads, 0.125, &mut out);
            }
            times.push(t0.elapsed().as_secs_f64());
            cpu.push((on_cpu_ns() - c0) as f64 * 1e-9);
        }
        times.remove(0);
        cpu.remove(0);
        times.sort_by(f64::total_cmp);
        cpu.sort_by(f64::total_cmp);
        let med = times[times.len() / 2];
        let bytes = (lanes * ctx * layers * kv_heads * head_dim * 2 * 4) as f64;
        let on_cpu =
            if b.num_threads() == 1 { format!(", on CPU {:.2} ms", cpu[cpu.len() / 2] * 1e3) } else { String::new() };
        println!(
            "lanes {lanes:>3}: {:>8.2} ms/step (min {:.2}{on_cpu}), {:>6.1} GB/s of K/V",
            med * 1e3,
            times[0] * 1e3,
            bytes / med / 1e9
        );
    }
}

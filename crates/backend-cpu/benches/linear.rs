//! `cargo bench -p plumb-backend-cpu --bench linear`: the linear layers of one decode step of the
//! default model (SmolLM2-135M: 30 layers of Q4_1 projections and a Q8_0 output head, random
//! weights of the same shapes, ~98 MB, more than the caches hold) at several row counts.
//! Prints the median milliseconds per step and the rows·steps per second it implies; on one
//! thread also the median time the thread was on a CPU, which other load on the machine does
//! not inflate (for A/B runs on a shared machine).
//! Settings (environment): BENCH_ROWS=1,8 (row counts), BENCH_STEPS=15 (steps per row count),
//! BENCH_THREADS=0 (all cores), BENCH_DISTINCT=30 (distinct layers; 1 runs one layer's weights 30
//! times, which mostly stay in cache: the kernels' compute cost alone), BENCH_HEAD=1 (0 skips the
//! output head), BENCH_TYPE=Q4_1 and BENCH_HEAD_TYPE=Q8_0 (the projections' and the head's formats,
//! e.g. Q4_K and Q6_K as in a Q4_K_M file), BENCH_SHAPE=smollm2 (or `wide`: hidden 2048, FFN 768,
//! KV 512, vocab 151936, widths that K-quants' 256-element super-blocks divide), BENCH_Q8=0 (1 takes
//! Q8 activations where the formats allow: `--act-dtype q8`).

use plumb_backend_cpu::{CpuBackend, CpuTensor, CpuWeight};
use plumb_core::{Backend, GgmlType, HostBytes, LinearOps, WeightSource};
use std::time::Instant;

/// Random blocks of `ty` whose f16 fields (scales, mins) are finite.
fn weight(b: &CpuBackend, ty: GgmlType, rows: usize, cols: usize, seed: &mut u64) -> CpuWeight {
    let info = ty.info().expect("a block format");
    let num_bytes = rows * cols / info.block_elems * info.block_bytes;
    let mut bytes: Vec<u8> = (0..num_bytes)
        .map(|_| {
            *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (*seed >> 33) as u8
        })
        .collect();
    for block in bytes.chunks_exact_mut(info.block_bytes) {
        for &at in plumb_core::quant::f16_field_offsets(ty) {
            block[at + 1] &= 0x3B;
        }
    }
    let src = WeightSource { name: format!("{ty} {rows}x{cols}"), ty, rows, cols, bytes: HostBytes::from_vec(bytes) };
    b.load_weight(src).expect("valid weight")
}

/// Nanoseconds this thread has run on a CPU (Linux; 0 elsewhere).
fn on_cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    stat.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn main() {
    let env = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_string());
    let row_counts: Vec<usize> = env("BENCH_ROWS", "1,2,4,8,16,32").split(',').map(|s| s.parse().unwrap()).collect();
    let steps: usize = env("BENCH_STEPS", "15").parse().unwrap();
    let b = CpuBackend::new(env("BENCH_THREADS", "0").parse().unwrap()).with_q8_inputs(env("BENCH_Q8", "0") == "1");
    let (hidden, inter, kv, vocab, layers) = match env("BENCH_SHAPE", "smollm2").as_str() {
        "wide" => (2048, 768, 512, 151936, 30),
        _ => (576, 1536, 192, 49152, 30),
    };
    let mut seed = 1u64;
    let format = |name: &str, default: &str| -> GgmlType {
        let v = env(name, default);
        GgmlType::DEQUANTIZABLE
            .into_iter()
            .find(|t| t.to_string().eq_ignore_ascii_case(&v))
            .unwrap_or_else(|| panic!("{name}={v}: not a format"))
    };
    let (q, head_ty) = (format("BENCH_TYPE", "Q4_1"), format("BENCH_HEAD_TYPE", "Q8_0"));
    let distinct: usize = env("BENCH_DISTINCT", "30").parse().unwrap();
    let with_head = env("BENCH_HEAD", "1") != "0";
    let model: Vec<[CpuWeight; 7]> = (0..distinct.clamp(1, layers))
        .map(|_| {
            [
                weight(&b, q, hidden, hidden, &mut seed),
                weight(&b, q, kv, hidden, &mut seed),
                weight(&b, q, kv, hidden, &mut seed),
                weight(&b, q, hidden, hidden, &mut seed),
                weight(&b, q, inter, hidden, &mut seed),
                weight(&b, q, inter, hidden, &mut seed),
                weight(&b, q, hidden, inter, &mut seed),
            ]
        })
        .collect();
    let head = weight(&b, head_ty, vocab, hidden, &mut seed);
    println!("{} — linear layers of one step: {q} projections, {head_ty} head of {vocab}x{hidden}", b.name());
    for &rows in &row_counts {
        let x = |cols: usize| CpuTensor {
            rows,
            cols,
            data: (0..rows * cols).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect(),
        };
        let (x_h, x_i) = (x(hidden), x(inter));
        let mut outs = [hidden, kv, kv, hidden, inter, inter, hidden, vocab].map(|n| b.tensor(rows, n));
        let (mut times, mut cpu) = (Vec::new(), Vec::new());
        for _ in 0..steps + 2 {
            let (start, start_cpu) = (Instant::now(), on_cpu_ns());
            for layer in model.iter().cycle().take(layers) {
                let [qp, kp, vp, op, gate, up, down] = layer;
                let [oq, ok, ov, oo, og, ou, od, _] = &mut outs;
                b.linear_multi(&x_h, &[qp, kp, vp], &mut [oq, ok, ov]);
                b.linear(&x_h, op, oo);
                b.linear_multi(&x_h, &[gate, up], &mut [og, ou]);
                b.linear(&x_i, down, od);
            }
            if with_head {
                b.linear(&x_h, &head, &mut outs[7]);
            }
            times.push(start.elapsed().as_secs_f64());
            cpu.push((on_cpu_ns() - start_cpu) as f64 * 1e-9);
        }
        for t in [&mut times, &mut cpu] {
            t.drain(..2);
            t.sort_by(f64::total_cmp);
        }
        let ms = times[times.len() / 2] * 1e3;
        let on_cpu =
            if b.num_threads() == 1 { format!(", on CPU {:.2} ms", cpu[cpu.len() / 2] * 1e3) } else { String::new() };
        println!(
            "rows {rows:>3}: {ms:8.2} ms/step (min {:.2}{on_cpu}), {:8.1} rows/s",
            times[0] * 1e3,
            rows as f64 * 1e3 / ms
        );
    }
}

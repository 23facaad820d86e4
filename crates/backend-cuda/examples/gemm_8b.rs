//! plumb's `linear` against cuBLASLt at Llama-3.1-8B's shapes with bf16 weights, in one run:
//! what batch invariance costs, per shape and row count M. Also measures the device's copy
//! bandwidth (a device-to-device copy, bytes read + written per second), the roofline that
//! decode is held to (`CudaBackend::copy_bandwidth`, as `plumb bench` measures it). cuBLASLt runs bf16 × bf16 → bf16 with fp32 accumulation and its own
//! heuristic choice per shape (what Python engines use); plumb runs its canonical kernels (f32
//! activations rounded to bf16 on entry, f32 out).
//!
//!   cargo run --release -p plumb-backend-cuda --example gemm_8b [-- OUT.json]
//!
//! `GEMM_MS=1,8,64` measures only those row counts, `GEMM_SHAPES=qkv,down` only those shapes
//! (sweeps of the backend's `PLUMB_CUDA_TMA_*` switches run it many times in one call).

use cudarc::cublaslt::{CudaBlasLT, Matmul, MatmulConfig};
use cudarc::driver::CudaContext;
use half::bf16;
use plumb_backend_cuda::CudaBackend;
use plumb_core::{Backend, GgmlType, HostBytes, LinearOps, WeightSource};
use serde_json::json;
use std::time::Instant;

/// (name, N, K) of one decoder layer's projections (q‖k‖v and gate‖up fused) and the head.
const SHAPES: [(&str, usize, usize); 5] =
    [("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096), ("down", 4096, 14336), ("head", 128256, 4096)];
const MS: [usize; 7] = [1, 8, 16, 32, 64, 256, 2048];

/// Cheap deterministic bf16 values of magnitude ≈ 0.05 (xorshift; the values do not matter).
fn bf16_values(n: usize, seed: u64) -> Vec<u16> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let v = ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1;
            bf16::from_f32(v).to_bits()
        })
        .collect()
}

/// Seconds per call of `f`, after warm-up, over enough calls to pass ~20 ms.
fn time(sync: &dyn Fn(), f: &mut dyn FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    sync();
    let t = Instant::now();
    f();
    sync();
    let once = t.elapsed().as_secs_f64();
    let reps = ((0.02 / once.max(1e-7)) as usize).clamp(3, 2000);
    let t = Instant::now();
    for _ in 0..reps {
        f();
    }
    sync();
    t.elapsed().as_secs_f64() / reps as f64
}

fn main() {
    let out_path = std::env::args().nth(1);
    let b = CudaBackend::new(0).expect("a CUDA device");
    let ctx = CudaContext::new(0).expect("context");
    let stream = ctx.new_stream().expect("stream");
    let sync = || stream.synchronize().unwrap();

    // The roofline `plumb bench` uses: a timed device-to-device copy.
    let bandwidth = b.copy_bandwidth().expect("measuring the copy bandwidth");
    println!("copy bandwidth: {:.0} GB/s (read + written)", bandwidth / 1e9);

    let lt = CudaBlasLT::new(stream.clone()).expect("cuBLASLt");
    let bsync = || b.synchronize();
    let mut rows = Vec::new();
    println!(
        "{:<8} {:>6} {:>10} {:>8} {:>8} {:>10} {:>8} {:>7}",
        "shape", "M", "plumb us", "GB/s", "TFLOP/s", "cuBLASLt", "TFLOP/s", "ratio"
    );
    let list = |var: &str| std::env::var(var).ok().map(|v| v.split(',').map(str::to_owned).collect::<Vec<_>>());
    let ms: Vec<usize> = match list("GEMM_MS") {
        Some(v) => v.iter().map(|m| m.parse().expect("GEMM_MS: row counts")).collect(),
        None => MS.to_vec(),
    };
    let shapes = list("GEMM_SHAPES");
    for (si, &(name, nf, k)) in SHAPES.iter().enumerate() {
        if shapes.as_ref().is_some_and(|s| !s.iter().any(|s| s == name)) {
            continue;
        }
        let wh = bf16_values(nf * k, 1 + si as u64);
        let bytes = HostBytes::from_vec(wh.iter().flat_map(|v| v.to_le_bytes()).collect());
        let w = b
            .load_weight(WeightSource { name: name.into(), ty: GgmlType::BF16, rows: nf, cols: k, bytes })
            .expect("weight");
        let wl = stream.clone_htod(&wh.iter().map(|&v| bf16::from_bits(v)).collect::<Vec<_>>()).unwrap();
        for &m in &ms {
            let xh: Vec<f32> =
                bf16_values(m * k, 100 + m as u64).iter().map(|&v| bf16::from_bits(v).to_f32()).collect();
            let x = b.upload(&xh, m, k);
            let mut out = b.tensor(m, nf);
            let tp = time(&bsync, &mut || b.linear(&x, &w, &mut out));
            let xl = stream.clone_htod(&xh.iter().map(|&v| bf16::from_f32(v)).collect::<Vec<_>>()).unwrap();
            let mut cl = stream.alloc_zeros::<bf16>(m * nf).unwrap();
            let cfg = MatmulConfig {
                transa: true,
                transb: false,
                transc: false,
                m: nf as u64,
                n: m as u64,
                k: k as u64,
                alpha: 1.0,
                lda: k as i64,
                ldb: k as i64,
                beta: 0.0,
                ldc: nf as i64,
                stride_a: None,
                stride_b: None,
                stride_c: None,
                stride_bias: None,
                batch_size: None,
            };
            // SAFETY: the buffers hold exactly the shapes `cfg` describes.
            let tl = time(&sync, &mut || unsafe { lt.matmul(cfg, &wl, &xl, &mut cl, None, None).unwrap() });
            let flops = 2.0 * (m * nf * k) as f64;
            let wbytes = (nf * k * 2) as f64;
            println!(
                "{name:<8} {m:>6} {:>10.1} {:>8.0} {:>8.1} {:>10.1} {:>8.1} {:>7.2}",
                tp * 1e6,
                wbytes / tp / 1e9,
                flops / tp / 1e12,
                tl * 1e6,
                flops / tl / 1e12,
                tl / tp
            );
            rows.push(json!({
                "shape": name, "n": nf, "k": k, "m": m,
                "plumb_us": tp * 1e6, "cublaslt_us": tl * 1e6,
                "plumb_weight_gb_per_s": wbytes / tp / 1e9,
                "plumb_fraction_of_copy_bandwidth": wbytes / tp / bandwidth,
                "plumb_tflops": flops / tp / 1e12, "cublaslt_tflops": flops / tl / 1e12,
                "plumb_speed_vs_cublaslt": tl / tp,
            }));
        }
    }
    if let Some(path) = out_path {
        let r = json!({
            "what": "plumb linear (canonical, batch-invariant) vs cuBLASLt, Llama-3.1-8B shapes, bf16 weights",
            "device": b.name(),
            "copy_bandwidth_gb_per_s": bandwidth / 1e9,
            "rows": rows,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&r).unwrap()).unwrap();
        println!("written to {path}");
    }
}

use plumb_backend_cpu::CpuBackend;
use plumb_core::{Backend, GgmlType, HostBytes, LinearOps, WeightSource};
use std::time::Instant;
fn main() {
    let threads: usize = std::env::args().nth(1).map_or(1, |v| v.parse().unwrap());
    let rows_m: usize = std::env::args().nth(2).map_or(1536, |v| v.parse().unwrap());
    let n_mats: usize = std::env::args().nth(3).map_or(1, |v| v.parse().unwrap());
    let b = CpuBackend::new(threads);
    let k = 576;
    let bytes_per = rows_m * k / 32 * 20;
    let mut ws = Vec::new();
    for i in 0..n_mats {
        let mut raw = vec![0u8; bytes_per];
        for (j, x) in raw.iter_mut().enumerate() {
            *x = ((j * 7 + i) % 251) as u8;
        }
        for blk in raw.chunks_exact_mut(20) {
            blk[1] = 0x2c;
            blk[3] = 0x2c;
        }
        ws.push(
            b.load_weight(WeightSource {
                name: "w".into(),
                ty: GgmlType::Q4_1,
                rows: rows_m,
                cols: k,
                bytes: HostBytes::from_vec(raw),
            })
            .unwrap(),
        );
    }
    let x = b.upload(&vec![0.5f32; k], 1, k);
    let mut out = b.tensor(1, rows_m);
    let iters = 2000;
    let t = Instant::now();
    for i in 0..iters {
        b.linear(&x, &ws[i % n_mats], &mut out);
    }
    let s = t.elapsed().as_secs_f64();
    println!(
        "{threads} threads, {n_mats} mats of {rows_m}x{k}: {:.1} us/call, {:.1} GB/s, {:.2} Gweights/s",
        s / iters as f64 * 1e6,
        (bytes_per * iters) as f64 / s / 1e9,
        (rows_m * k * iters) as f64 / s / 1e9
    );
}
#[allow(dead_code)]
fn pool_only() {}

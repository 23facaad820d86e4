//! `linear` gives every row the same bits whatever the number of rows beside it (DESIGN.md
//! principle 2): row r of an M-row product equals that row multiplied alone, for every weight
//! format, on every instruction set, for row counts that cross every kernel boundary (the fused
//! groups, the fused/tiled switch, the tiled micro-kernel and row blocks) and output counts that
//! leave partial tiles and partial column groups. Random inputs, seed printed.

use plumb_backend_cpu::{CpuBackend, CpuTensor, CpuWeight, Isa};
use plumb_core::{Backend, GgmlType, HostBytes, LinearOps, WeightSource};

const ROW_COUNTS: [usize; 12] = [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33, 64];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 11
    }
    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f32 {
        (self.next() >> 29) as f32 / (1u64 << 24) as f32
    }
    /// Signed, magnitudes spread over four decades, so reordered sums round differently.
    fn spread(&mut self) -> f32 {
        (self.uniform() * 2.0 - 1.0) * 10f32.powf(self.uniform() * 4.0 - 2.0)
    }
}

fn weight_bytes(rng: &mut Rng, ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let n = rows * cols;
    match ty {
        GgmlType::F32 => (0..n).flat_map(|_| (rng.spread() * 0.05).to_le_bytes()).collect(),
        GgmlType::F16 => (0..n).flat_map(|_| half::f16::from_f32(rng.spread() * 0.05).to_le_bytes()).collect(),
        GgmlType::BF16 => (0..n).flat_map(|_| half::bf16::from_f32(rng.spread() * 0.05).to_le_bytes()).collect(),
        _ => {
            let info = ty.info().expect("dequantizable types have geometry");
            let mut bytes: Vec<u8> = (0..n / info.block_elems * info.block_bytes).map(|_| rng.next() as u8).collect();
            for block in bytes.chunks_exact_mut(info.block_bytes) {
                for &at in plumb_core::quant::f16_field_offsets(ty) {
                    let scale = half::f16::from_f32(rng.spread() * 0.01);
                    block[at..at + 2].copy_from_slice(&scale.to_le_bytes());
                }
            }
            bytes
        }
    }
}

fn weight(b: &CpuBackend, ty: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> CpuWeight {
    let bytes = HostBytes::from_vec(weight_bytes(rng, ty, rows, cols));
    b.load_weight(WeightSource { name: format!("{ty} {rows}x{cols}"), ty, rows, cols, bytes }).unwrap()
}

fn bits(data: &[f32]) -> Vec<u32> {
    data.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn every_row_equals_the_row_alone_at_every_row_count() {
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    eprintln!("seed {seed}");
    let mut rng = Rng(seed);
    let k = 512;
    for isa in Isa::available() {
        // Three threads: column ranges split at tile boundaries that are not powers of two.
        let b = CpuBackend::with_isa(3, isa);
        for ty in GgmlType::DEQUANTIZABLE {
            // 43 outputs: five full tiles and a partial one of 3 (odd for every column group).
            let w = weight(&b, ty, 43, k, &mut rng);
            // A step may ask for no rows at all (no logits wanted).
            b.linear(&b.tensor(0, k), &w, &mut b.tensor(0, w.rows));
            for num_rows in ROW_COUNTS {
                let x: Vec<f32> = (0..num_rows * k).map(|_| rng.spread()).collect();
                let mut out = b.tensor(num_rows, w.rows);
                b.linear(&b.upload(&x, num_rows, k), &w, &mut out);
                for r in 0..num_rows {
                    let mut alone = b.tensor(1, w.rows);
                    b.linear(&b.upload(&x[r * k..(r + 1) * k], 1, k), &w, &mut alone);
                    let got = bits(&out.data[r * w.rows..(r + 1) * w.rows]);
                    let differ = got.iter().zip(bits(&alone.data)).filter(|(a, b)| **a != *b).count();
                    assert_eq!(
                        differ, 0,
                        "{isa:?} {ty}: row {r} of {num_rows} differs from the row alone in {differ} outputs (seed {seed})"
                    );
                }
            }
        }
    }
}

#[test]
fn linear_multi_rows_equal_the_row_alone() {
    let mut rng = Rng(7);
    let k = 576;
    for isa in Isa::available() {
        let b = CpuBackend::with_isa(2, isa);
        let ws = [weight(&b, GgmlType::Q4_1, 24, k, &mut rng), weight(&b, GgmlType::Q8_0, 13, k, &mut rng)];
        for num_rows in ROW_COUNTS {
            let x: Vec<f32> = (0..num_rows * k).map(|_| rng.spread()).collect();
            let mut outs: Vec<CpuTensor> = ws.iter().map(|w| b.tensor(num_rows, w.rows)).collect();
            b.linear_multi(
                &b.upload(&x, num_rows, k),
                &ws.iter().collect::<Vec<_>>(),
                &mut outs.iter_mut().collect::<Vec<_>>(),
            );
            for (w, out) in ws.iter().zip(&outs) {
                for r in 0..num_rows {
                    let mut alone = b.tensor(1, w.rows);
                    b.linear(&b.upload(&x[r * k..(r + 1) * k], 1, k), w, &mut alone);
                    assert_eq!(
                        bits(&out.data[r * w.rows..(r + 1) * w.rows]),
                        bits(&alone.data),
                        "{isa:?} {}: row {r} of {num_rows}",
                        w.name
                    );
                }
            }
        }
    }
}

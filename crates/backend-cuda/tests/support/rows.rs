//! Row checks shared by the per-op bit tests: run an op over batches of many sizes and compare
//! each row with the same row computed alone, bit for bit.
#![allow(dead_code)]

use plumb_backend_cuda::CudaBackend;
use plumb_core::{Backend, GgmlType, HostBytes, WeightSource};
use plumb_verify::inputs::{Rng, weight_bytes};

pub const MS: [usize; 13] = [1, 2, 3, 7, 8, 9, 16, 32, 64, 255, 256, 257, 4096];
pub const MAX_M: usize = 4096;

/// The rows of a batch of `m` compared with their solo run: all of a small batch, a spread of a
/// large one (first, last, every 13th, and the rows around block boundaries of 8, 16 and 256).
pub fn rows_to_check(m: usize) -> Vec<usize> {
    if m <= 64 {
        return (0..m).collect();
    }
    let mut rows: Vec<usize> = (0..m).step_by(13).collect();
    for edge in [7, 8, 15, 16, 17, 255, 256, 257, m - 2, m - 1] {
        if edge < m {
            rows.push(edge);
        }
    }
    rows.sort_unstable();
    rows.dedup();
    rows
}

/// Runs `op` over each batch size and compares rows with their solo runs; `run(rows)` computes
/// the op over the batch made of the global input rows `rows` and returns [rows.len(), out_cols].
pub fn check_rows(op: &str, out_cols: usize, run: &mut dyn FnMut(&[usize]) -> Vec<f32>) {
    for m in MS {
        let all: Vec<usize> = (0..m).collect();
        let batch = run(&all);
        assert_eq!(batch.len(), m * out_cols, "{op}: output size");
        for r in rows_to_check(m) {
            let alone = run(&[r]);
            let got = &batch[r * out_cols..(r + 1) * out_cols];
            assert_same_bits(got, &alone, &|| format!("{op}: row {r} of a batch of {m}, against the row alone,"));
        }
    }
    eprintln!("{op}: rows of every batch size equal their solo runs");
}

/// Panics, naming `what` and the first column, where `got` and `want` differ in any bit.
pub fn assert_same_bits(got: &[f32], want: &[f32], what: &dyn Fn() -> String) {
    assert_eq!(got.len(), want.len(), "{} has another length", what());
    if let Some(j) = got.iter().zip(want).position(|(a, b)| a.to_bits() != b.to_bits()) {
        panic!("{} differs at column {j}: {} vs {}", what(), got[j], want[j]);
    }
}

pub fn pick(x: &[f32], cols: usize, rows: &[usize]) -> Vec<f32> {
    rows.iter().flat_map(|&r| x[r * cols..(r + 1) * cols].iter().copied()).collect()
}

pub fn weight(
    b: &CudaBackend,
    rng: &mut Rng,
    ty: GgmlType,
    rows: usize,
    cols: usize,
) -> plumb_backend_cuda::CudaWeight {
    let bytes = HostBytes::from_vec(weight_bytes(rng, ty, rows, cols));
    b.load_weight(WeightSource { name: format!("{ty}"), ty, rows, cols, bytes }).unwrap()
}

/// An RMSNorm weight of `cols` values near 1, in f32.
pub fn norm_weight(b: &CudaBackend, rng: &mut Rng, cols: usize) -> plumb_backend_cuda::CudaWeight {
    let wv: Vec<f32> = (0..cols).map(|_| (1.0 + 0.1 * rng.normal()) as f32).collect();
    b.load_weight(WeightSource {
        name: "norm".into(),
        ty: GgmlType::F32,
        rows: 1,
        cols,
        bytes: HostBytes::from_vec(wv.iter().flat_map(|v| v.to_le_bytes()).collect()),
    })
    .unwrap()
}

/// Whether bf16 weights run on the TMA kernels here (tensor-core inputs and `linear_tma` on);
/// says so when a test skips for it.
pub fn on_tma(b: &CudaBackend) -> bool {
    let on = b.linear_inputs(GgmlType::BF16, 576) == plumb_core::LinearInputs::Bf16
        && b.kernel_choices()[0] == ("linear_tma", true);
    if !on {
        eprintln!("skipped: bf16 weights are not on the TMA kernels here");
    }
    on
}

//! The Q8 path's activations (`q8`): input rows quantized block by block to `plumb_core::q8`'s
//! definition (vectorized, the same bits) and laid out like the weights they meet.

use crate::aligned::Aligned;
use crate::pool::Pool;
use crate::q8::{LANES, Layout, STEP};
use crate::simd::{F32x16, Isa, simd_dispatch};
use plumb_core::q8::{Q8_BLOCK, Q8_MAX};
use std::sync::Mutex;

/// Input rows packed for the Q8 path, in the weight layout.
pub(crate) struct Q8Rows {
    pub num_steps: usize,
    pub num_groups: usize,
    /// [rows, num_steps, 64] signed codes.
    pub codes: Aligned<i8>,
    /// [rows, groups, 16]: the scale of the lane's block.
    pub scales: Aligned<f32>,
    /// [rows, groups, 16]: Σ of the lane's codes (exact).
    pub code_sums: Aligned<i32>,
    /// [rows, groups, 16]: scale · Σ of the lane's codes (one rounding).
    pub scaled_sums: Aligned<f32>,
}

impl Q8Rows {
    /// Quantizes `x` [num_rows, k] block by block (`plumb_core::q8`'s definition, vectorized
    /// with the same bits) into `layout`, rows split over the pool's threads.
    pub fn pack(pool: &Pool, isa: Isa, x: &[f32], num_rows: usize, k: usize, layout: &Layout) -> Q8Rows {
        assert!(k.is_multiple_of(Q8_BLOCK) && x.len() == num_rows * k, "Q8 rows: x is not [{num_rows}, {k}]");
        let (num_steps, num_groups) = (layout.num_steps, layout.groups.len());
        let mut codes = Aligned::<i8>::zeroed(num_rows * num_steps * STEP);
        let mut scales = Aligned::<f32>::zeroed(num_rows * num_groups * LANES);
        let mut code_sums = Aligned::<i32>::zeroed(num_rows * num_groups * LANES);
        let mut scaled_sums = Aligned::<f32>::zeroed(num_rows * num_groups * LANES);
        {
            let lanes = num_groups * LANES;
            let rows: Vec<Mutex<PackedRow>> = codes
                .chunks_exact_mut(num_steps * STEP)
                .zip(scales.chunks_exact_mut(lanes))
                .zip(code_sums.chunks_exact_mut(lanes))
                .zip(scaled_sums.chunks_exact_mut(lanes))
                .map(|(((codes, scales), code_sums), scaled_sums)| {
                    Mutex::new(PackedRow { codes, scales, code_sums, scaled_sums })
                })
                .collect();
            let pack_rows = |range: std::ops::Range<usize>| {
                let mut block_codes = vec![0i8; k];
                let mut block_scales = vec![0f32; k / Q8_BLOCK];
                for r in range {
                    quantize_row(isa, &x[r * k..(r + 1) * k], &mut block_codes, &mut block_scales);
                    let mut row = rows[r].lock().expect("a packed row");
                    row.fill(layout, &block_codes, &block_scales);
                }
            };
            // A launch costs more than quantizing a decode step's few rows on one thread.
            if num_rows < PARALLEL_PACK_ROWS {
                pack_rows(0..num_rows);
            } else {
                pool.run(&|t, nt| pack_rows(crate::pool::split_range(num_rows, t, nt, 1)));
            }
        }
        Q8Rows { num_steps, num_groups, codes, scales, code_sums, scaled_sums }
    }

    #[inline(always)]
    pub fn step(&self, r: usize, s: usize) -> &[i8] {
        &self.codes[(r * self.num_steps + s) * STEP..][..STEP]
    }

    #[inline(always)]
    pub fn lanes<'a, T>(&self, of: &'a [T], r: usize, g: usize) -> &'a [T] {
        &of[(r * self.num_groups + g) * LANES..][..LANES]
    }
}

simd_dispatch! {
    /// `plumb_core::q8::quantize` of one row, bit for bit: codes [k], a scale per block.
    pub(crate) fn quantize_row(x: &[f32], codes: &mut [i8], scales: &mut [f32]) => quantize_row_kernel
}

#[inline(always)]
fn quantize_row_kernel<S: F32x16>(x: &[f32], codes: &mut [i8], scales: &mut [f32]) {
    for ((xb, cb), scale) in x.chunks_exact(Q8_BLOCK).zip(codes.chunks_exact_mut(Q8_BLOCK)).zip(scales.iter_mut()) {
        let (lo, hi) = (S::load(xb), S::load(&xb[16..]));
        // x − x is 0 for every finite value and NaN otherwise: a NaN sum flags the block.
        if lo.sub(lo).add(hi.sub(hi)).hsum().is_nan() {
            *scale = f32::NAN;
            cb.fill(0);
            continue;
        }
        let zero = S::zero();
        let amax = lo.max(zero.sub(lo)).max(hi.max(zero.sub(hi))).hmax();
        *scale = amax / Q8_MAX;
        if *scale == 0.0 {
            cb.fill(0);
            continue;
        }
        // |x / scale| ≤ 127 up to one rounding, which the clamp absorbs (as the definition's).
        let (d, top) = (S::splat(*scale), S::splat(Q8_MAX));
        lo.div(d).round().min(top).max(zero.sub(top)).to_i8(cb);
        hi.div(d).round().min(top).max(zero.sub(top)).to_i8(&mut cb[16..]);
    }
}

/// Rows from which `Q8Rows::pack` splits its work over the pool.
const PARALLEL_PACK_ROWS: usize = 32;

/// One row's parts of a `Q8Rows` while it is packed.
struct PackedRow<'a> {
    codes: &'a mut [i8],
    scales: &'a mut [f32],
    code_sums: &'a mut [i32],
    scaled_sums: &'a mut [f32],
}

impl PackedRow<'_> {
    /// Lays out one row's quantized blocks (`codes` [k], a scale per block).
    fn fill(&mut self, layout: &Layout, codes: &[i8], block_scales: &[f32]) {
        // The weight's blocks (of `len` values: 32, or Q6_K's 16) each take the scale of the
        // activation block that holds them.
        let len = layout.block_len;
        let num_blocks = codes.len() / len;
        for (gi, &(first, g, step0)) in layout.groups.iter().enumerate() {
            let at = gi * LANES;
            // Dword t of block b goes to lane (t mod per)·g + b of step t / per (`place`).
            let per = LANES / g;
            for b in 0..g.min(num_blocks - first) {
                let src = &codes[(first + b) * len..][..len];
                for t in 0..len / 4 {
                    let (s, lane) = (t / per, (t % per) * g + b);
                    let four = &src[4 * t..4 * t + 4];
                    self.codes[(step0 + s) * STEP + 4 * lane..][..4].copy_from_slice(four);
                    self.code_sums[at + lane] += four.iter().map(|&q| q as i32).sum::<i32>();
                }
            }
            for lane in 0..LANES {
                let b = first + lane % g;
                let scale = if b < num_blocks { block_scales[b * len / Q8_BLOCK] } else { 0.0 };
                self.scales[at + lane] = scale;
                self.scaled_sums[at + lane] = scale * self.code_sums[at + lane] as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_quantization_equals_the_definition_on_every_isa() {
        let mut seed = 99u64;
        let mut x: Vec<f32> = (0..32 * 40)
            .map(|i| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let u = (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                u * 10f32.powi((i % 9) - 4)
            })
            .collect();
        x[32..64].fill(0.0);
        x[70] = f32::NAN;
        x[100] = f32::NEG_INFINITY;
        x[130] = -0.0;
        // Values on half steps: ties go to even.
        for (i, v) in x[160..192].iter_mut().enumerate() {
            *v = i as f32 - 15.5;
        }
        let want = plumb_core::q8::quantize(&x);
        for isa in Isa::available() {
            let (mut codes, mut scales) = (vec![0i8; x.len()], vec![0f32; x.len() / 32]);
            quantize_row(isa, &x, &mut codes, &mut scales);
            for (b, w) in want.iter().enumerate() {
                assert_eq!(scales[b].to_bits(), w.scale.to_bits(), "{isa:?} block {b}");
                assert_eq!(&codes[b * 32..(b + 1) * 32], &w.codes[..], "{isa:?} block {b}");
            }
        }
    }
}

//! `linear`: out[n, m] = Σ_k x[n, k] · w[m, k] for any weight format.
//! Weights stay in their checkpoint format; each thread dequantizes a tile of weight rows exactly
//! into f32 and multiplies it with a block of activation rows.
//! Batch invariance: every output element is one 16-lane f32 FMA chain over k (lane j takes
//! k ≡ j mod 16, in increasing k) followed by the fixed `hsum` tree. Tile sizes change which
//! elements are computed together, never an element's own sequence of operations; threads split
//! outputs, never the reduction.

use crate::pool::{Pool, split_range};
use crate::simd::{F32x16, Isa, LANES, simd_dispatch};
use crate::{CpuWeight, SyncPtr};

/// Weight rows dequantized together (one tile).
const TILE_M: usize = 8;
/// Activation rows whose tiles share one dequantized weight tile.
const ROW_BLOCK: usize = 64;

/// out [num_rows, w.rows] = x [num_rows, w.cols] · wᵀ.
pub fn linear(pool: &Pool, isa: Isa, x: &[f32], num_rows: usize, w: &CpuWeight, out: &mut [f32]) {
    let (m, k) = (w.rows, w.cols);
    assert_eq!(x.len(), num_rows * k, "linear: x has the wrong size for `{}`", w.name);
    assert_eq!(out.len(), num_rows * m, "linear: out has the wrong size for `{}`", w.name);
    let out_ptr = SyncPtr(out.as_mut_ptr());
    pool.run(&|t, nt| {
        let outputs = split_range(m, t, nt, TILE_M);
        if outputs.is_empty() {
            return;
        }
        // SAFETY: threads write disjoint output columns (`outputs` ranges do not overlap), and
        // `out` outlives `pool.run`.
        let out = unsafe { std::slice::from_raw_parts_mut(out_ptr.get(), num_rows * m) };
        linear_part(isa, x, num_rows, w, outputs.start, outputs.end, out);
    });
}

simd_dispatch! {
    fn linear_part(x: &[f32], num_rows: usize, w: &CpuWeight, m_start: usize, m_end: usize, out: &mut [f32]) => linear_part_kernel
}

#[inline(always)]
fn linear_part_kernel<S: F32x16>(
    x: &[f32],
    num_rows: usize,
    w: &CpuWeight,
    m_start: usize,
    m_end: usize,
    out: &mut [f32],
) {
    let (m, k) = (w.rows, w.cols);
    let mut tile = vec![0f32; TILE_M * k];
    for rb in (0..num_rows).step_by(ROW_BLOCK) {
        let rb_end = (rb + ROW_BLOCK).min(num_rows);
        for m0 in (m_start..m_end).step_by(TILE_M) {
            let c = TILE_M.min(m_end - m0);
            for ci in 0..c {
                crate::dequant::dequant_row_kernel::<S>(w.ty, w.row_bytes(m0 + ci), &mut tile[ci * k..(ci + 1) * k]);
            }
            let mut r0 = rb;
            while r0 < rb_end {
                let r = (rb_end - r0).min(4);
                match (r, c) {
                    (4, 8) => {
                        micro::<S, 4, 4>(x, r0, &tile, 0, k, out, m, m0);
                        micro::<S, 4, 4>(x, r0, &tile, 4, k, out, m, m0);
                    }
                    (r, c) => {
                        for ri in 0..r {
                            let mut c0 = 0;
                            while c0 < c {
                                if c - c0 >= 8 {
                                    micro::<S, 1, 8>(x, r0 + ri, &tile, c0, k, out, m, m0);
                                    c0 += 8;
                                } else {
                                    micro::<S, 1, 1>(x, r0 + ri, &tile, c0, k, out, m, m0);
                                    c0 += 1;
                                }
                            }
                        }
                    }
                }
                r0 += r;
            }
        }
    }
}

/// R activation rows from `r0` × C dequantized weight rows from tile row `c0`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn micro<S: F32x16, const R: usize, const C: usize>(
    x: &[f32],
    r0: usize,
    tile: &[f32],
    c0: usize,
    k: usize,
    out: &mut [f32],
    m: usize,
    m0: usize,
) {
    let mut acc = [[S::zero(); C]; R];
    let mut kk = 0;
    while kk < k {
        let wv: [S; C] = std::array::from_fn(|c| S::load(&tile[(c0 + c) * k + kk..]));
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let xv = S::load(&x[(r0 + r) * k + kk..]);
            for (a, wc) in acc_r.iter_mut().zip(&wv) {
                *a = xv.fma(*wc, *a);
            }
        }
        kk += LANES;
    }
    for (r, acc_r) in acc.iter().enumerate() {
        for (c, a) in acc_r.iter().enumerate() {
            out[(r0 + r) * m + m0 + c0 + c] = a.hsum();
        }
    }
}

//! `linear`: out[n, m] = Σ_k x[n, k] · w[m, k] for any weight format.
//! Weights stay in their checkpoint format. A few rows (decode) multiply straight from the
//! quantized blocks (`weights::fused_dot`); more rows share a tile of weight rows expanded to f32
//! (`weights::row`), which amortizes the unpacking over up to 64 rows.
//! Batch invariance: every output element is one 16-lane f32 FMA chain over k (lane j takes
//! k ≡ j mod 16, in increasing k) followed by the fixed `hsum` tree. Tile sizes change which
//! elements are computed together, never an element's own sequence of operations; threads split
//! outputs, never the reduction.

use crate::pool::{Pool, split_range};
use crate::simd::{F32x16, Isa, LANES, simd_dispatch};
use crate::{CpuWeight, SharedOut, weights};
use plumb_core::GgmlType;

/// Weight rows dequantized together (one tile).
const TILE_M: usize = 8;
/// Activation rows whose tiles share one dequantized weight tile.
const ROW_BLOCK: usize = 64;

/// outs[i] [num_rows, ws[i].rows] = x [num_rows, k] · ws[i]ᵀ, all in one pool launch: the
/// outputs of all weights form one range that threads split in whole tiles.
pub fn linear(pool: &Pool, isa: Isa, x: &[f32], num_rows: usize, ws: &[&CpuWeight], outs: &mut [&mut [f32]]) {
    for (w, out) in ws.iter().zip(outs.iter()) {
        assert_eq!(x.len(), num_rows * w.cols, "linear: x has the wrong size for `{}`", w.name);
        assert_eq!(out.len(), num_rows * w.rows, "linear: out has the wrong size for `{}`", w.name);
    }
    let shared: Vec<SharedOut> = outs.iter_mut().map(|o| SharedOut::new(o)).collect();
    // Tile counts per weight; a thread takes a contiguous range of the concatenated tiles.
    let tiles: Vec<usize> = ws.iter().map(|w| w.rows.div_ceil(TILE_M)).collect();
    let total: usize = tiles.iter().sum();
    pool.run(&|t, nt| {
        let mine = split_range(total, t, nt, 1);
        let mut first = 0;
        for (i, w) in ws.iter().enumerate() {
            let (lo, hi) = (mine.start.max(first), mine.end.min(first + tiles[i]));
            if lo < hi {
                let (m_start, m_end) = ((lo - first) * TILE_M, ((hi - first) * TILE_M).min(w.rows));
                // Threads own disjoint column ranges m_start..m_end of every row (their tile ranges
                // do not overlap); the kernels borrow only those elements (see `SharedOut::part`).
                linear_part(isa, x, num_rows, w, m_start, m_end, shared[i]);
            }
            first += tiles[i];
        }
    });
}

simd_dispatch! {
    fn linear_part(x: &[f32], num_rows: usize, w: &CpuWeight, m_start: usize, m_end: usize, out: SharedOut) => linear_part_kernel
}

#[inline(always)]
fn linear_part_kernel<S: F32x16>(
    x: &[f32],
    num_rows: usize,
    w: &CpuWeight,
    m_start: usize,
    m_end: usize,
    out: SharedOut,
) {
    let (m, k) = (w.rows, w.cols);
    // Only the tiled path needs the f32 tile; decode steps skip the allocation.
    let mut tile = Vec::new();
    let tiled = num_rows >= FUSED_MAX_ROWS || !matches!(w.ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0);
    if tiled || !(m_end - m_start).is_multiple_of(TILE_M) {
        tile = vec![0f32; TILE_M * k];
    }
    for rb in (0..num_rows).step_by(ROW_BLOCK) {
        let rb_end = (rb + ROW_BLOCK).min(num_rows);
        for m0 in (m_start..m_end).step_by(TILE_M) {
            let c = TILE_M.min(m_end - m0);
            if rb_end - rb < FUSED_MAX_ROWS && c == TILE_M {
                // Decode streams weights from memory once: ask for a later tile while this one is
                // computed (rows are short, so the hardware prefetcher ramps up too late).
                let ahead = m0 + PREFETCH_TILES * TILE_M;
                if ahead + TILE_M <= m_end {
                    prefetch(&w.bytes[ahead * w.row_bytes..(ahead + TILE_M) * w.row_bytes]);
                }
                // A direct call per format (not a function pointer) so each inlines into this
                // `#[target_feature]` instantiation.
                match w.ty {
                    GgmlType::Q4_0 => fused_tile::<S, weights::Q4_0>(x, rb, rb_end, w, m0, &out),
                    GgmlType::Q4_1 => fused_tile::<S, weights::Q4_1>(x, rb, rb_end, w, m0, &out),
                    GgmlType::Q8_0 => fused_tile::<S, weights::Q8_0>(x, rb, rb_end, w, m0, &out),
                    _ => expand_then_multiply::<S>(x, rb, rb_end, w, m0, &mut tile, &out),
                }
                continue;
            }
            expand_tile::<S>(w, m0, c, &mut tile);
            let mut r0 = rb;
            while r0 < rb_end {
                let r = (rb_end - r0).min(4);
                match (r, c) {
                    (4, 8) => {
                        micro::<S, 4, 4>(x, r0, &tile, 0, k, &out, m, m0);
                        micro::<S, 4, 4>(x, r0, &tile, 4, k, &out, m, m0);
                    }
                    (r, c) => {
                        for ri in 0..r {
                            let mut c0 = 0;
                            while c0 < c {
                                if c - c0 >= 8 {
                                    micro::<S, 1, 8>(x, r0 + ri, &tile, c0, k, &out, m, m0);
                                    c0 += 8;
                                } else {
                                    micro::<S, 1, 1>(x, r0 + ri, &tile, c0, k, &out, m, m0);
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

/// Tiles ahead that decode prefetches (measured: 2 gives +5–15% tg128 over none; 4 and 8 less).
const PREFETCH_TILES: usize = 2;

/// Hints the CPU to bring `bytes` into cache.
#[inline(always)]
fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        // SAFETY: prefetching is a hint that never faults; SSE is part of the x86_64 baseline.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.as_ptr().cast()) };
    }
}

/// Rows below which `linear` multiplies straight from quantized blocks.
const FUSED_MAX_ROWS: usize = 4;

/// Expands weight rows `m0..m0 + c` into `tile` ([c, k] f32).
#[inline(always)]
fn expand_tile<S: F32x16>(w: &CpuWeight, m0: usize, c: usize, tile: &mut [f32]) {
    let k = w.cols;
    for ci in 0..c {
        let (src, dst) = (w.row_bytes(m0 + ci), &mut tile[ci * k..(ci + 1) * k]);
        match w.ty {
            GgmlType::Q4_0 => weights::row::<S, weights::Q4_0>(src, dst),
            GgmlType::Q4_1 => weights::row::<S, weights::Q4_1>(src, dst),
            GgmlType::Q8_0 => weights::row::<S, weights::Q8_0>(src, dst),
            _ => crate::dequant::dequant_row_kernel::<S>(w.ty, src, dst),
        }
    }
}

/// One full weight tile times a few activation rows, straight from the blocks.
#[inline(always)]
fn fused_tile<S: F32x16, F: weights::Block32>(
    x: &[f32],
    r_start: usize,
    r_end: usize,
    w: &CpuWeight,
    m0: usize,
    out: &SharedOut,
) {
    let (m, k) = (w.rows, w.cols);
    let rows = &w.bytes[m0 * w.row_bytes..(m0 + TILE_M) * w.row_bytes];
    for r in r_start..r_end {
        let dots = weights::fused_dot::<S, F, TILE_M>(&x[r * k..(r + 1) * k], rows, w.row_bytes);
        // SAFETY: columns m0..m0 + TILE_M belong to this thread (see `linear`).
        unsafe { out.part(r * m + m0, TILE_M) }.copy_from_slice(&dots);
    }
}

/// The tiled path for formats without a fused kernel.
#[inline(always)]
fn expand_then_multiply<S: F32x16>(
    x: &[f32],
    r_start: usize,
    r_end: usize,
    w: &CpuWeight,
    m0: usize,
    tile: &mut [f32],
    out: &SharedOut,
) {
    expand_tile::<S>(w, m0, TILE_M, tile);
    for r in r_start..r_end {
        micro::<S, 1, 8>(x, r, tile, 0, w.cols, out, w.rows, m0);
    }
}

/// R activation rows from `r0` × C expanded weight rows from tile row `c0`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn micro<S: F32x16, const R: usize, const C: usize>(
    x: &[f32],
    r0: usize,
    tile: &[f32],
    c0: usize,
    k: usize,
    out: &SharedOut,
    m: usize,
    m0: usize,
) {
    let mut acc = [[S::zero(); C]; R];
    let mut kk = 0;
    while kk < k {
        let mut wv = [S::zero(); C];
        for (c, v) in wv.iter_mut().enumerate() {
            *v = S::load(&tile[(c0 + c) * k + kk..]);
        }
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let xv = S::load(&x[(r0 + r) * k + kk..]);
            for (a, wc) in acc_r.iter_mut().zip(&wv) {
                *a = xv.fma(*wc, *a);
            }
        }
        kk += LANES;
    }
    for (r, acc_r) in acc.iter().enumerate() {
        // SAFETY: columns m0 + c0 .. m0 + c0 + C belong to this thread (see `linear`).
        let dst = unsafe { out.part((r0 + r) * m + m0 + c0, C) };
        for (d, a) in dst.iter_mut().zip(acc_r) {
            *d = a.hsum();
        }
    }
}

//! The Q8 path's kernel on AVX-512 VNNI: `vpdpbusd` multiplies 64 unsigned weight codes by 64
//! signed activation codes into 16 i32 lanes, so a 16-block group of one row and one column takes
//! 8 of them and one f32 epilogue (`q8` documents the layout and the arithmetic contract, which
//! this kernel follows lane for lane).
//! Tiles of up to 4 rows × 2 columns keep 8 integer and 8 float accumulators in registers; each
//! step loads a column's codes once for all rows and a row's codes once for both columns.

use super::F32x16;
use super::avx512::Avx512;
use crate::SharedOut;
use crate::q8::{LANES, Q8Rows, Q8Weight, STEP};
use std::arch::x86_64::*;

/// Columns `m_start..m_end` of every row of `out` [num_rows, m].
///
/// # Safety
/// The CPU must have avx512f, avx512bw, avx512dq, avx512vl and avx512vnni, and columns
/// `m_start..m_end` of `out` must belong to the calling thread.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn q8_part(
    x: &Q8Rows,
    num_rows: usize,
    w: &Q8Weight,
    m: usize,
    (m_start, m_end): (usize, usize),
    out: SharedOut,
) {
    let mut c0 = m_start;
    while c0 < m_end {
        let wide = m_end - c0 >= 2;
        // Weights stream from memory once per step: ask for later columns while these are
        // computed (the hardware prefetcher ramps up too late on rows this short).
        for ahead in c0 + PREFETCH_COLUMNS..(c0 + PREFETCH_COLUMNS + 2).min(m_end) {
            w.prefetch_row(ahead);
        }
        let mut r0 = 0;
        while r0 < num_rows {
            let r = (num_rows - r0).min(4);
            // A direct call per shape so each keeps its accumulators in registers.
            match (r, wide) {
                (4, true) => tile::<4, 2>(x, r0, w, c0, m, out),
                (3, true) => tile::<3, 2>(x, r0, w, c0, m, out),
                (2, true) => tile::<2, 2>(x, r0, w, c0, m, out),
                (1, true) => tile::<1, 2>(x, r0, w, c0, m, out),
                (4, false) => tile::<4, 1>(x, r0, w, c0, m, out),
                (3, false) => tile::<3, 1>(x, r0, w, c0, m, out),
                (2, false) => tile::<2, 1>(x, r0, w, c0, m, out),
                _ => tile::<1, 1>(x, r0, w, c0, m, out),
            }
            r0 += r;
        }
        c0 += if wide { 2 } else { 1 };
    }
}

/// Columns ahead of the one computed whose weights are prefetched.
const PREFETCH_COLUMNS: usize = 8;

/// Rows `r0..r0 + R` × columns `c0..c0 + C`, every group of the row.
#[inline(always)]
fn tile<const R: usize, const C: usize>(x: &Q8Rows, r0: usize, w: &Q8Weight, c0: usize, m: usize, out: SharedOut) {
    match (w.data.format.nibbles, w.data.format.half_scales) {
        (true, true) => tile_of::<R, C, true, true>(x, r0, w, c0, m, out),
        (true, false) => tile_of::<R, C, true, false>(x, r0, w, c0, m, out),
        (false, true) => tile_of::<R, C, false, true>(x, r0, w, c0, m, out),
        (false, false) => tile_of::<R, C, false, false>(x, r0, w, c0, m, out),
    }
}

/// The 16 lanes of a group of `g` blocks whose per-block entries (f16 when `HALF`, else f32)
/// start at `p`: lane L takes block L mod g.
///
/// # Safety
/// 16 entries must be readable at `p`, and the CPU must have the kernel's features.
#[inline(always)]
unsafe fn group_lanes<const HALF: bool>(p: *const u8, g: usize) -> __m512 {
    // SAFETY: the caller's contract.
    unsafe {
        let v = if HALF { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) } else { _mm512_loadu_ps(p.cast()) };
        if g == LANES {
            v
        } else {
            let iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
            _mm512_permutexvar_ps(_mm512_and_si512(iota, _mm512_set1_epi32(g as i32 - 1)), v)
        }
    }
}

/// `tile` for codes stored as nibbles (`NIB`) or bytes and scales as f16 (`HALF`) or f32.
#[inline(always)]
fn tile_of<const R: usize, const C: usize, const NIB: bool, const HALF: bool>(
    x: &Q8Rows,
    r0: usize,
    w: &Q8Weight,
    c0: usize,
    m: usize,
    out: SharedOut,
) {
    let d = &*w.data;
    let f = d.format;
    let (num_steps, step_bytes, lanes) = (d.layout.num_steps, d.step_bytes, d.layout.groups.len() * LANES);
    assert!(num_steps * step_bytes <= d.codes_span && d.codes_span.is_multiple_of(64));
    // Each row's and column's data as one bounds-checked slice, read below through pointers at
    // offsets inside it (a slice per step and group would cost more scalar work than the
    // products).
    let entry = if HALF { 2 } else { 4 };
    let mut wq = [std::ptr::null::<u8>(); C];
    let (mut ws, mut wm) = ([std::ptr::null::<u8>(); C], [std::ptr::null::<u8>(); C]);
    for c in 0..C {
        // Codes, then a scale per block, then a min per block, each section padded so that a
        // group's 16-entry load stays inside it.
        let row = w.row(c0 + c);
        assert!(row.len() >= d.codes_span + d.scales_span * if f.has_min { 2 } else { 1 });
        wq[c] = row.as_ptr();
        ws[c] = row[d.codes_span..].as_ptr();
        if f.has_min {
            wm[c] = row[d.codes_span + d.scales_span..].as_ptr();
        }
    }
    let mut xq = [std::ptr::null::<i8>(); R];
    let (mut xs, mut xsa, mut xcs) =
        ([std::ptr::null::<f32>(); R], [std::ptr::null::<f32>(); R], [std::ptr::null::<i32>(); R]);
    for r in 0..R {
        let row = r0 + r;
        xq[r] = x.codes[row * num_steps * STEP..][..num_steps * STEP].as_ptr();
        xs[r] = x.scales[row * lanes..][..lanes].as_ptr();
        xsa[r] = x.scaled_sums[row * lanes..][..lanes].as_ptr();
        xcs[r] = x.code_sums[row * lanes..][..lanes].as_ptr();
    }
    // SAFETY: for every intrinsic and pointer offset below: `q8_part`'s target features are
    // this function's (it only inlines there); every pointer is an offset inside the slice
    // checked above it: steps below `num_steps` of `step_bytes` (weights) or 64 (rows) bytes,
    // groups below `groups.len()` of 16 lanes (rows), and 16 entries from a group's first
    // block, which the scale sections' padding holds (weights).
    unsafe {
        let nibble = _mm512_set1_epi8(0x0F);
        // The upper 256 bits of a broadcast step shift right by 4: the high nibbles.
        let shifts = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
        let neg_offset = _mm512_set1_epi32(-f.offset);
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        for (gi, &(first, g, step0)) in d.layout.groups.iter().enumerate() {
            let at = gi * LANES;
            let mut isum = [[_mm512_setzero_si512(); C]; R];
            if f.offset != 0 {
                for r in 0..R {
                    let init = _mm512_mullo_epi32(_mm512_loadu_si512(xcs[r].add(at).cast()), neg_offset);
                    for v in isum[r].iter_mut() {
                        *v = init;
                    }
                }
            }
            for s in step0..step0 + d.layout.steps(g) {
                let mut u = [_mm512_setzero_si512(); C];
                for c in 0..C {
                    let codes = wq[c].add(s * step_bytes);
                    u[c] = if NIB {
                        let both = _mm512_broadcast_i64x4(_mm256_loadu_si256(codes.cast()));
                        _mm512_and_si512(_mm512_srlv_epi64(both, shifts), nibble)
                    } else {
                        _mm512_loadu_si512(codes.cast())
                    };
                }
                for r in 0..R {
                    let a = _mm512_loadu_si512(xq[r].add(s * STEP).cast());
                    for c in 0..C {
                        isum[r][c] = _mm512_dpbusd_epi32(isum[r][c], u[c], a);
                    }
                }
            }
            let mut dw = [_mm512_setzero_ps(); C];
            for c in 0..C {
                dw[c] = group_lanes::<HALF>(ws[c].add(first * entry), g);
            }
            for r in 0..R {
                let da = _mm512_loadu_ps(xs[r].add(at));
                for c in 0..C {
                    acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][c]), _mm512_mul_ps(dw[c], da), acc[r][c]);
                }
            }
            if f.has_min {
                for c in 0..C {
                    dw[c] = group_lanes::<HALF>(wm[c].add(first * entry), g);
                }
                for r in 0..R {
                    let sa = _mm512_loadu_ps(xsa[r].add(at));
                    for c in 0..C {
                        acc[r][c] = _mm512_fmadd_ps(dw[c], sa, acc[r][c]);
                    }
                }
            }
        }
        let mut vs = [[Avx512::zero(); C]; R];
        for r in 0..R {
            for c in 0..C {
                vs[r][c] = Avx512(acc[r][c]);
            }
        }
        let dots = crate::fused::hsums::<Avx512, R, C>(&vs);
        for (r, row) in dots.iter().enumerate() {
            // SAFETY: columns c0..c0 + C of every row belong to this thread (`q8_part`'s contract).
            out.part((r0 + r) * m + c0, C).copy_from_slice(row);
        }
    }
}

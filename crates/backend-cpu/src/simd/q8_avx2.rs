//! The Q8 path's kernel on AVX2 (CPUs without AVX-512 VNNI): the same layout and the same
//! arithmetic contract as `vnni.rs` (`q8` documents both), a group's 16 i32 lanes in two ymm
//! registers. A 64-byte step's lane sums — four adjacent byte products each, what `vpdpbusd`
//! computes — come from `vpmaddubsw` (pairs into i16) and `vpmaddwd` by ones (pairs of pairs into
//! i32). Every integer is exact, so the lanes equal VNNI's and the portable loop's bit for bit:
//! a pair of products stays within i16 because weight codes are at most 63 (nibbles, Q5, Q6_K)
//! and activation codes within ±127; Q8_0's codes (u = s + 128, up to 255) are taken signed
//! instead, `|s|` times `a` with `s`'s sign (at most 128 · 127 a product), which is
//! Σ u·a − 128·Σ a, the contract's sum, without its offset term.
//! Tiles of up to 2 rows × 2 columns: 8 integer accumulators of a group in registers.

use super::F32x16;
use super::avx2::Avx2;
use crate::SharedOut;
use crate::q8::{LANES, Q8Rows, Q8Weight, STEP};
use std::arch::x86_64::*;

/// Columns `m_start..m_end` of every row of `out` [num_rows, m].
///
/// # Safety
/// The CPU must have avx2, fma and f16c, and columns `m_start..m_end` of `out` must belong to the
/// calling thread.
#[target_feature(enable = "avx2,fma,f16c")]
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
        for ahead in c0 + PREFETCH_COLUMNS..(c0 + PREFETCH_COLUMNS + 2).min(m_end) {
            w.prefetch_row(ahead);
        }
        let mut r0 = 0;
        while r0 < num_rows {
            let r = (num_rows - r0).min(2);
            match (r, wide) {
                (2, true) => tile::<2, 2>(x, r0, w, c0, m, out),
                (1, true) => tile::<1, 2>(x, r0, w, c0, m, out),
                (2, false) => tile::<2, 1>(x, r0, w, c0, m, out),
                _ => tile::<1, 1>(x, r0, w, c0, m, out),
            }
            r0 += r;
        }
        c0 += if wide { 2 } else { 1 };
    }
}

/// Columns ahead of the one computed whose weights are prefetched (as `vnni.rs`).
const PREFETCH_COLUMNS: usize = 8;

#[inline(always)]
fn tile<const R: usize, const C: usize>(x: &Q8Rows, r0: usize, w: &Q8Weight, c0: usize, m: usize, out: SharedOut) {
    let f = w.data.format;
    match (f.nibbles, f.half_scales, f.offset == 128) {
        (true, true, _) => tile_of::<R, C, true, true, false>(x, r0, w, c0, m, out),
        (true, false, _) => tile_of::<R, C, true, false, false>(x, r0, w, c0, m, out),
        (false, true, true) => tile_of::<R, C, false, true, true>(x, r0, w, c0, m, out),
        (false, true, false) => tile_of::<R, C, false, true, false>(x, r0, w, c0, m, out),
        (false, false, _) => tile_of::<R, C, false, false, false>(x, r0, w, c0, m, out),
    }
}

/// The 16 lanes (two halves) of a group of `g` blocks whose per-block entries (f16 when `HALF`,
/// else f32) start at `p`: lane L takes block L mod g.
///
/// # Safety
/// 16 entries must be readable at `p`, and the CPU must have the kernel's features.
#[inline(always)]
unsafe fn group_lanes<const HALF: bool>(p: *const u8, g: usize) -> (__m256, __m256) {
    // SAFETY: the caller's contract.
    unsafe {
        if g == LANES {
            (load8::<HALF>(p, 0), load8::<HALF>(p, 8))
        } else {
            // g ≤ 8: lanes L and L + 8 take the same block.
            let idx = _mm256_and_si256(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(g as i32 - 1));
            let v = _mm256_permutevar8x32_ps(load8::<HALF>(p, 0), idx);
            (v, v)
        }
    }
}

/// Entries `i..i + 8` at `p` (f16 when `HALF`, else f32) as f32 (a function, not a closure: a
/// closure would not get the kernel's target features).
///
/// # Safety
/// The entries must be readable, and the CPU must have the kernel's features.
#[inline(always)]
unsafe fn load8<const HALF: bool>(p: *const u8, i: usize) -> __m256 {
    // SAFETY: the caller's contract.
    unsafe {
        if HALF { _mm256_cvtph_ps(_mm_loadu_si128(p.add(2 * i).cast())) } else { _mm256_loadu_ps(p.add(4 * i).cast()) }
    }
}

/// Lane sums of four byte products of unsigned `u` and signed `a` (`vpdpbusd` without its
/// accumulator), exact while every pair of products fits in i16 (see the module note).
///
/// # Safety
/// The CPU must have the kernel's features.
#[inline(always)]
unsafe fn dot4(u: __m256i, a: __m256i) -> __m256i {
    // SAFETY: the kernel's features.
    unsafe { _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1)) }
}

/// `tile` for codes stored as nibbles (`NIB`) or bytes, scales as f16 (`HALF`) or f32, and
/// byte codes with offset 128 taken signed (`SIGNED`, Q8_0).
#[inline(always)]
fn tile_of<const R: usize, const C: usize, const NIB: bool, const HALF: bool, const SIGNED: bool>(
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
    // Unsigned byte codes below 64 (Q5_0 / Q5_1 / Q5_K below 32, Q6_K below 64): a pair of
    // products fits in i16. Q8_0 (offset 128) goes signed.
    assert!(NIB || SIGNED || f.offset <= 32, "q8 AVX2: byte codes of offset {} may overflow i16", f.offset);
    let entry = if HALF { 2 } else { 4 };
    let mut wq = [std::ptr::null::<u8>(); C];
    let (mut ws, mut wm) = ([std::ptr::null::<u8>(); C], [std::ptr::null::<u8>(); C]);
    for c in 0..C {
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
    // SAFETY: as `vnni.rs`'s `tile_of`: this function only inlines into `q8_part`, whose target
    // features it uses; every pointer is an offset inside the slice checked above it.
    unsafe {
        let nibble = _mm256_set1_epi8(0x0F);
        let flip = _mm256_set1_epi8(-128);
        let neg_offset = _mm256_set1_epi32(-f.offset);
        let mut acc = [[[_mm256_setzero_ps(); 2]; C]; R];
        for (gi, &(first, g, step0)) in d.layout.groups.iter().enumerate() {
            let at = gi * LANES;
            let mut isum = [[[_mm256_setzero_si256(); 2]; C]; R];
            if f.offset != 0 && !SIGNED {
                for r in 0..R {
                    for h in 0..2 {
                        let init = _mm256_mullo_epi32(_mm256_loadu_si256(xcs[r].add(at + 8 * h).cast()), neg_offset);
                        for v in isum[r].iter_mut() {
                            v[h] = init;
                        }
                    }
                }
            }
            for s in step0..step0 + d.layout.steps(g) {
                // Bytes 0–31 of the step (lanes 0–7) and 32–63 (lanes 8–15) of each column.
                let mut u = [[_mm256_setzero_si256(); 2]; C];
                for c in 0..C {
                    let codes = wq[c].add(s * step_bytes);
                    if NIB {
                        let both = _mm256_loadu_si256(codes.cast());
                        u[c] = [_mm256_and_si256(both, nibble), _mm256_and_si256(_mm256_srli_epi16::<4>(both), nibble)];
                    } else {
                        u[c] = [_mm256_loadu_si256(codes.cast()), _mm256_loadu_si256(codes.add(32).cast())];
                    }
                }
                for r in 0..R {
                    let a = [
                        _mm256_loadu_si256(xq[r].add(s * STEP).cast()),
                        _mm256_loadu_si256(xq[r].add(s * STEP + 32).cast()),
                    ];
                    for c in 0..C {
                        for h in 0..2 {
                            let p = if SIGNED {
                                // s = u − 128 as i8; |s| (128 stays 0x80, unsigned 128) times a·sign(s).
                                let sw = _mm256_xor_si256(u[c][h], flip);
                                dot4(_mm256_abs_epi8(sw), _mm256_sign_epi8(a[h], sw))
                            } else {
                                dot4(u[c][h], a[h])
                            };
                            isum[r][c][h] = _mm256_add_epi32(isum[r][c][h], p);
                        }
                    }
                }
            }
            let mut dw = [[_mm256_setzero_ps(); 2]; C];
            for c in 0..C {
                let (lo, hi) = group_lanes::<HALF>(ws[c].add(first * entry), g);
                dw[c] = [lo, hi];
            }
            for r in 0..R {
                let da = [_mm256_loadu_ps(xs[r].add(at)), _mm256_loadu_ps(xs[r].add(at + 8))];
                for c in 0..C {
                    for h in 0..2 {
                        let scale = _mm256_mul_ps(dw[c][h], da[h]);
                        acc[r][c][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][c][h]), scale, acc[r][c][h]);
                    }
                }
            }
            if f.has_min {
                for c in 0..C {
                    let (lo, hi) = group_lanes::<HALF>(wm[c].add(first * entry), g);
                    dw[c] = [lo, hi];
                }
                for r in 0..R {
                    let sa = [_mm256_loadu_ps(xsa[r].add(at)), _mm256_loadu_ps(xsa[r].add(at + 8))];
                    for c in 0..C {
                        for h in 0..2 {
                            acc[r][c][h] = _mm256_fmadd_ps(dw[c][h], sa[h], acc[r][c][h]);
                        }
                    }
                }
            }
        }
        let mut vs = [[Avx2::zero(); C]; R];
        for r in 0..R {
            for c in 0..C {
                vs[r][c] = Avx2(acc[r][c][0], acc[r][c][1]);
            }
        }
        let dots = crate::fused::hsums::<Avx2, R, C>(&vs);
        for (r, row) in dots.iter().enumerate() {
            // SAFETY: columns c0..c0 + C of every row belong to this thread (`q8_part`'s contract).
            out.part((r0 + r) * m + c0, C).copy_from_slice(row);
        }
    }
}

//! `linear` at the declared precision Q8 (`--act-dtype q8`): each input row is cut into blocks of
//! 32 int8 codes with an f32 scale (`plumb_core::q8`), each weight into blocks of unsigned codes
//! with an f32 scale and min (w = d·(u − offset) + m), and every block pair meets in an exact
//! integer dot product — VNNI's `vpdpbusd` on CPUs that have it, AVX2's `vpmaddubsw` and
//! `vpmaddwd` on the others of x86-64 (`simd/q8_avx2.rs`), a portable loop elsewhere.
//!
//! Layout: a row's blocks form groups of 16 (the last group: the next power of two that holds
//! the rest, padded with zero blocks). Lane L of a group's 16 i32 lanes belongs to block L mod G
//! and sums 4 bytes per step over G/2 steps of 64 bytes, so a whole block's products end in the
//! lanes of that block and one f32 epilogue per group covers 16 blocks ([`place`]).
//! Weights are repacked into that layout at load (`q8_weight`); activations are packed per
//! launch (`q8_rows`). This file holds the layout, the formats and the kernels' entry.
//!
//! Arithmetic contract (every ISA, bit for bit): for output (r, c), per group in order,
//! `isum = Σ u·q − offset·Σ q` per lane (exact), then `acc = fma(isum, d_w·d_a, acc)` and, for
//! formats with a min, `acc = fma(m_w, d_a·Σq, acc)`, lane by lane; then the fixed `hsum` tree.
//! A row's result depends on its own values only, whatever the batch, the tile or the thread.

use crate::SharedOut;
use crate::simd::F32x16;
use crate::simd::scalar::Scalar;
use plumb_core::GgmlType;
use plumb_core::q8::Q8_BLOCK;

pub(crate) use crate::q8_rows::Q8Rows;
pub(crate) use crate::q8_weight::Q8Weight;

/// i32 lanes per group (one 512-bit register).
pub(crate) const LANES: usize = 16;
/// Bytes of one step of one row (one `vpdpbusd` operand).
pub(crate) const STEP: usize = 64;

/// How a weight format's blocks become Q8-path codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Format {
    /// Codes fit in four bits and are stored two per byte.
    pub nibbles: bool,
    /// The signed code is u − offset (the integer part of the epilogue subtracts offset·Σq).
    pub offset: i32,
    /// Blocks carry an additive min.
    pub has_min: bool,
    /// Scales and mins are f16 values (legacy formats), stored as such; K-quants' products of a
    /// super-block scale and a sub-scale need f32.
    pub half_scales: bool,
    /// Values per weight block (one scale each): 32, or 16 for Q6_K, whose 16-value sub-blocks
    /// take both halves of an activation block's scale.
    pub block_len: usize,
}

/// The Q8 path's view of `ty`, if it has one (float formats and Q2_K/Q3_K do not).
pub(crate) fn format(ty: GgmlType) -> Option<Format> {
    let (nibbles, offset, has_min) = match ty {
        GgmlType::Q4_0 => (true, 8, false),
        GgmlType::Q4_1 | GgmlType::Q4_K => (true, 0, true),
        GgmlType::Q5_0 => (false, 16, false),
        GgmlType::Q5_1 | GgmlType::Q5_K => (false, 0, true),
        GgmlType::Q8_0 => (false, 128, false),
        GgmlType::Q6_K => (false, 32, false),
        _ => return None,
    };
    let half_scales = !matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K);
    let block_len = if ty == GgmlType::Q6_K { 16 } else { Q8_BLOCK };
    Some(Format { nibbles, offset, has_min, half_scales, block_len })
}

/// Whether `linear` can take Q8 activations for a weight of `ty` with `k` columns.
pub(crate) fn supports(ty: GgmlType, k: usize) -> bool {
    format(ty).is_some() && ty.bytes_for(k as u64).is_some() && k.is_multiple_of(Q8_BLOCK)
}

/// The groups of a row of `num_blocks` weight blocks of `block_len` values: (first block,
/// blocks G, first step).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub block_len: usize,
    pub groups: Vec<(usize, usize, usize)>,
    pub num_steps: usize,
}

impl Layout {
    pub fn new(num_blocks: usize, block_len: usize) -> Layout {
        let (mut groups, mut first, mut step) = (Vec::new(), 0, 0);
        while first < num_blocks {
            let g = (num_blocks - first).min(LANES).next_power_of_two();
            groups.push((first, g, step));
            first += g;
            step += steps(g, block_len);
        }
        Layout { block_len, groups, num_steps: step }
    }

    /// Steps of a group of `g` blocks.
    #[inline(always)]
    pub fn steps(&self, g: usize) -> usize {
        steps(g, self.block_len)
    }
}

/// Steps of a group of `g` blocks of `block_len` values (64 bytes a step; at least one, padded).
pub(crate) fn steps(g: usize, block_len: usize) -> usize {
    (g * block_len / STEP).max(1)
}

/// Where byte `j` (0..4) of lane `lane` at step `s` of a group of `g` blocks of `block_len`
/// values comes from: (block in the group, value in the block), or `None` for padding.
pub(crate) fn place(g: usize, block_len: usize, s: usize, lane: usize, j: usize) -> Option<(usize, usize)> {
    let at = 4 * (s * (LANES / g) + lane / g) + j;
    (at < block_len).then_some((lane % g, at))
}

/// Columns `m_start..m_end` of every row of `out` [num_rows, m] = x · wᵀ on the Q8 path, with the
/// VNNI kernel when `vnni` holds, else the AVX2 one where `isa` has AVX2, else portable code (the
/// same bits).
#[allow(clippy::too_many_arguments)]
pub(crate) fn part(
    vnni: bool,
    isa: crate::simd::Isa,
    x: &Q8Rows,
    num_rows: usize,
    w: &Q8Weight,
    m: usize,
    cols: (usize, usize),
    out: SharedOut,
) {
    #[cfg(target_arch = "x86_64")]
    if vnni {
        // SAFETY: `vnni` is true only where the backend saw avx512f/bw/vl/dq and avx512vnni.
        return unsafe { crate::simd::vnni::q8_part(x, num_rows, w, m, cols, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if isa.kind() != crate::simd::IsaKind::Scalar {
        // SAFETY: an AVX2 or AVX-512 `Isa` exists only where `Isa::cpu_has` saw avx2, fma and f16c.
        return unsafe { crate::simd::q8_avx2::q8_part(x, num_rows, w, m, cols, out) };
    }
    let _ = (vnni, isa);
    for r in 0..num_rows {
        for c in cols.0..cols.1 {
            let dot = dot_portable(x, r, w, c);
            // SAFETY: columns m_start..m_end of every row belong to the calling thread.
            (unsafe { out.part(r * m + c, 1) })[0] = dot;
        }
    }
}

/// One output by the arithmetic contract, lane by lane.
pub(crate) fn dot_portable(x: &Q8Rows, r: usize, w: &Q8Weight, c: usize) -> f32 {
    let d = &*w.data;
    let mut acc = [0f32; LANES];
    for (gi, &(_, g, step0)) in d.layout.groups.iter().enumerate() {
        let mut isum = [0i32; LANES];
        for (i, &q) in isum.iter_mut().zip(x.lanes(&x.code_sums, r, gi)) {
            *i = -d.format.offset * q;
        }
        for s in step0..step0 + d.layout.steps(g) {
            let (u, q) = (w.step(c, s), x.step(r, s));
            for (lane, i) in isum.iter_mut().enumerate() {
                for j in 0..4 {
                    let at = 4 * lane + j;
                    let code = if d.format.nibbles { (u[at % 32] >> (4 * (at / 32))) & 0x0F } else { u[at] };
                    *i += code as i32 * q[at] as i32;
                }
            }
        }
        let (dw, da) = (w.lanes::<false>(c, gi), x.lanes(&x.scales, r, gi));
        for lane in 0..LANES {
            acc[lane] = (isum[lane] as f32).mul_add(dw[lane] * da[lane], acc[lane]);
        }
        if d.format.has_min {
            let (mw, sa) = (w.lanes::<true>(c, gi), x.lanes(&x.scaled_sums, r, gi));
            for lane in 0..LANES {
                acc[lane] = mw[lane].mul_add(sa[lane], acc[lane]);
            }
        }
    }
    Scalar::load(&acc).hsum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_of_a_group_has_one_place() {
        for (g, len) in [1, 2, 4, 8, 16].into_iter().flat_map(|g| [(g, 32), (g, 16)]) {
            let mut seen = vec![0; g * len];
            for s in 0..steps(g, len) {
                for lane in 0..LANES {
                    for j in 0..4 {
                        if let Some((b, v)) = place(g, len, s, lane, j) {
                            assert_eq!(b, lane % g);
                            seen[b * len + v] += 1;
                        }
                    }
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "group of {g} blocks of {len}: {seen:?}");
        }
    }

    #[test]
    fn layouts_cover_the_row_with_full_groups_then_one_padded() {
        assert_eq!(Layout::new(18, 32).groups, vec![(0, 16, 0), (16, 2, 8)]);
        assert_eq!(Layout::new(48, 32).groups, vec![(0, 16, 0), (16, 16, 8), (32, 16, 16)]);
        assert_eq!(Layout::new(1, 32), Layout { block_len: 32, groups: vec![(0, 1, 0)], num_steps: 1 });
        assert_eq!(Layout::new(21, 32).groups, vec![(0, 16, 0), (16, 8, 8)]);
        assert_eq!(Layout::new(48, 16).groups, vec![(0, 16, 0), (16, 16, 4), (32, 16, 8)]);
        assert_eq!(Layout::new(48, 16).num_steps, 12);
    }
}

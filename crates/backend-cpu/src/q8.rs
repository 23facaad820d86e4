//! `linear` at the declared precision Q8 (`--act-dtype q8`): each input row is cut into blocks of
//! 32 int8 codes with an f32 scale (`plumb_core::q8`), each weight into blocks of unsigned codes
//! with an f32 scale and min (w = d·(u − offset) + m), and every block pair meets in an exact
//! integer dot product — VNNI's `vpdpbusd` on CPUs that have it, a portable loop elsewhere.
//!
//! Layout: a row's blocks form groups of 16 (the last group: the next power of two that holds
//! the rest, padded with zero blocks). Lane L of a group's 16 i32 lanes belongs to block L mod G
//! and sums 4 bytes per step over G/2 steps of 64 bytes, so a whole block's products end in the
//! lanes of that block and one f32 epilogue per group covers 16 blocks ([`place`]).
//! Weights are repacked into that layout at load; activations are packed per launch.
//!
//! Arithmetic contract (every ISA, bit for bit): for output (r, c), per group in order,
//! `isum = Σ u·q − offset·Σ q` per lane (exact), then `acc = fma(isum, d_w·d_a, acc)` and, for
//! formats with a min, `acc = fma(m_w, d_a·Σq, acc)`, lane by lane; then the fixed `hsum` tree.
//! A row's result depends on its own values only, whatever the batch, the tile or the thread.

use crate::SharedOut;
use crate::aligned::Aligned;
use crate::pool::Pool;
use crate::simd::scalar::Scalar;
use crate::simd::{F32x16, Isa, simd_dispatch};
use plumb_core::GgmlType;
use plumb_core::q8::{Q8_BLOCK, Q8_MAX};
use plumb_core::quant::{f16_at, k_scale_min};
use std::sync::{Arc, Mutex};

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

/// A row of `ty` as the Q8 path's unsigned codes (`values`, one per weight), scales and mins
/// (`ds`, `ms`, one per block of the format's `block_len`), with w = d·(u − offset) + m exactly
/// (d and m are products of at most 19 significant bits, exact in f32).
fn row_codes(ty: GgmlType, row: &[u8], values: &mut [u8], ds: &mut [f32], ms: &mut [f32]) {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q4_1 => {
            let size = if ty == GgmlType::Q4_0 { 18 } else { 20 };
            for (b, blk) in row.chunks_exact(size).enumerate() {
                let (v, qs) = (&mut values[b * 32..(b + 1) * 32], &blk[size - 16..]);
                for i in 0..16 {
                    (v[i], v[16 + i]) = (qs[i] & 0x0F, qs[i] >> 4);
                }
                ds[b] = f16_at(blk, 0);
                ms[b] = if ty == GgmlType::Q4_1 { f16_at(blk, 2) } else { 0.0 };
            }
        }
        GgmlType::Q5_0 | GgmlType::Q5_1 => {
            let (size, qh_at) = if ty == GgmlType::Q5_0 { (22, 2) } else { (24, 4) };
            for (b, blk) in row.chunks_exact(size).enumerate() {
                let qh = u32::from_le_bytes(blk[qh_at..qh_at + 4].try_into().expect("4 bytes"));
                let (v, qs) = (&mut values[b * 32..(b + 1) * 32], &blk[qh_at + 4..]);
                for (i, x) in v.iter_mut().enumerate() {
                    let low = if i < 16 { qs[i] & 0x0F } else { qs[i - 16] >> 4 };
                    *x = low | ((((qh >> i) & 1) as u8) << 4);
                }
                ds[b] = f16_at(blk, 0);
                ms[b] = if ty == GgmlType::Q5_1 { f16_at(blk, 2) } else { 0.0 };
            }
        }
        GgmlType::Q8_0 => {
            for (b, blk) in row.chunks_exact(34).enumerate() {
                for (x, &q) in values[b * 32..(b + 1) * 32].iter_mut().zip(&blk[2..]) {
                    *x = (q as i8 as i32 + 128) as u8;
                }
                (ds[b], ms[b]) = (f16_at(blk, 0), 0.0);
            }
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let size = if ty == GgmlType::Q4_K { 144 } else { 176 };
            for (sb, blk) in row.chunks_exact(size).enumerate() {
                let (sc, mn) = k_scale_min(&blk[4..16]);
                let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
                let (qh, qs) =
                    if ty == GgmlType::Q4_K { (&[][..], &blk[16..144]) } else { (&blk[16..48], &blk[48..176]) };
                for sub in 0..8 {
                    let v = &mut values[(sb * 8 + sub) * 32..][..32];
                    for (l, x) in v.iter_mut().enumerate() {
                        let low = (qs[(sub / 2) * 32 + l] >> (4 * (sub % 2))) & 0x0F;
                        let high = if qh.is_empty() { 0 } else { (qh[l] >> sub) & 1 };
                        *x = low | (high << 4);
                    }
                    ds[sb * 8 + sub] = d * sc[sub] as f32;
                    ms[sb * 8 + sub] = -(dmin * mn[sub] as f32);
                }
            }
        }
        GgmlType::Q6_K => {
            for (sb, blk) in row.chunks_exact(210).enumerate() {
                let (ql, qh, scales, d) = (&blk[0..128], &blk[128..192], &blk[192..208], f16_at(blk, 208));
                for (idx, x) in values[sb * 256..(sb + 1) * 256].iter_mut().enumerate() {
                    let (half, quarter, i) = (idx / 128, (idx / 32) % 4, idx % 32);
                    let low = (ql[half * 64 + (quarter % 2) * 32 + i] >> (4 * (quarter / 2))) & 0x0F;
                    *x = low | (((qh[half * 32 + i] >> (2 * quarter)) & 3) << 4);
                }
                for sub in 0..16 {
                    (ds[sb * 16 + sub], ms[sb * 16 + sub]) = (d * scales[sub] as i8 as f32, 0.0);
                }
            }
        }
        _ => unreachable!("{ty} has no Q8 codes"),
    }
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

/// A weight repacked for the Q8 path (shared by the slices `grouped_linear` takes). Each row is
/// one contiguous run on a 64-byte boundary — codes, then one scale per block, then one min per
/// block — no larger than the checkpoint's own row for legacy formats, so decode streams no
/// more bytes than the f32 path does.
#[derive(Debug)]
pub(crate) struct Q8Data {
    pub format: Format,
    pub layout: Layout,
    /// Bytes of one step of one row: 32 (nibbles: value i < 32 in the low half of byte i, value
    /// 32 + i in its high half) or 64.
    pub step_bytes: usize,
    /// Bytes of a row's codes, rounded up to 64; its scales start there.
    pub codes_span: usize,
    /// Bytes of a row's scales (as of its mins): an entry per block of every group (padding
    /// blocks included, 0), then 16 more so a group's 16-entry load stays inside.
    pub scales_span: usize,
    /// Bytes of one row: [codes][scales][mins, for formats with mins], padded to 64.
    pub row_bytes: usize,
    pub rows: Aligned<u8>,
}

/// Rows `first_row..` of a repacked weight.
#[derive(Clone, Debug)]
pub(crate) struct Q8Weight {
    pub data: Arc<Q8Data>,
    pub first_row: usize,
}

impl Q8Weight {
    /// Repacks `rows` rows of `row_bytes` bytes of `ty` (`supports(ty, cols)` must hold), rows
    /// split over the pool's threads.
    pub fn repack(pool: &Pool, ty: GgmlType, rows: usize, cols: usize, bytes: &[u8], row_bytes: usize) -> Q8Weight {
        let format = format(ty).expect("a Q8-path format");
        let (block_len, num_blocks) = (format.block_len, cols / format.block_len);
        let layout = Layout::new(num_blocks, block_len);
        let step_bytes = if format.nibbles { STEP / 2 } else { STEP };
        let codes_span = (layout.num_steps * step_bytes).next_multiple_of(64);
        let entry = if format.half_scales { 2 } else { 4 };
        let padded_blocks: usize = layout.groups.iter().map(|&(_, g, _)| g).sum();
        let scales_span = (padded_blocks + LANES) * entry;
        let stride = (codes_span + scales_span * if format.has_min { 2 } else { 1 }).next_multiple_of(64);
        // Which of a row's values each byte of its codes takes (`place`, worked out once).
        let mut gather = vec![u32::MAX; layout.num_steps * STEP];
        for &(first, g, step0) in &layout.groups {
            for s in 0..layout.steps(g) {
                for lane in 0..LANES {
                    for j in 0..4 {
                        if let Some((b, v)) = place(g, block_len, s, lane, j).filter(|&(b, _)| first + b < num_blocks) {
                            gather[(step0 + s) * STEP + 4 * lane + j] = ((first + b) * block_len + v) as u32;
                        }
                    }
                }
            }
        }
        let repack_row = |row: &[u8], dst: &mut [u8], (values, ds, ms): &mut (Vec<u8>, Vec<f32>, Vec<f32>)| {
            let (codes, rest) = dst.split_at_mut(codes_span);
            let (scales, mins) = rest.split_at_mut(scales_span);
            row_codes(ty, row, values, ds, ms);
            let sections: &mut [(&mut [u8], &[f32])] =
                &mut [(scales, &ds[..]), (if format.has_min { mins } else { &mut [] }, &ms[..])];
            for (dst, from) in sections.iter_mut().filter(|(dst, _)| !dst.is_empty()) {
                if format.half_scales {
                    for (d, &v) in dst.chunks_exact_mut(2).zip(from.iter()) {
                        let h = half::f16::from_f32(v);
                        assert_eq!(h.to_f32().to_bits(), v.to_bits(), "{ty}: a scale that is not an f16 value");
                        d.copy_from_slice(&h.to_le_bytes());
                    }
                } else {
                    for (d, &v) in dst.chunks_exact_mut(4).zip(from.iter()) {
                        d.copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
            for (step, from) in gather.chunks_exact(STEP).enumerate() {
                let mut v = [0u8; STEP];
                for (x, &src) in v.iter_mut().zip(from) {
                    *x = if src == u32::MAX { 0 } else { values[src as usize] };
                }
                let dst = &mut codes[step * step_bytes..][..step_bytes];
                if format.nibbles {
                    for (i, d) in dst.iter_mut().enumerate() {
                        *d = v[i] | (v[32 + i] << 4);
                    }
                } else {
                    dst.copy_from_slice(&v);
                }
            }
        };
        let mut out = Aligned::<u8>::zeroed(rows * stride);
        {
            let parts: Vec<Mutex<&mut [u8]>> = out.chunks_mut(REPACK_ROWS * stride).map(Mutex::new).collect();
            let next = std::sync::atomic::AtomicUsize::new(0);
            pool.run(&|_, _| {
                let mut scratch = (vec![0u8; cols], vec![0f32; num_blocks], vec![0f32; num_blocks]);
                loop {
                    let p = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(part) = parts.get(p) else { break };
                    let mut part = part.lock().expect("a part of the repacked rows");
                    for (i, dst) in part.chunks_exact_mut(stride).enumerate() {
                        let r = p * REPACK_ROWS + i;
                        repack_row(&bytes[r * row_bytes..(r + 1) * row_bytes], dst, &mut scratch);
                    }
                }
            });
        }
        let data = Q8Data { format, layout, step_bytes, codes_span, scales_span, row_bytes: stride, rows: out };
        Q8Weight { data: Arc::new(data), first_row: 0 }
    }

    /// The rows from `first` on, as a weight of their own (the caller bounds them).
    pub fn slice(&self, first: usize) -> Q8Weight {
        Q8Weight { data: self.data.clone(), first_row: self.first_row + first }
    }

    /// Row `c`, whole.
    #[inline(always)]
    pub fn row(&self, c: usize) -> &[u8] {
        let d = &*self.data;
        &d.rows[(self.first_row + c) * d.row_bytes..][..d.row_bytes]
    }

    /// Hints the CPU to bring row `c` into cache.
    #[inline(always)]
    pub fn prefetch_row(&self, c: usize) {
        crate::linear::prefetch(self.row(c));
    }

    /// Row `c`'s codes of step `s` (global step index).
    #[inline(always)]
    pub fn step(&self, c: usize, s: usize) -> &[u8] {
        let d = &*self.data;
        &self.row(c)[s * d.step_bytes..][..d.step_bytes]
    }

    /// Row `c`'s scales (`MINS`: mins) of group `gi` as its 16 lanes see them (lane L: block
    /// L mod G of the group).
    pub fn lanes<const MINS: bool>(&self, c: usize, gi: usize) -> [f32; LANES] {
        let d = &*self.data;
        let (first, g, _) = d.layout.groups[gi];
        let section = &self.row(c)[d.codes_span + if MINS { d.scales_span } else { 0 }..][..d.scales_span];
        std::array::from_fn(|lane| {
            let b = first + lane % g;
            if d.format.half_scales {
                half::f16::from_le_bytes([section[2 * b], section[2 * b + 1]]).to_f32()
            } else {
                f32::from_le_bytes(section[4 * b..4 * b + 4].try_into().expect("4 bytes"))
            }
        })
    }
}

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

/// Rows a thread repacks at a time.
const REPACK_ROWS: usize = 64;

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

/// Columns `m_start..m_end` of every row of `out` [num_rows, m] = x · wᵀ on the Q8 path, with the
/// VNNI kernel when `vnni` holds, else portable code (the same bits).
pub(crate) fn part(
    vnni: bool,
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
    let _ = vnni;
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

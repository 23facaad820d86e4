//! The Q8 path's weights (`q8`): a checkpoint's rows repacked at load into the layout the
//! integer kernels read — unsigned codes by step, then one scale and one min per block — on
//! 64-byte boundaries, no larger than the checkpoint's rows for the legacy formats.

use crate::aligned::Aligned;
use crate::pool::Pool;
use crate::q8::{Format, LANES, Layout, STEP, format, place};
use plumb_core::GgmlType;
use plumb_core::quant::{f16_at, k_scale_min};
use std::sync::{Arc, Mutex};

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

/// Rows a thread repacks at a time.
const REPACK_ROWS: usize = 64;

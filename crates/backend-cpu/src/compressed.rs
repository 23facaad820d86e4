//! DeepSeek V4's compressed sparse attention ops on the CPU (`plumb_core::CompressedAttentionOps`):
//! the reference's order of operations (backend-ref's compressed.rs) in float32, rows (or
//! entries) on threads. Dot products run as 16 lane sums over the vector, then a fixed tree, an
//! order fixed by the length alone; every softmax subtracts its maximum; the indexer's top-k is a
//! stable sort, so ties go to the lower entry id. Each output row is a function of its own row
//! and the entries it may see, never of the batch. The grouped output projection is one `linear`
//! launch of the groups' products, each as `linear` computes it.

use crate::scored_moe::descending;
use crate::simd::{F32x16, simd_dispatch};
use crate::{CpuBackend, CpuKvCache, CpuTensor, CpuWeight, SharedOut};
use plumb_core::{CompressedAttentionOps, Compression, LinearOps};

/// Σ a_i·b_i: 16 running lane sums (element i into lane i % 16; a product, then an add),
/// then a pairwise tree; on any ISA the same bits, since a vector lane does what a scalar lane
/// would.
#[inline(always)]
fn dot_s<S: F32x16>(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let whole = a.len() / 16 * 16;
    let mut acc = S::zero();
    for i in (0..whole).step_by(16) {
        acc = acc.add(S::load(&a[i..]).mul(S::load(&b[i..])));
    }
    let mut lanes = [0f32; 16];
    acc.store(&mut lanes);
    for (l, (x, y)) in a[whole..].iter().zip(&b[whole..]).enumerate() {
        lanes[l] += x * y;
    }
    let mut width = 16;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            lanes[l] += lanes[l + width];
        }
    }
    lanes[0]
}

/// 1 / sqrt(mean(x²) + eps), the squares summed in float64 in order.
fn inv_rms(x: &[f32], eps: f64) -> f32 {
    let ms = x.iter().fold(0f64, |a, &v| a + v as f64 * v as f64) / x.len() as f64;
    (1.0 / (ms + eps).sqrt()) as f32
}

/// A weight's values as f32 (small parameter matrices).
fn values(w: &CpuWeight) -> Vec<f32> {
    if let Some(d) = &w.dense {
        return d.clone();
    }
    let mut v = vec![0f32; w.rows * w.cols];
    plumb_core::quant::dequantize(w.ty, &w.bytes, &mut v)
        .unwrap_or_else(|e| panic!("`{}` does not dequantize: {e}", w.name));
    v
}

impl CompressedAttentionOps for CpuBackend {
    fn rms_norm_unweighted(&self, x: &CpuTensor, width: usize, eps: f64, out: &mut CpuTensor) {
        assert!(width > 0 && x.cols.is_multiple_of(width), "rms_norm_unweighted: width {width} of {}", x.cols);
        assert_eq!((out.rows, out.cols), (x.rows, x.cols), "rms_norm_unweighted: shape mismatch");
        let cols = x.cols;
        let shared = SharedOut::new(&mut out.data);
        self.par_rows(x.rows, &|r| {
            // SAFETY: threads get disjoint row ranges; `out` outlives the call.
            let o = unsafe { shared.part(r.start * cols, r.len() * cols) };
            for (s, o) in x.data[r.start * cols..r.end * cols].chunks_exact(width).zip(o.chunks_exact_mut(width)) {
                let inv = inv_rms(s, eps);
                for (o, &v) in o.iter_mut().zip(s) {
                    *o = v * inv;
                }
            }
        });
    }

    fn rope_tail_interleaved(
        &self,
        x: &mut CpuTensor,
        table: &CpuTensor,
        num_heads: usize,
        head_dim: usize,
        inverse: bool,
    ) {
        let half = table.cols / 2;
        assert!(2 * half <= head_dim && x.cols == num_heads * head_dim, "rope_tail_interleaved: shapes");
        assert_eq!(table.rows, x.rows, "rope_tail_interleaved: one table row per row");
        let first = head_dim - 2 * half;
        let cols = x.cols;
        for (row, tab) in x.data.chunks_exact_mut(cols).zip(table.data.chunks_exact(2 * half)) {
            let (cos, sin) = tab.split_at(half);
            for head in row.chunks_exact_mut(head_dim) {
                for (i, pair) in head[first..].chunks_exact_mut(2).enumerate() {
                    let (c, s) = (cos[i], if inverse { -sin[i] } else { sin[i] });
                    let (x0, x1) = (pair[0], pair[1]);
                    pair[0] = x0 * c - x1 * s;
                    pair[1] = x1 * c + x0 * s;
                }
            }
        }
    }

    fn compress_kv(
        &self,
        kv: &CpuTensor,
        gate: &CpuTensor,
        ape: &CpuWeight,
        norm: &CpuWeight,
        eps: f64,
        c: Compression,
        out: &mut CpuTensor,
    ) {
        let norm = norm.vector();
        let (m, d) = (c.ratio, norm.len());
        let series = if c.overlap { 2 } else { 1 };
        assert!(m > 0 && kv.rows.is_multiple_of(m), "compress_kv: {} rows are not whole windows of {m}", kv.rows);
        assert_eq!((kv.cols, gate.rows, gate.cols), (series * d, kv.rows, series * d), "compress_kv: kv/gate shapes");
        assert_eq!((ape.rows, ape.cols), (m, series * d), "compress_kv: ape shape");
        assert!(!c.prev_window || c.overlap, "compress_kv: a previous window is only read with overlap");
        let num_entries = c.num_entries(kv.rows);
        assert_eq!((out.rows, out.cols), (num_entries, d), "compress_kv: out shape");
        let ape = values(ape);
        let cols = series * d;
        let shared = SharedOut::new(&mut out.data);
        self.par_rows(num_entries, &|entries| {
            let (mut slots, mut z, mut pooled) = (Vec::with_capacity(2 * m), vec![0f32; 2 * m], vec![0f32; d]);
            for e in entries {
                let w = e + usize::from(c.prev_window);
                // (row, column offset, ape row) of each slot, in slot order: the previous window's
                // Ca/Za (overlap, when there is one), then this window's Cb/Zb (or its one series).
                slots.clear();
                if c.overlap && w > 0 {
                    slots.extend((0..m).map(|j| ((w - 1) * m + j, 0, j)));
                }
                let off = if c.overlap { d } else { 0 };
                slots.extend((0..m).map(|j| (w * m + j, off, j)));
                let z = &mut z[..slots.len()];
                for (ch, p) in pooled.iter_mut().enumerate() {
                    for (zv, &(r, o, j)) in z.iter_mut().zip(&slots) {
                        *zv = gate.data[r * cols + o + ch] + ape[j * cols + o + ch];
                    }
                    let max = z.iter().copied().fold(z[0], |a, b| if b > a { b } else { a });
                    let mut sum = 0f32;
                    for zv in z.iter_mut() {
                        *zv = (*zv - max).exp();
                        sum += *zv;
                    }
                    let mut acc = 0f32;
                    for (&(r, o, _), &ej) in slots.iter().zip(z.iter()) {
                        acc += kv.data[r * cols + o + ch] * (ej / sum);
                    }
                    *p = acc;
                }
                let inv = inv_rms(&pooled, eps);
                // SAFETY: threads get disjoint entries; `out` outlives the call.
                let o = unsafe { shared.part(e * d, d) };
                for ((o, &v), &wt) in o.iter_mut().zip(&pooled).zip(norm) {
                    *o = wt * (v * inv);
                }
            }
        });
    }

    fn indexer_topk(
        &self,
        q: &CpuTensor,
        keys: &CpuTensor,
        w: &CpuTensor,
        num_visible: &[u32],
        top_k: usize,
        q_scale: f64,
        w_scale: f64,
    ) -> Vec<i32> {
        let (d, heads) = (keys.cols, w.cols);
        assert_eq!((q.cols, w.rows, num_visible.len()), (heads * d, q.rows, q.rows), "indexer_topk: shapes");
        let args = IndexerArgs { q, keys, w, heads, q_scale: q_scale as f32, w_scale: w_scale as f32 };
        // Every (row, entry) score alone, on any thread: a decode row's entries spread too.
        let visible: Vec<usize> = num_visible.iter().map(|&v| (v as usize).min(keys.rows)).collect();
        let stride = visible.iter().copied().max().unwrap_or(0);
        let mut scores = vec![0f32; q.rows * stride];
        let shared = SharedOut::new(&mut scores);
        let isa = self.isa();
        self.par_rows(q.rows * stride, &|units| {
            // SAFETY: threads get disjoint units; `scores` outlives the call.
            let out = unsafe { shared.part(units.start, units.len()) };
            index_scores(isa, &args, &visible, stride, units.start, out);
        });
        let ids = std::sync::Mutex::new(vec![-1i32; q.rows * top_k]);
        self.par_rows(q.rows, &|rows| {
            let (mut order, mut chosen) = (Vec::new(), Vec::with_capacity(top_k));
            for t in rows {
                let row = &scores[t * stride..t * stride + visible[t]];
                order.clear();
                order.extend(0..visible[t]);
                order.sort_by(|&a, &b| descending(row[a], row[b]));
                chosen.clear();
                chosen.extend((0..top_k).map(|j| order.get(j).map_or(-1, |&s| s as i32)));
                ids.lock().unwrap_or_else(|e| e.into_inner())[t * top_k..(t + 1) * top_k].copy_from_slice(&chosen);
            }
        });
        ids.into_inner().unwrap_or_else(|e| e.into_inner())
    }

    fn sink_attention(
        &self,
        q: &CpuTensor,
        kv: &CpuTensor,
        windows: &[(u32, u32)],
        entries: &CpuTensor,
        entry_ids: &[i32],
        sinks: &CpuWeight,
        scale: f64,
        out: &mut CpuTensor,
    ) {
        let sinks = sinks.vector();
        let (d, heads) = (kv.cols, sinks.len());
        assert_eq!((q.cols, out.rows, out.cols, windows.len()), (heads * d, q.rows, q.cols, q.rows), "sink_attention");
        assert!(q.rows == 0 || entry_ids.len().is_multiple_of(q.rows), "sink_attention: entry ids per row");
        let per_row = entry_ids.len().checked_div(q.rows).unwrap_or(0);
        // Each row's chosen entries in ascending id (the order their terms are summed in).
        let chosen: Vec<Vec<usize>> = (0..q.rows)
            .map(|t| {
                let mut c: Vec<usize> = entry_ids[t * per_row..(t + 1) * per_row]
                    .iter()
                    .filter(|&&e| e >= 0)
                    .map(|&e| e as usize)
                    .collect();
                c.sort_unstable();
                assert!(c.windows(2).all(|p| p[0] < p[1]), "sink_attention: an entry chosen twice");
                c
            })
            .collect();
        let args = SinkArgs { q, kv, windows, entries, chosen: &chosen, sinks, scale: scale as f32 };
        let shared = SharedOut::new(&mut out.data);
        let isa = self.isa();
        // Every (row, head) alone, on any thread: a decode row's heads spread too.
        self.par_rows(q.rows * heads, &|units| {
            for u in units {
                // SAFETY: threads get disjoint (row, head) units; `out` outlives the call.
                let oh = unsafe { shared.part(u * d, d) };
                sink_head(isa, &args, u / heads, u % heads, oh);
            }
        });
    }

    fn write_paged_rows(&self, kv: &mut CpuKvCache, first_layer: usize, col: usize, slots: &[u32], src: &CpuTensor) {
        assert_eq!(src.rows, slots.len(), "write_paged_rows: a row per slot");
        kv.write_rows(first_layer, col, slots, &src.data);
    }

    fn read_paged_rows(&self, kv: &CpuKvCache, first_layer: usize, col: usize, slots: &[u32], out: &mut CpuTensor) {
        assert_eq!(out.rows, slots.len(), "read_paged_rows: a row per slot");
        kv.read_rows(first_layer, col, slots, &mut out.data);
    }

    fn grouped_linear(&self, x: &CpuTensor, w: &CpuWeight, groups: usize, out: &mut CpuTensor) {
        assert!(groups > 0 && w.rows.is_multiple_of(groups), "grouped_linear: {} rows in {groups} groups", w.rows);
        let (k, r) = (w.cols, w.rows / groups);
        assert_eq!((x.cols, out.rows, out.cols), (groups * k, x.rows, w.rows), "grouped_linear: shapes");
        let n = x.rows;
        // Each group's rows of w as a weight of its own (whole rows of the same bytes), each
        // group's columns of x as an input of its own: one launch of `groups` products.
        let parts: Vec<CpuWeight> = (0..groups)
            .map(|g| CpuWeight {
                name: format!("{} (group {g})", w.name),
                ty: w.ty,
                rows: r,
                cols: k,
                bytes: w.bytes.slice(g * r * w.row_bytes, r * w.row_bytes),
                row_bytes: w.row_bytes,
                dense: None,
                q8: w.q8.as_ref().map(|q| q.slice(g * r)),
            })
            .collect();
        let xs: Vec<CpuTensor> = (0..groups)
            .map(|g| CpuTensor {
                rows: n,
                cols: k,
                data: x.data.chunks_exact(x.cols).flat_map(|row| &row[g * k..(g + 1) * k]).copied().collect(),
            })
            .collect();
        let mut outs: Vec<CpuTensor> =
            (0..groups).map(|_| CpuTensor { rows: n, cols: r, data: vec![0.0; n * r] }).collect();
        self.linear_batched(
            &xs.iter().collect::<Vec<_>>(),
            &parts.iter().collect::<Vec<_>>(),
            &mut outs.iter_mut().collect::<Vec<_>>(),
        );
        for (row, o) in out.data.chunks_exact_mut(w.rows).enumerate() {
            for (g, part) in outs.iter().enumerate() {
                o[g * r..(g + 1) * r].copy_from_slice(&part.data[row * r..(row + 1) * r]);
            }
        }
    }
}

/// What `index_scores` reads.
struct IndexerArgs<'a> {
    q: &'a CpuTensor,
    keys: &'a CpuTensor,
    w: &'a CpuTensor,
    heads: usize,
    q_scale: f32,
    w_scale: f32,
}

simd_dispatch! {
    /// `out[i]` := the indexer score of unit `first + i` (row `u / stride`, entry `u % stride`;
    /// 0 past the row's visible entries): heads summed in order.
    fn index_scores(a: &IndexerArgs, visible: &[usize], stride: usize, first: usize, out: &mut [f32]) => index_scores_kernel
}

#[inline(always)]
fn index_scores_kernel<S: F32x16>(a: &IndexerArgs, visible: &[usize], stride: usize, first: usize, out: &mut [f32]) {
    let d = a.keys.cols;
    for (i, o) in out.iter_mut().enumerate() {
        let (t, s) = ((first + i) / stride, (first + i) % stride);
        if s >= visible[t] {
            *o = 0.0;
            continue;
        }
        let key = &a.keys.data[s * d..(s + 1) * d];
        // Plain loops: a closure would not inherit the kernel's target features.
        let mut acc = 0f32;
        for h in 0..a.heads {
            let at = (t * a.heads + h) * d;
            let qk = dot_s::<S>(&a.q.data[at..at + d], key);
            let relu = if qk > 0.0 { qk } else { 0.0 };
            acc += (a.w.data[t * a.heads + h] * a.w_scale) * (relu * a.q_scale);
        }
        *o = acc;
    }
}

/// What `sink_head` reads.
struct SinkArgs<'a> {
    q: &'a CpuTensor,
    kv: &'a CpuTensor,
    windows: &'a [(u32, u32)],
    entries: &'a CpuTensor,
    chosen: &'a [Vec<usize>],
    sinks: &'a [f32],
    scale: f32,
}

simd_dispatch! {
    /// Head `h` of row `t`: scores over the window then the chosen entries, the softmax with
    /// the sink, and `oh` := Σ p_j · v_j in that order (each element: a product, then an add).
    fn sink_head(a: &SinkArgs, t: usize, h: usize, oh: &mut [f32]) => sink_head_kernel
}

#[inline(always)]
fn sink_head_kernel<S: F32x16>(a: &SinkArgs, t: usize, h: usize, oh: &mut [f32]) {
    let d = a.kv.cols;
    let heads = a.sinks.len();
    let (start, end) = (a.windows[t].0 as usize, a.windows[t].1 as usize);
    // The window's rows, then the chosen entries. Plain loops below: a closure would not
    // inherit the kernel's target features.
    let keys: Vec<&[f32]> = (start..end)
        .map(|r| &a.kv.data[r * d..(r + 1) * d])
        .chain(a.chosen[t].iter().map(|&e| &a.entries.data[e * d..(e + 1) * d]))
        .collect();
    let qh = &a.q.data[(t * heads + h) * d..(t * heads + h + 1) * d];
    let mut scores = vec![0f32; keys.len()];
    for (s, k) in scores.iter_mut().zip(&keys) {
        *s = dot_s::<S>(qh, k) * a.scale;
    }
    let sink = a.sinks[h];
    let max = scores.iter().copied().fold(sink, |m, b| if b > m { b } else { m });
    let mut denom = 0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        denom += *s;
    }
    denom += (sink - max).exp();
    oh.fill(0.0);
    let whole = d / 16 * 16;
    for (&e, k) in scores.iter().zip(&keys) {
        let p = e / denom;
        let pv = S::splat(p);
        for i in (0..whole).step_by(16) {
            S::load(&oh[i..]).add(pv.mul(S::load(&k[i..]))).store(&mut oh[i..]);
        }
        for (o, &v) in oh[whole..].iter_mut().zip(&k[whole..]) {
            *o += p * v;
        }
    }
}

//! DeepSeek V4's compressed sparse attention ops on the CPU (`plumb_core::CompressedAttentionOps`):
//! the reference's order of operations (backend-ref's compressed.rs) in float32, rows (or
//! entries) on threads. Dot products run as 16 lane sums over the vector, then a fixed tree, an
//! order fixed by the length alone; every softmax subtracts its maximum; the indexer's top-k is a
//! stable sort, so ties go to the lower entry id. Each output row is a function of its own row
//! and the entries it may see, never of the batch. The grouped output projection is one `linear`
//! launch of the groups' products, each as `linear` computes it.

use crate::scored_moe::descending;
use crate::{CpuBackend, CpuKvCache, CpuTensor, CpuWeight, SharedOut};
use plumb_core::{CompressedAttentionOps, Compression, LinearOps};

/// Σ a_i·b_i: 16 running lane sums (element i into lane i % 16), then a pairwise tree.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut lanes = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..16 {
            lanes[l] += x[l] * y[l];
        }
    }
    for (l, (x, y)) in ra.iter().zip(rb).enumerate() {
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
        let (q_scale, w_scale) = (q_scale as f32, w_scale as f32);
        let ids = std::sync::Mutex::new(vec![-1i32; q.rows * top_k]);
        self.par_rows(q.rows, &|rows| {
            let (mut scores, mut order, mut chosen) = (Vec::new(), Vec::new(), Vec::with_capacity(top_k));
            for t in rows {
                let visible = (num_visible[t] as usize).min(keys.rows);
                scores.clear();
                scores.extend((0..visible).map(|s| {
                    let key = &keys.data[s * d..(s + 1) * d];
                    (0..heads).fold(0f32, |acc, h| {
                        let qk = dot(&q.data[(t * heads + h) * d..(t * heads + h + 1) * d], key);
                        let relu = if qk > 0.0 { qk } else { 0.0 };
                        acc + (w.data[t * heads + h] * w_scale) * (relu * q_scale)
                    })
                }));
                order.clear();
                order.extend(0..visible);
                order.sort_by(|&a, &b| descending(scores[a], scores[b]));
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
        let scale = scale as f32;
        let cols = q.cols;
        let shared = SharedOut::new(&mut out.data);
        self.par_rows(q.rows, &|rows| {
            let (mut scores, mut chosen) = (Vec::new(), Vec::new());
            for t in rows {
                let (start, end) = (windows[t].0 as usize, windows[t].1 as usize);
                chosen.clear();
                chosen
                    .extend(entry_ids[t * per_row..(t + 1) * per_row].iter().filter(|&&e| e >= 0).map(|&e| e as usize));
                chosen.sort_unstable();
                assert!(chosen.windows(2).all(|p| p[0] < p[1]), "sink_attention: an entry chosen twice");
                let keys: Vec<&[f32]> = (start..end)
                    .map(|r| &kv.data[r * d..(r + 1) * d])
                    .chain(chosen.iter().map(|&e| &entries.data[e * d..(e + 1) * d]))
                    .collect();
                // SAFETY: threads get disjoint rows; `out` outlives the call.
                let o = unsafe { shared.part(t * cols, cols) };
                for (h, oh) in o.chunks_exact_mut(d).enumerate() {
                    let qh = &q.data[(t * heads + h) * d..(t * heads + h + 1) * d];
                    scores.clear();
                    scores.extend(keys.iter().map(|k| dot(qh, k) * scale));
                    let sink = sinks[h];
                    let max = scores.iter().copied().fold(sink, |a, b| if b > a { b } else { a });
                    let mut denom = 0f32;
                    for s in scores.iter_mut() {
                        *s = (*s - max).exp();
                        denom += *s;
                    }
                    denom += (sink - max).exp();
                    oh.fill(0.0);
                    for (k, &e) in keys.iter().zip(scores.iter()) {
                        let p = e / denom;
                        for (o, &v) in oh.iter_mut().zip(k.iter()) {
                            *o += p * v;
                        }
                    }
                }
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

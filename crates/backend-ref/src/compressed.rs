//! DeepSeek V4's compressed sparse attention ops as plain loops (`plumb_core::CompressedAttentionOps`):
//! every softmax subtracts its maximum, every sum runs in ascending index order, and the
//! indexer's top-k is a full stable sort, so ties go to the lower entry id.

use crate::{RefBackend, RefFloat, RefKvCache, RefTensor, dot};
use plumb_core::{CompressedAttentionOps, Compression, KvStore, LinearInputs, paged_segments};
use std::cmp::Ordering;

/// 1 / sqrt(mean(x²) + eps).
fn inv_rms<T: RefFloat>(x: &[T], eps: f64) -> T {
    T::one() / (dot(x, x) / T::from_f64(x.len() as f64) + T::from_f64(eps)).sqrt()
}

/// Descending order; NaN first, so a NaN score is chosen and shows instead of being dropped.
fn descending<T: RefFloat>(a: T, b: T) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => b.partial_cmp(&a).expect("neither is NaN"),
    }
}

impl<T: RefFloat> CompressedAttentionOps for RefBackend<T> {
    fn rms_norm_unweighted(&self, x: &RefTensor<T>, width: usize, eps: f64, out: &mut RefTensor<T>) {
        assert!(width > 0 && x.cols.is_multiple_of(width), "rms_norm_unweighted: width {width} of {}", x.cols);
        assert_eq!((out.rows, out.cols), (x.rows, x.cols), "rms_norm_unweighted: shape mismatch");
        for (row, o) in x.data.chunks_exact(width).zip(out.data.chunks_exact_mut(width)) {
            let inv = inv_rms(row, eps);
            for (o, &v) in o.iter_mut().zip(row) {
                *o = v * inv;
            }
        }
    }

    fn rope_tail_interleaved(
        &self,
        x: &mut RefTensor<T>,
        table: &RefTensor<T>,
        num_heads: usize,
        head_dim: usize,
        inverse: bool,
    ) {
        let half = table.cols / 2;
        assert!(2 * half <= head_dim && x.cols == num_heads * head_dim, "rope_tail_interleaved: shapes");
        assert_eq!(table.rows, x.rows, "rope_tail_interleaved: one table row per row");
        let first = head_dim - 2 * half;
        for n in 0..x.rows {
            for h in 0..num_heads {
                for i in 0..half {
                    let c = table.data[n * 2 * half + i];
                    let s = table.data[n * 2 * half + half + i];
                    let s = if inverse { T::zero() - s } else { s };
                    let at = n * x.cols + h * head_dim + first + 2 * i;
                    let (x0, x1) = (x.data[at], x.data[at + 1]);
                    x.data[at] = x0 * c - x1 * s;
                    x.data[at + 1] = x1 * c + x0 * s;
                }
            }
        }
    }

    fn compress_kv(
        &self,
        kv: &RefTensor<T>,
        gate: &RefTensor<T>,
        ape: &RefTensor<T>,
        norm: &RefTensor<T>,
        eps: f64,
        c: Compression,
        out: &mut RefTensor<T>,
    ) {
        let (m, d) = (c.ratio, norm.cols);
        let series = if c.overlap { 2 } else { 1 };
        assert!(m > 0 && kv.rows.is_multiple_of(m), "compress_kv: {} rows are not whole windows of {m}", kv.rows);
        assert_eq!((kv.cols, gate.rows, gate.cols), (series * d, kv.rows, series * d), "compress_kv: kv/gate shapes");
        assert_eq!((ape.rows, ape.cols), (m, series * d), "compress_kv: ape shape");
        assert!(!c.prev_window || c.overlap, "compress_kv: a previous window is only read with overlap");
        let num_entries = c.num_entries(kv.rows);
        assert_eq!((out.rows, out.cols), (num_entries, d), "compress_kv: out shape");
        let cols = series * d;
        // Slot (row, column offset) pairs of entry e, in slot order: the Ca/Za half of the previous
        // window (overlap only, when present), then this window's Cb/Zb (or its single series).
        let mut slots: Vec<(usize, usize, usize)> = Vec::with_capacity(2 * m);
        let mut pooled = vec![T::zero(); d];
        for e in 0..num_entries {
            let w = e + usize::from(c.prev_window);
            slots.clear();
            if c.overlap && w > 0 {
                slots.extend((0..m).map(|j| ((w - 1) * m + j, 0, j)));
            }
            let off = if c.overlap { d } else { 0 };
            slots.extend((0..m).map(|j| (w * m + j, off, j)));
            for (ch, p) in pooled.iter_mut().enumerate() {
                let z: Vec<T> =
                    slots.iter().map(|&(r, o, j)| gate.data[r * cols + o + ch] + ape.data[j * cols + o + ch]).collect();
                let max = z.iter().copied().fold(z[0], |a, b| if b > a { b } else { a });
                let e: Vec<T> = z.iter().map(|&v| (v - max).exp()).collect();
                let sum = e.iter().fold(T::zero(), |a, &b| a + b);
                let mut acc = T::zero();
                for (&(r, o, _), &ej) in slots.iter().zip(&e) {
                    acc = acc + kv.data[r * cols + o + ch] * (ej / sum);
                }
                *p = acc;
            }
            let inv = inv_rms(&pooled, eps);
            for ((o, &v), &wt) in out.data[e * d..(e + 1) * d].iter_mut().zip(&pooled).zip(&norm.data) {
                *o = wt * (v * inv);
            }
        }
    }

    fn indexer_topk(
        &self,
        q: &RefTensor<T>,
        keys: &RefTensor<T>,
        w: &RefTensor<T>,
        num_visible: &[u32],
        top_k: usize,
        q_scale: f64,
        w_scale: f64,
    ) -> Vec<i32> {
        let (d, heads) = (keys.cols, w.cols);
        assert_eq!((q.cols, w.rows, num_visible.len()), (heads * d, q.rows, q.rows), "indexer_topk: shapes");
        let (q_scale, w_scale) = (T::from_f64(q_scale), T::from_f64(w_scale));
        let mut ids = Vec::with_capacity(q.rows * top_k);
        for (t, &visible) in num_visible.iter().enumerate() {
            let visible = (visible as usize).min(keys.rows);
            let scores: Vec<T> = (0..visible)
                .map(|s| {
                    let key = &keys.data[s * d..(s + 1) * d];
                    (0..heads).fold(T::zero(), |acc, h| {
                        let qk = dot(&q.data[(t * heads + h) * d..(t * heads + h + 1) * d], key);
                        let relu = if qk > T::zero() { qk } else { T::zero() };
                        acc + (w.data[t * heads + h] * w_scale) * (relu * q_scale)
                    })
                })
                .collect();
            let mut order: Vec<usize> = (0..visible).collect();
            order.sort_by(|&a, &b| descending(scores[a], scores[b]));
            ids.extend((0..top_k).map(|j| order.get(j).map_or(-1, |&s| s as i32)));
        }
        ids
    }

    fn sink_attention(
        &self,
        q: &RefTensor<T>,
        kv: &RefTensor<T>,
        windows: &[(u32, u32)],
        entries: &RefTensor<T>,
        entry_ids: &[i32],
        sinks: &RefTensor<T>,
        scale: f64,
        out: &mut RefTensor<T>,
    ) {
        let (d, heads) = (kv.cols, sinks.cols);
        assert_eq!((q.cols, out.rows, out.cols, windows.len()), (heads * d, q.rows, q.cols, q.rows), "sink_attention");
        assert!(q.rows == 0 || entry_ids.len().is_multiple_of(q.rows), "sink_attention: entry ids per row");
        let per_row = entry_ids.len().checked_div(q.rows).unwrap_or(0);
        let scale = T::from_f64(scale);
        for t in 0..q.rows {
            let (start, end) = (windows[t].0 as usize, windows[t].1 as usize);
            let mut chosen: Vec<usize> =
                entry_ids[t * per_row..(t + 1) * per_row].iter().filter(|&&e| e >= 0).map(|&e| e as usize).collect();
            chosen.sort_unstable();
            assert!(chosen.windows(2).all(|p| p[0] < p[1]), "sink_attention: an entry chosen twice");
            let keys: Vec<&[T]> = (start..end)
                .map(|r| &kv.data[r * d..(r + 1) * d])
                .chain(chosen.iter().map(|&e| &entries.data[e * d..(e + 1) * d]))
                .collect();
            for h in 0..heads {
                let qh = &q.data[(t * heads + h) * d..(t * heads + h + 1) * d];
                let scores: Vec<T> = keys.iter().map(|k| dot(qh, k) * scale).collect();
                let sink = sinks.data[h];
                let max = scores.iter().copied().fold(sink, |a, b| if b > a { b } else { a });
                let exps: Vec<T> = scores.iter().map(|&s| (s - max).exp()).collect();
                let denom = exps.iter().fold(T::zero(), |a, &b| a + b) + (sink - max).exp();
                let oh = &mut out.data[(t * heads + h) * d..(t * heads + h + 1) * d];
                oh.fill(T::zero());
                for (k, &e) in keys.iter().zip(&exps) {
                    let p = e / denom;
                    for (o, &v) in oh.iter_mut().zip(k.iter()) {
                        *o = *o + p * v;
                    }
                }
            }
        }
    }

    fn write_paged_rows(
        &self,
        kv: &mut RefKvCache<T>,
        first_layer: usize,
        col: usize,
        slots: &[u32],
        src: &RefTensor<T>,
    ) {
        assert_eq!((kv.spec.num_kv_heads, src.rows), (1, slots.len()), "write_paged_rows: one head, a row per slot");
        let (w, hd) = (src.cols, kv.spec.head_dim);
        // A declared 16-bit store keeps each value's rounding of its f32 form, as `write_kv` does.
        let store = |x: T| match self.kv_store {
            KvStore::F32 => x,
            s => T::from_f64(s.round(x.to_f64() as f32) as f64),
        };
        for s in paged_segments(first_layer, hd, col, w) {
            let plane = if s.v { &mut kv.v[s.layer] } else { &mut kv.k[s.layer] };
            for (r, &slot) in slots.iter().enumerate() {
                let at = slot as usize * hd + s.offset;
                for (dst, &x) in plane[at..at + s.len].iter_mut().zip(&src.data[r * w + s.from..]) {
                    *dst = store(x);
                }
            }
        }
    }

    fn read_paged_rows(
        &self,
        kv: &RefKvCache<T>,
        first_layer: usize,
        col: usize,
        slots: &[u32],
        out: &mut RefTensor<T>,
    ) {
        assert_eq!((kv.spec.num_kv_heads, out.rows), (1, slots.len()), "read_paged_rows: one head, a row per slot");
        let (w, hd) = (out.cols, kv.spec.head_dim);
        for s in paged_segments(first_layer, hd, col, w) {
            let plane = if s.v { &kv.v[s.layer] } else { &kv.k[s.layer] };
            for (r, &slot) in slots.iter().enumerate() {
                let at = slot as usize * hd + s.offset;
                out.data[r * w + s.from..r * w + s.from + s.len].copy_from_slice(&plane[at..at + s.len]);
            }
        }
    }

    fn grouped_linear(&self, x: &RefTensor<T>, w: &RefTensor<T>, groups: usize, out: &mut RefTensor<T>) {
        assert!(groups > 0 && w.rows.is_multiple_of(groups), "grouped_linear: {} rows in {groups} groups", w.rows);
        let (k, r) = (w.cols, w.rows / groups);
        assert_eq!((x.cols, out.rows, out.cols), (groups * k, x.rows, w.rows), "grouped_linear: shapes");
        // The activations as the products see them (`RefBackend::with_linear_inputs`), a group's
        // K at a time: Q8 blocks never straddle two groups.
        let rounded: Vec<T>;
        let x_data = match w.linear_inputs {
            LinearInputs::F32 => &x.data,
            inputs => {
                let x32: Vec<f32> = x.data.iter().map(|v| v.to_f64() as f32).collect();
                rounded = x32.chunks_exact(k).flat_map(|xg| inputs.apply_f64(xg)).map(T::from_f64).collect();
                &rounded
            }
        };
        for n in 0..x.rows {
            for g in 0..groups {
                let xg = &x_data[n * x.cols + g * k..n * x.cols + (g + 1) * k];
                for j in 0..r {
                    out.data[n * w.rows + g * r + j] = dot(xg, &w.data[(g * r + j) * k..(g * r + j + 1) * k]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_core::{Backend, LinearInputs};

    fn t(rows: usize, cols: usize, data: Vec<f64>) -> RefTensor<f64> {
        assert_eq!(data.len(), rows * cols);
        RefTensor { rows, cols, data, linear_inputs: LinearInputs::F32 }
    }

    fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol)
    }

    #[test]
    fn rope_tail_rotates_trailing_pairs_and_inverse_undoes_it() {
        let b = RefBackend::<f64>::new(1);
        // One head of 6: the first 2 dims pass, pairs (2, 3) and (4, 5) rotate by 0.3 and 0.7 rad.
        let table = t(1, 4, vec![0.3f64.cos(), 0.7f64.cos(), 0.3f64.sin(), 0.7f64.sin()]);
        let x0 = vec![5.0, -6.0, 1.0, 0.0, 0.0, 2.0];
        let mut x = t(1, 6, x0.clone());
        b.rope_tail_interleaved(&mut x, &table, 1, 6, false);
        let want = [5.0, -6.0, 0.3f64.cos(), 0.3f64.sin(), -2.0 * 0.7f64.sin(), 2.0 * 0.7f64.cos()];
        assert!(close(&x.data, &want, 1e-15), "{:?}", x.data);
        b.rope_tail_interleaved(&mut x, &table, 1, 6, true);
        assert!(close(&x.data, &x0, 1e-15), "{:?}", x.data);
    }

    /// A weight declared to take Q8 activations rounds each group's input in its own blocks,
    /// as `linear` does: the same as the rounded input through an undeclared weight.
    #[test]
    fn grouped_linear_takes_declared_q8_inputs_group_by_group() {
        let b = RefBackend::<f64>::new(1);
        let (groups, k) = (2, 64);
        let x: Vec<f32> = (0..groups * k).map(|i| ((i * 37 % 29) as f32 - 14.0) * 0.113).collect();
        let w: Vec<f64> = (0..groups * 3 * k).map(|i| ((i * 11 % 17) as f64 - 8.0) * 0.05).collect();
        let mut declared = t(groups * 3, k, w.clone());
        declared.linear_inputs = LinearInputs::Q8;
        let mut got = b.tensor(1, groups * 3);
        b.grouped_linear(&b.upload(&x, 1, groups * k), &declared, groups, &mut got);
        let rounded = t(1, groups * k, LinearInputs::Q8.apply_f64(&x));
        let mut want = b.tensor(1, groups * 3);
        b.grouped_linear(&rounded, &t(groups * 3, k, w), groups, &mut want);
        assert_eq!(got.data, want.data);
        let mut plain = b.tensor(1, groups * 3);
        b.grouped_linear(&b.upload(&x, 1, groups * k), &t(groups * 3, k, declared.data.clone()), groups, &mut plain);
        assert_ne!(got.data, plain.data, "the declaration must change the products");
    }

    #[test]
    fn unweighted_norm_and_grouped_linear_by_hand() {
        let b = RefBackend::<f64>::new(1);
        let mut out = b.tensor(1, 4);
        b.rms_norm_unweighted(&t(1, 4, vec![3.0, 4.0, 0.0, 2.0]), 2, 0.0, &mut out);
        let s = (12.5f64).sqrt();
        assert!(close(&out.data, &[3.0 / s, 4.0 / s, 0.0, 2.0f64.sqrt()], 1e-15), "{:?}", out.data);
        // Two groups of 2 inputs, 1 output each: [1, 2]·[1, 1] = 3 and [3, 4]·[2, -1] = 2.
        let mut y = b.tensor(1, 2);
        b.grouped_linear(&t(1, 4, vec![1.0, 2.0, 3.0, 4.0]), &t(2, 2, vec![1.0, 1.0, 2.0, -1.0]), 2, &mut y);
        assert_eq!(y.data, [3.0, 2.0]);
    }

    #[test]
    fn compression_pools_by_softmax_of_gates_with_the_overlap_window() {
        let b = RefBackend::<f64>::new(1);
        // d = 1, ratio 2, overlap: rows carry [Ca, Cb]; gates [Za, Zb]; ape zero; norm weight 1
        // and eps 0, so the entry is the sign of the pooled value (RMSNorm of a scalar).
        let (ape, norm) = (t(2, 2, vec![0.0; 4]), t(1, 1, vec![2.0]));
        let kv = t(4, 2, vec![1.0, 10.0, 2.0, 20.0, 3.0, -30.0, 4.0, -40.0]);
        let gate = t(4, 2, vec![0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let c = Compression { ratio: 2, overlap: true, prev_window: false };
        let mut out = b.tensor(2, 1);
        b.compress_kv(&kv, &gate, &ape, &norm, 0.0, c, &mut out);
        // Entry 0: mean of Cb of rows 0, 1 = 15 → 2·sign. Entry 1: mean of Ca rows 0, 1 and Cb
        // rows 2, 3 = (1 + 2 − 30 − 40) / 4 < 0 → −2.
        assert_eq!(out.data, [2.0, -2.0]);
        // With the previous window given, only entry 1 is emitted, and it is the same.
        let mut one = b.tensor(1, 1);
        b.compress_kv(&kv, &gate, &ape, &norm, 0.0, Compression { prev_window: true, ..c }, &mut one);
        assert_eq!(one.data, [-2.0]);
        // A gate that dominates picks its slot: d = 2 without overlap, eps 0: entry = v / rms(v).
        let kv = t(2, 2, vec![1.0, 5.0, 3.0, 7.0]);
        let gate = t(2, 2, vec![100.0, 0.0, 0.0, 0.0]);
        let mut out = b.tensor(1, 2);
        let c = Compression { ratio: 2, overlap: false, prev_window: false };
        b.compress_kv(&kv, &gate, &t(2, 2, vec![0.0; 4]), &t(1, 2, vec![1.0, 1.0]), 0.0, c, &mut out);
        let pooled = [1.0, 6.0];
        let rms = ((1.0f64 + 36.0) / 2.0).sqrt();
        assert!(close(&out.data, &[pooled[0] / rms, pooled[1] / rms], 1e-12), "{:?}", out.data);
    }

    #[test]
    fn indexer_ties_go_to_the_lower_entry_and_invisible_entries_are_never_chosen() {
        let b = RefBackend::<f64>::new(1);
        // One head of 1: scores = relu(q · k) · w. Keys 0..5: -1, 2, 0, 2, 9, 5; entries 4 and
        // 5 are invisible to row 0 (4 visible); row 1 sees 1 entry; row 2 sees all.
        let keys = t(6, 1, vec![-1.0, 2.0, 0.0, 2.0, 9.0, 5.0]);
        let q = t(3, 1, vec![1.0, 1.0, -1.0]);
        let w = t(3, 1, vec![1.0, 1.0, 1.0]);
        let ids = b.indexer_topk(&q, &keys, &w, &[4, 1, 6], 3, 1.0, 1.0);
        // Row 0: scores 0, 2, 0, 2 → 1, 3 (tie, lower first), then 0 (tie at 0 with 2).
        // Row 1: only entry 0 → 0, −1, −1. Row 2: all scores relu(−k) → 1·(entry 0), then 0-ties.
        assert_eq!(ids, [1, 3, 0, 0, -1, -1, 0, 1, 2]);
    }

    /// Deterministic pseudo-random values in [−1, 1).
    fn noise(n: usize, seed: u64) -> Vec<f64> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (x >> 11) as f64 / (1u64 << 52) as f64 - 1.0
            })
            .collect()
    }

    #[test]
    fn entries_resumed_from_the_previous_window_equal_the_whole_pass_bit_for_bit() {
        // The lane-state design keeps only the previous window's rows across steps; entries built
        // from them must be the very entries of one pass over the whole sequence.
        let b = RefBackend::<f64>::new(1);
        let (m, d, windows) = (4, 3, 6);
        let kv = t(windows * m, 2 * d, noise(windows * m * 2 * d, 1));
        let gate = t(windows * m, 2 * d, noise(windows * m * 2 * d, 2));
        let (ape, norm) = (t(m, 2 * d, noise(m * 2 * d, 3)), t(1, d, noise(d, 4)));
        let whole_c = Compression { ratio: m, overlap: true, prev_window: false };
        let mut whole = b.tensor(windows, d);
        b.compress_kv(&kv, &gate, &ape, &norm, 1e-6, whole_c, &mut whole);
        for first in 1..windows {
            let rows: Vec<u32> = ((first - 1) * m..windows * m).map(|r| r as u32).collect();
            let (mut kv_tail, mut gate_tail) = (b.tensor(rows.len(), 2 * d), b.tensor(rows.len(), 2 * d));
            crate::LinearOps::gather_rows(&b, &kv, &rows, &mut kv_tail);
            crate::LinearOps::gather_rows(&b, &gate, &rows, &mut gate_tail);
            let mut tail = b.tensor(windows - first, d);
            b.compress_kv(
                &kv_tail,
                &gate_tail,
                &ape,
                &norm,
                1e-6,
                Compression { prev_window: true, ..whole_c },
                &mut tail,
            );
            assert_eq!(tail.data, whole.data[first * d..], "entries from window {first} on");
        }
    }

    #[test]
    fn a_rows_selection_depends_on_nothing_but_its_visible_entries() {
        // Entries past a row's visibility must not move its choice, nor may the other rows of
        // the batch: the row alone, with only its visible entries or all of them, chooses alike.
        let b = RefBackend::<f64>::new(1);
        let (heads, d, entries) = (2, 4, 9);
        let keys = t(entries, d, noise(entries * d, 5));
        let q = t(3, heads * d, noise(3 * heads * d, 6));
        let w = t(3, heads, noise(3 * heads, 7));
        let visible = [2, 5, 9];
        let batch = b.indexer_topk(&q, &keys, &w, &visible, 3, 0.5, 0.7);
        for r in 0..3 {
            let one = |rows: usize| {
                let qr = t(1, heads * d, q.data[r * heads * d..(r + 1) * heads * d].to_vec());
                let wr = t(1, heads, w.data[r * heads..(r + 1) * heads].to_vec());
                let kr = t(rows, d, keys.data[..rows * d].to_vec());
                b.indexer_topk(&qr, &kr, &wr, &[visible[r]], 3, 0.5, 0.7)
            };
            assert_eq!(one(visible[r] as usize), batch[r * 3..(r + 1) * 3], "row {r} alone, only its entries");
            assert_eq!(one(entries), batch[r * 3..(r + 1) * 3], "row {r} alone, all entries");
        }
        assert_eq!(batch[3..6].iter().filter(|&&i| i >= 0).count(), 3);
        assert_eq!(&batch[..3], &[batch[0], batch[1], -1], "two visible entries, then none");
    }

    #[test]
    fn sink_attention_by_hand() {
        let b = RefBackend::<f64>::new(1);
        // d = 1, one head. Row 0 sees kv row 0 (value 2) and entry 1 (value 4); scores q·k = 2·1,
        // 4·1 with scale 1; sink 3. p = e^{2}, e^{4} over e^2 + e^4 + e^3.
        let q = t(1, 1, vec![1.0]);
        let kv = t(2, 1, vec![2.0, 100.0]);
        let entries = t(2, 1, vec![50.0, 4.0]);
        let sinks = t(1, 1, vec![3.0]);
        let mut out = b.tensor(1, 1);
        b.sink_attention(&q, &kv, &[(0, 1)], &entries, &[1, -1], &sinks, 1.0, &mut out);
        let (a, c, s) = (2f64.exp(), 4f64.exp(), 3f64.exp());
        let want = (2.0 * a + 4.0 * c) / (a + c + s);
        assert!((out.data[0] - want).abs() < 1e-14, "{} vs {want}", out.data[0]);
    }
}

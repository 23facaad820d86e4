//! DeepSeek V4's attention layer: low-rank queries, one shared K = V head with interleaved RoPE
//! on its trailing slice, a raw sliding window plus compressed entries (CSA: overlapping windows
//! chosen per query by a lightning indexer; HCA: all causal entries of long windows), learned
//! sinks, inverse RoPE on the output and the grouped low-rank output projection. Weights by the
//! checkpoint's DeepSeek names (`attn.wq_a`, `attn.compressor.wkv`, `attn.indexer.wq_b`, …).
//! Invariant: entry w pools only the rows of absolute windows w − 1 and w (CSA) or w (HCA), and is
//! visible to the row at position p iff w < (p + 1) / ratio — so entries depend on positions
//! alone. A sequence's state lives in the paged KV cache, a row per position
//! (`compressed_state`), so any batch — chunks, decode rows, many lanes — computes the same bits.

use crate::Trace;
use crate::layers::compressed_state::{LaneRows, RowLayout, completed_windows, entry_position, lane_rows};
use crate::layers::loader::WeightLoader;
use crate::registry::ModelError;
use plumb_core::{Backend, BackendError, Compression, ForwardBatch, FullBackend, Shape};

/// Which entries a layer attends to besides its sliding window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKind {
    /// The raw sliding window only.
    Sliding,
    /// Compressed sparse attention: overlapping windows of `ratio`, the indexer keeps `top_k`.
    Csa { ratio: usize, index_heads: usize, index_head_dim: usize, top_k: usize },
    /// Heavily compressed attention: disjoint windows of `ratio`, every causal entry.
    Hca { ratio: usize },
}

/// Geometry of one attention layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionSpec {
    pub hidden: usize,
    pub num_heads: usize,
    pub head_dim: usize,
    pub q_lora_rank: usize,
    pub o_groups: usize,
    pub o_lora_rank: usize,
    pub sliding_window: usize,
    pub eps: f64,
    pub kind: AttentionKind,
}

impl AttentionSpec {
    /// Its paged rows, from KV layer `first_layer` of a one-head cache of `kv_head_dim`.
    pub fn row_layout(&self, first_layer: usize, kv_head_dim: usize) -> RowLayout {
        let d = self.head_dim;
        let (comp, key, index_comp) = match self.kind {
            AttentionKind::Sliding => (0, 0, 0),
            AttentionKind::Hca { .. } => (d, 0, 0),
            AttentionKind::Csa { index_head_dim: di, .. } => (2 * d, di, 2 * di),
        };
        RowLayout::new(first_layer, kv_head_dim, d, comp, key, index_comp)
    }
}

/// One compressor's weights (the attention's, or the indexer's at its own width).
#[derive(Debug)]
struct Compressor<B: Backend> {
    wkv: B::Weight,
    wgate: B::Weight,
    /// [ratio, series · d] position bias added to the gates.
    ape: B::Weight,
    norm: B::Weight,
}

impl<B: FullBackend> Compressor<B> {
    fn load(
        w: &WeightLoader<'_, B>,
        p: &str,
        hidden: usize,
        ratio: usize,
        cols: usize,
        d: usize,
    ) -> Result<Self, ModelError> {
        Ok(Compressor {
            wkv: w.load_shaped(&format!("{p}.wkv.weight"), cols, hidden)?,
            wgate: w.load_shaped(&format!("{p}.wgate.weight"), cols, hidden)?,
            ape: w.load_shaped(&format!("{p}.ape"), ratio, cols)?,
            norm: w.load_shaped(&format!("{p}.norm.weight"), 1, d)?,
        })
    }

    /// Computes this step's compressor rows (kv, gate) for x's rows, stores them at columns
    /// `col ..` of their paged rows, then pools every window a lane completes this step from
    /// the rows as stored and stores its entry, RoPE'd at w · ratio, at column `entry_col` of
    /// the row of the window's last position.
    #[allow(clippy::too_many_arguments)]
    fn store_entries(
        &self,
        b: &B,
        kv: &mut B::KvCache,
        x: &B::Tensor,
        batch: &ForwardBatch,
        lanes: &[LaneRows],
        store: (usize, usize, usize),
        c: Compression,
        eps: f64,
        inv_freq: &[f64],
    ) {
        let ops = b.compressed_attention_ops().expect("checked at load");
        let (first, col, entry_col) = store;
        let (d, cw, m) = (self.norm.cols(), self.wkv.rows(), c.ratio);
        let n = x.rows();
        let (mut kv_rows, mut gate) = (b.tensor(n, cw), b.tensor(n, cw));
        b.linear_multi(x, &[&self.wkv, &self.wgate], &mut [&mut kv_rows, &mut gate]);
        ops.write_paged_rows(kv, first, col, &batch.slot_mapping, &kv_rows);
        ops.write_paged_rows(kv, first, col + cw, &batch.slot_mapping, &gate);
        for lane in lanes {
            let windows = completed_windows(lane, m);
            if windows.is_empty() {
                continue;
            }
            let prev_window = c.overlap && windows.start > 0;
            let from = (windows.start - usize::from(prev_window)) * m;
            let slots = lane.slots(batch, from..windows.end * m);
            let (mut kv_in, mut gate_in) = (b.tensor(slots.len(), cw), b.tensor(slots.len(), cw));
            ops.read_paged_rows(kv, first, col, &slots, &mut kv_in);
            ops.read_paged_rows(kv, first, col + cw, &slots, &mut gate_in);
            let mut entries = b.tensor(windows.len(), d);
            ops.compress_kv(
                &kv_in,
                &gate_in,
                &self.ape,
                &self.norm,
                eps,
                Compression { prev_window, ..c },
                &mut entries,
            );
            let positions: Vec<u32> = windows.clone().map(|w| (w * m) as u32).collect();
            ops.rope_tail_interleaved(&mut entries, &b.rope_table(&positions, inv_freq), 1, d, false);
            let at = lane.slots(batch, windows.map(|w| entry_position(w, m)));
            ops.write_paged_rows(kv, first, entry_col, &at, &entries);
        }
    }
}

/// The lightning indexer of a CSA layer.
#[derive(Debug)]
struct Indexer<B: Backend> {
    compressor: Compressor<B>,
    wq_b: B::Weight,
    weights_proj: B::Weight,
}

/// A loaded attention layer.
#[derive(Debug)]
pub struct CompressedAttention<B: Backend> {
    spec: AttentionSpec,
    wq_a: B::Weight,
    q_norm: B::Weight,
    wq_b: B::Weight,
    wkv: B::Weight,
    kv_norm: B::Weight,
    wo_a: B::Weight,
    wo_b: B::Weight,
    sinks: B::Weight,
    compressor: Option<Compressor<B>>,
    indexer: Option<Indexer<B>>,
    /// Where its per-position state lives in the paged KV cache.
    rows: RowLayout,
}

/// The cos/sin tables of a step: `main` (sliding-only layers) and `compress` (CSA/HCA layers,
/// their compressors and indexers), one row per batch row, and the compressed layers'
/// inverse frequencies for the entries' own positions.
#[derive(Debug)]
pub struct RopeTables<'a, B: Backend> {
    pub main: &'a B::Tensor,
    pub compress: &'a B::Tensor,
    pub compress_inv_freq: &'a [f64],
}

impl<B: FullBackend> CompressedAttention<B> {
    /// Loads `{prefix}.wq_a` … (prefix: `model.layers.{i}.attn`); its state goes in `rows`.
    pub fn load(
        w: &WeightLoader<'_, B>,
        prefix: &str,
        spec: AttentionSpec,
        rows: RowLayout,
    ) -> Result<Self, ModelError> {
        if w.backend.compressed_attention_ops().is_none() {
            let needed_by = format!("the compressed attention `{prefix}`");
            return Err(BackendError::MissingOpGroup {
                backend: w.backend.name(),
                group: "compressed sparse attention",
                needed_by,
            }
            .into());
        }
        let AttentionSpec { hidden, num_heads: h, head_dim: d, q_lora_rank: q, o_groups: g, o_lora_rank: r, .. } = spec;
        let l = |name: &str, rows, cols| w.load_shaped(&format!("{prefix}.{name}"), rows, cols);
        let (compressor, indexer) = match spec.kind {
            AttentionKind::Sliding => (None, None),
            AttentionKind::Hca { ratio } => {
                (Some(Compressor::load(w, &format!("{prefix}.compressor"), hidden, ratio, d, d)?), None)
            }
            AttentionKind::Csa { ratio, index_heads, index_head_dim: di, .. } => {
                let p = format!("{prefix}.indexer");
                let indexer = Indexer {
                    compressor: Compressor::load(w, &format!("{p}.compressor"), hidden, ratio, 2 * di, di)?,
                    wq_b: w.load_shaped(&format!("{p}.wq_b.weight"), index_heads * di, q)?,
                    weights_proj: w.load_shaped(&format!("{p}.weights_proj.weight"), index_heads, hidden)?,
                };
                (Some(Compressor::load(w, &format!("{prefix}.compressor"), hidden, ratio, 2 * d, d)?), Some(indexer))
            }
        };
        Ok(CompressedAttention {
            wq_a: l("wq_a.weight", q, hidden)?,
            q_norm: l("q_norm.weight", 1, q)?,
            wq_b: l("wq_b.weight", h * d, q)?,
            wkv: l("wkv.weight", d, hidden)?,
            kv_norm: l("norm.weight", 1, d)?,
            wo_a: l("wo_a.weight", g * r, h * d / g)?,
            wo_b: l("wo_b.weight", hidden, g * r)?,
            sinks: l("attn_sink", 1, h)?,
            compressor,
            indexer,
            rows,
            spec,
        })
    }

    /// The layer's output [num_rows, hidden] for x [num_rows, hidden] (normed), any batch whose
    /// lanes' rows are at consecutive positions; reads and extends the lanes' paged rows in `kv`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        b: &B,
        x: &B::Tensor,
        batch: &ForwardBatch,
        rope: &RopeTables<'_, B>,
        kv: &mut B::KvCache,
        layer: usize,
        trace: &mut Option<Trace<'_, B>>,
    ) -> B::Tensor {
        let ops = b.compressed_attention_ops().expect("checked at load");
        let (s, rows) = (self.spec, self.rows);
        let (n, h, d) = (x.rows(), s.num_heads, s.head_dim);
        let eps32 = s.eps as f32;
        let table = if s.kind == AttentionKind::Sliding { rope.main } else { rope.compress };
        // Queries: low rank, per-head unweighted norm, RoPE on each head's trailing slice.
        let mut q_a = b.tensor(n, s.q_lora_rank);
        b.linear(x, &self.wq_a, &mut q_a);
        let mut q_res = b.tensor(n, s.q_lora_rank);
        b.rms_norm(&q_a, &self.q_norm, eps32, &mut q_res);
        let mut q_full = b.tensor(n, h * d);
        b.linear(&q_res, &self.wq_b, &mut q_full);
        let mut q = b.tensor(n, h * d);
        ops.rms_norm_unweighted(&q_full, d, s.eps, &mut q);
        ops.rope_tail_interleaved(&mut q, table, h, d, false);
        // The shared K = V head, stored, then each lane's window read back as stored.
        let mut kv_raw = b.tensor(n, d);
        b.linear(x, &self.wkv, &mut kv_raw);
        let mut k = b.tensor(n, d);
        b.rms_norm(&kv_raw, &self.kv_norm, eps32, &mut k);
        ops.rope_tail_interleaved(&mut k, table, 1, d, false);
        ops.write_paged_rows(kv, rows.first_layer, 0, &batch.slot_mapping, &k);
        let lanes = lane_rows(batch);
        let (mut window_slots, mut windows) = (Vec::new(), vec![(0u32, 0u32); n]);
        for lane in &lanes {
            let start = (lane.lo + 1).saturating_sub(s.sliding_window);
            let base = window_slots.len();
            window_slots.extend(lane.slots(batch, start..lane.hi + 1));
            for &r in &lane.rows {
                let p = batch.positions[r] as usize;
                let from = (p + 1).saturating_sub(s.sliding_window);
                windows[r] = ((base + from - start) as u32, (base + p + 1 - start) as u32);
            }
        }
        let mut window = b.tensor(window_slots.len(), d);
        ops.read_paged_rows(kv, rows.first_layer, 0, &window_slots, &mut window);
        // Compressed entries: this step's completed windows stored, then the visible ones read.
        let (entries, entry_ids) = match (s.kind, &self.compressor) {
            (AttentionKind::Sliding, _) | (_, None) => (b.tensor(0, d), Vec::new()),
            (AttentionKind::Hca { ratio }, Some(c)) => {
                let hca = Compression { ratio, overlap: false, prev_window: false };
                let store = (rows.first_layer, rows.comp, rows.entry);
                c.store_entries(b, kv, x, batch, &lanes, store, hca, s.eps, rope.compress_inv_freq);
                let (entries, bases) = self.visible(b, kv, batch, &lanes, ratio, rows.entry, d);
                let most = lanes.iter().map(|l| (l.hi + 1) / ratio).max().unwrap_or(0);
                let mut ids = vec![-1i32; n * most];
                for (lane, &base) in lanes.iter().zip(&bases) {
                    for &r in &lane.rows {
                        let visible = (batch.positions[r] as usize + 1) / ratio;
                        for (w, id) in ids[r * most..r * most + visible].iter_mut().enumerate() {
                            *id = (base + w) as i32;
                        }
                    }
                }
                (entries, ids)
            }
            (AttentionKind::Csa { ratio, index_heads, index_head_dim: di, top_k }, Some(c)) => {
                let csa = Compression { ratio, overlap: true, prev_window: false };
                let ix = self.indexer.as_ref().expect("a CSA layer has an indexer");
                let inv = rope.compress_inv_freq;
                c.store_entries(b, kv, x, batch, &lanes, (rows.first_layer, rows.comp, rows.entry), csa, s.eps, inv);
                let store = (rows.first_layer, rows.index_comp, rows.key);
                ix.compressor.store_entries(b, kv, x, batch, &lanes, store, csa, s.eps, inv);
                let mut iq = b.tensor(n, index_heads * di);
                b.linear(&q_res, &ix.wq_b, &mut iq);
                ops.rope_tail_interleaved(&mut iq, rope.compress, index_heads, di, false);
                let mut iw = b.tensor(n, index_heads);
                b.linear(x, &ix.weights_proj, &mut iw);
                let (q_scale, w_scale) = (1.0 / (di as f64).sqrt(), 1.0 / (index_heads as f64).sqrt());
                // Per row, the (lane, entry) pairs its indexer keeps; only those entries are read.
                let mut picks = vec![None; n * top_k];
                for (l, lane) in lanes.iter().enumerate() {
                    let (keys, _) = self.visible(b, kv, batch, std::slice::from_ref(lane), ratio, rows.key, di);
                    let picked: Vec<u32> = lane.rows.iter().map(|&r| r as u32).collect();
                    let (mut lq, mut lw) = (b.tensor(picked.len(), iq.cols()), b.tensor(picked.len(), index_heads));
                    b.gather_rows(&iq, &picked, &mut lq);
                    b.gather_rows(&iw, &picked, &mut lw);
                    let visible: Vec<u32> =
                        lane.rows.iter().map(|&r| (batch.positions[r] + 1) / ratio as u32).collect();
                    let chosen = ops.indexer_topk(&lq, &keys, &lw, &visible, top_k, q_scale, w_scale);
                    for (i, &r) in lane.rows.iter().enumerate() {
                        for (dst, &e) in picks[r * top_k..(r + 1) * top_k].iter_mut().zip(&chosen[i * top_k..]) {
                            *dst = (e >= 0).then_some((l, e as usize));
                        }
                    }
                }
                // The chosen entries in (lane, entry) order, so a row's ids stay ascending in entry
                // order and sink_attention sums them in the same order as over all entries.
                let mut used: Vec<(usize, usize)> = picks.iter().flatten().copied().collect();
                used.sort_unstable();
                used.dedup();
                let slots: Vec<u32> =
                    used.iter().map(|&(l, w)| batch.slot(lanes[l].lane, entry_position(w, ratio)) as u32).collect();
                let mut entries = b.tensor(slots.len(), d);
                ops.read_paged_rows(kv, rows.first_layer, rows.entry, &slots, &mut entries);
                let index = |pick: &(usize, usize)| used.binary_search(pick).expect("collected above") as i32;
                (entries, picks.iter().map(|p| p.as_ref().map_or(-1, index)).collect())
            }
        };
        let mut attn = b.tensor(n, h * d);
        ops.sink_attention(
            &q,
            &window,
            &windows,
            &entries,
            &entry_ids,
            &self.sinks,
            1.0 / (d as f64).sqrt(),
            &mut attn,
        );
        // V = K carried RoPE: rotate the output back by the query's angle.
        ops.rope_tail_interleaved(&mut attn, table, h, d, true);
        if let Some(t) = trace {
            t("attn_core", Some(layer), &attn);
        }
        let mut grouped = b.tensor(n, s.o_groups * s.o_lora_rank);
        ops.grouped_linear(&attn, &self.wo_a, s.o_groups, &mut grouped);
        let mut out = b.tensor(n, s.hidden);
        b.linear(&grouped, &self.wo_b, &mut out);
        out
    }

    /// The entries (or indexer keys: `col`, `width`) each lane can see by its last row, read
    /// from their paged rows and stacked lane after lane, with each lane's first index.
    #[allow(clippy::too_many_arguments)]
    fn visible(
        &self,
        b: &B,
        kv: &B::KvCache,
        batch: &ForwardBatch,
        lanes: &[LaneRows],
        ratio: usize,
        col: usize,
        width: usize,
    ) -> (B::Tensor, Vec<usize>) {
        let (mut slots, mut bases) = (Vec::new(), Vec::with_capacity(lanes.len()));
        for lane in lanes {
            bases.push(slots.len());
            slots.extend(lane.slots(batch, (0..(lane.hi + 1) / ratio).map(|w| entry_position(w, ratio))));
        }
        let mut out = b.tensor(slots.len(), width);
        let ops = b.compressed_attention_ops().expect("checked at load");
        ops.read_paged_rows(kv, self.rows.first_layer, col, &slots, &mut out);
        (out, bases)
    }
}

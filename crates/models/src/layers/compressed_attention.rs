//! DeepSeek V4's attention layer: low-rank queries, one shared K = V head with interleaved RoPE
//! on its trailing slice, a raw sliding window plus compressed entries (CSA: overlapping windows
//! chosen per query by a lightning indexer; HCA: all causal entries of long windows), learned
//! sinks, inverse RoPE on the output and the grouped low-rank output projection. Weights by the
//! checkpoint's DeepSeek names (`attn.wq_a`, `attn.compressor.wkv`, `attn.indexer.wq_b`, …).
//! Invariant: entry w pools only the rows of absolute windows w − 1 and w (CSA) or w (HCA), and is
//! visible to the row at position p iff w < (p + 1) / ratio — so entries depend on positions
//! alone. This version computes a whole prompt (one lane from position 0) in one step; the
//! per-lane state that continues a sequence is not built yet (see the family's note).

use crate::Trace;
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

    /// Entries [num_windows, d] of the complete windows of x's rows (a sequence from position 0),
    /// RoPE'd at positions w · ratio.
    fn entries(&self, b: &B, x: &B::Tensor, c: Compression, eps: f64, inv_freq: &[f64]) -> B::Tensor {
        let ops = b.compressed_attention_ops().expect("checked at load");
        let d = self.norm.cols();
        let usable = x.rows() / c.ratio * c.ratio;
        let mut head = b.tensor(usable, x.cols());
        b.gather_rows(x, &(0..usable as u32).collect::<Vec<_>>(), &mut head);
        let (mut kv, mut gate) = (b.tensor(usable, self.wkv.rows()), b.tensor(usable, self.wgate.rows()));
        b.linear_multi(&head, &[&self.wkv, &self.wgate], &mut [&mut kv, &mut gate]);
        let num = c.num_entries(usable);
        let mut out = b.tensor(num, d);
        if num > 0 {
            ops.compress_kv(&kv, &gate, &self.ape, &self.norm, eps, c, &mut out);
            let positions: Vec<u32> = (0..num).map(|w| (w * c.ratio) as u32).collect();
            ops.rope_tail_interleaved(&mut out, &b.rope_table(&positions, inv_freq), 1, d, false);
        }
        out
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
    /// Loads `{prefix}.wq_a` … (prefix: `model.layers.{i}.attn`).
    pub fn load(w: &WeightLoader<'_, B>, prefix: &str, spec: AttentionSpec) -> Result<Self, ModelError> {
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
            spec,
        })
    }

    /// The layer's output [num_rows, hidden] for x [num_rows, hidden] (normed), the rows of one
    /// sequence at positions 0, 1, … (`batch.positions`).
    pub fn forward(
        &self,
        b: &B,
        x: &B::Tensor,
        batch: &ForwardBatch,
        rope: &RopeTables<'_, B>,
        layer: usize,
        trace: &mut Option<Trace<'_, B>>,
    ) -> B::Tensor {
        let ops = b.compressed_attention_ops().expect("checked at load");
        let s = self.spec;
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
        // The shared K = V head.
        let mut kv_raw = b.tensor(n, d);
        b.linear(x, &self.wkv, &mut kv_raw);
        let mut kv = b.tensor(n, d);
        b.rms_norm(&kv_raw, &self.kv_norm, eps32, &mut kv);
        ops.rope_tail_interleaved(&mut kv, table, 1, d, false);
        let windows: Vec<(u32, u32)> =
            batch.positions.iter().map(|&p| ((p + 1).saturating_sub(s.sliding_window as u32), p + 1)).collect();
        // Compressed entries and, per row, the ones it attends to.
        let (entries, entry_ids) = match (s.kind, &self.compressor) {
            (AttentionKind::Sliding, _) | (_, None) => (b.tensor(0, d), Vec::new()),
            (AttentionKind::Hca { ratio }, Some(c)) => {
                let overlap = Compression { ratio, overlap: false, prev_window: false };
                let entries = c.entries(b, x, overlap, s.eps, rope.compress_inv_freq);
                let t = entries.rows();
                let ids = batch
                    .positions
                    .iter()
                    .flat_map(|&p| (0..t).map(move |w| if w < (p as usize + 1) / ratio { w as i32 } else { -1 }))
                    .collect();
                (entries, ids)
            }
            (AttentionKind::Csa { ratio, index_heads, index_head_dim: di, top_k }, Some(c)) => {
                let overlap = Compression { ratio, overlap: true, prev_window: false };
                let entries = c.entries(b, x, overlap, s.eps, rope.compress_inv_freq);
                let ix = self.indexer.as_ref().expect("a CSA layer has an indexer");
                let keys = ix.compressor.entries(b, x, overlap, s.eps, rope.compress_inv_freq);
                let mut iq = b.tensor(n, index_heads * di);
                b.linear(&q_res, &ix.wq_b, &mut iq);
                ops.rope_tail_interleaved(&mut iq, rope.compress, index_heads, di, false);
                let mut iw = b.tensor(n, index_heads);
                b.linear(x, &ix.weights_proj, &mut iw);
                let visible: Vec<u32> = batch.positions.iter().map(|&p| (p + 1) / ratio as u32).collect();
                let q_scale = 1.0 / (di as f64).sqrt();
                let w_scale = 1.0 / (index_heads as f64).sqrt();
                let ids = ops.indexer_topk(&iq, &keys, &iw, &visible, top_k, q_scale, w_scale);
                (entries, ids)
            }
        };
        let mut attn = b.tensor(n, h * d);
        ops.sink_attention(&q, &kv, &windows, &entries, &entry_ids, &self.sinks, 1.0 / (d as f64).sqrt(), &mut attn);
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
}

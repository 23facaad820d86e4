//! DeepSeek V4's optional op groups (offered through `Backend::compressed_attention_ops`,
//! `hyper_connection_ops` and `scored_moe_ops`, and asked when the family loads): compressed
//! sparse attention, manifold-constrained hyper-connections, and the scored router with its
//! clamped experts. Every op works on each row alone.

use super::Backend;

/// How a compressor pools rows into entries (DeepSeek V4's CSA and HCA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compression {
    /// Rows per window: entry w pools the rows of positions w·ratio .. (w + 1)·ratio.
    pub ratio: usize,
    /// CSA: each row carries two series `[Ca ‖ Cb]` (and gates `[Za ‖ Zb]`), and entry w pools
    /// window w − 1's Ca with window w's Cb over 2·ratio slots. HCA: one series, window w only.
    pub overlap: bool,
    /// With `overlap`: the input starts with the `ratio` rows of the window before the first
    /// entry it emits. Without it, the first entry is window 0 of a sequence and has no Ca part.
    pub prev_window: bool,
}

impl Compression {
    /// Entries emitted for `num_rows` input rows (a multiple of `ratio`).
    pub fn num_entries(&self, num_rows: usize) -> usize {
        num_rows / self.ratio - usize::from(self.overlap && self.prev_window)
    }
}

/// DeepSeek V4's attention: one shared K = V head over a raw sliding window plus compressed
/// entries (CSA: chosen per query by a lightning indexer; HCA: all causal ones), per-head learned
/// sinks, interleaved RoPE on each head's trailing slice (inverted on the output, because V = K
/// carries it), and a grouped low-rank output projection. Every op here is a pure function of
/// its inputs, row by row, so a row's result never depends on the other rows of the batch.
pub trait CompressedAttentionOps: Backend {
    /// `x / sqrt(mean(x²) + eps)` over every `width`-long slice of each row (no weight).
    /// x, out: [num_rows, k · width].
    fn rms_norm_unweighted(&self, x: &Self::Tensor, width: usize, eps: f64, out: &mut Self::Tensor);
    /// Rotates adjacent pairs (x[o + 2i], x[o + 2i + 1]) of each head's trailing r = table.cols()
    /// dims (o = head_dim − r) by the row's angles in `table` (from `rope_table`), or by their
    /// negatives when `inverse`. The leading head_dim − r dims are untouched.
    /// x: [num_rows, num_heads · head_dim]; table: [num_rows, r] (cos ‖ sin).
    fn rope_tail_interleaved(
        &self,
        x: &mut Self::Tensor,
        table: &Self::Tensor,
        num_heads: usize,
        head_dim: usize,
        inverse: bool,
    );
    /// Pools windows of rows into entries: entry e = `RMSNorm(Σ_j softmax_j(gate_j + ape) · kv_j)
    /// · norm`, the softmax per channel over the window's slots (2·ratio with `overlap`: the
    /// previous window's Ca/Za then this window's Cb/Zb; ratio without). kv, gate: [num_rows,
    /// (1 + overlap) · d] for whole windows (see `Compression::prev_window`); ape: [ratio, (1 +
    /// overlap) · d]; norm: [1, d]; out: [c.num_entries(num_rows), d]. RoPE is the caller's.
    #[allow(clippy::too_many_arguments)]
    fn compress_kv(
        &self,
        kv: &Self::Tensor,
        gate: &Self::Tensor,
        ape: &Self::Weight,
        norm: &Self::Weight,
        eps: f64,
        c: Compression,
        out: &mut Self::Tensor,
    );
    /// The lightning indexer: per row t and entry s < num_visible[t], `score = Σ_h (w[t, h] ·
    /// w_scale) · (relu(q[t, h] · keys[s]) · q_scale)` (heads in order); returns, per row,
    /// `top_k` entry ids in descending score with ties to the lower id, then −1 where fewer are
    /// visible: [num_rows · top_k]. q: [num_rows, H · d]; keys: [num_entries, d]; w: [num_rows, H].
    #[allow(clippy::too_many_arguments)]
    fn indexer_topk(
        &self,
        q: &Self::Tensor,
        keys: &Self::Tensor,
        w: &Self::Tensor,
        num_visible: &[u32],
        top_k: usize,
        q_scale: f64,
        w_scale: f64,
    ) -> Vec<i32>;
    /// Attention with learned sinks over one shared K = V head: row t of head h attends to kv
    /// rows `windows[t].0 .. windows[t].1` and then to the entries `entry_ids[t·k .. (t + 1)·k]`
    /// (ascending, −1 = none; k = entry_ids.len() / num_rows), with `p_j = exp(a_j − m) /
    /// (Σ exp(a − m) + exp(sink_h − m))`, m the max over the scores and the sink.
    /// q, out: [num_rows, num_heads · d]; kv: [num_kv, d]; entries: [num_entries, d]; sinks: [1, H].
    #[allow(clippy::too_many_arguments)]
    fn sink_attention(
        &self,
        q: &Self::Tensor,
        kv: &Self::Tensor,
        windows: &[(u32, u32)],
        entries: &Self::Tensor,
        entry_ids: &[i32],
        sinks: &Self::Weight,
        scale: f64,
        out: &mut Self::Tensor,
    );
    /// Stores `src`'s rows ([slots.len(), w]) at columns `col .. col + w` of the paged rows
    /// (`paged_segments`) of the KV layers from `first_layer`, at `slots` (KV slots, as
    /// `ForwardBatch::slot` gives), each value rounded as the cache stores K and V
    /// (`Backend::kv_store`). The cache must have one KV head.
    fn write_paged_rows(
        &self,
        kv: &mut Self::KvCache,
        first_layer: usize,
        col: usize,
        slots: &[u32],
        src: &Self::Tensor,
    );
    /// `out` ([slots.len(), w]) := columns `col .. col + w` of the paged rows at `slots`, exactly
    /// as stored (the inverse of `write_paged_rows`, up to the store's rounding).
    fn read_paged_rows(
        &self,
        kv: &Self::KvCache,
        first_layer: usize,
        col: usize,
        slots: &[u32],
        out: &mut Self::Tensor,
    );
    /// Block-diagonal product: group g of x's columns (K = x.cols() / groups each) times rows
    /// g·R .. (g + 1)·R of w (R = w.rows() / groups). x: [n, groups · K]; w: [groups · R, K];
    /// out: [n, groups · R].
    fn grouped_linear(&self, x: &Self::Tensor, w: &Self::Weight, groups: usize, out: &mut Self::Tensor);
}

/// A piece of a paged row (`paged_segments`): `len` columns of KV layer `layer`'s K (or V)
/// plane from column `offset` of its head, holding the row's columns `from .. from + len`
/// counted from the first column asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagedSegment {
    pub layer: usize,
    pub v: bool,
    pub offset: usize,
    pub from: usize,
    pub len: usize,
}

/// A model that keeps rows of its own layout in the paged KV cache (DeepSeek V4: raw K,
/// compressor rows and compressed entries per position) reads KV layers `first_layer ..` of a
/// one-head cache as one row per slot: K then V of each layer in turn, `head_dim` columns each.
/// The pieces of columns `col .. col + width` of that row, in column order.
pub fn paged_segments(first_layer: usize, head_dim: usize, col: usize, width: usize) -> Vec<PagedSegment> {
    assert!(head_dim > 0, "paged rows of a zero-width head");
    let mut out = Vec::new();
    let mut at = col;
    while at < col + width {
        let (plane, offset) = (at / head_dim, at % head_dim);
        let len = (head_dim - offset).min(col + width - at);
        out.push(PagedSegment { layer: first_layer + plane / 2, v: plane % 2 == 1, offset, from: at - col, len });
        at += len;
    }
    out
}

/// Geometry and constants of manifold-constrained hyper-connections.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HcSpec {
    /// Residual streams (n).
    pub num_streams: usize,
    pub sinkhorn_iters: usize,
    /// Added to `pre` and to the mixing matrix before and during Sinkhorn normalisation.
    pub hc_eps: f64,
    /// Of the unweighted RMSNorm of the flattened streams.
    pub norm_eps: f64,
}

/// Manifold-constrained hyper-connections (mHC): the residual is n streams per token
/// ([num_rows, n · hidden], stream-major), collapsed into each sublayer's input and re-expanded
/// from its output through a doubly-stochastic mixing matrix. Every op works on each row alone.
pub trait HyperConnectionOps: Backend {
    /// From x̂ = RMSNorm(streams) (unweighted, over all n · hidden) and `m = x̂ · fnᵀ`
    /// ([(2 + n) · n]): `pre = σ(m_pre · scale₀ + base) + hc_eps`, `post = 2σ(m_post · scale₁ +
    /// base)`, `comb = Sinkhorn(softmax_rows(m_comb · scale₂ + base) + hc_eps)` (columns, then
    /// `sinkhorn_iters − 1` times rows and columns, each divided by its sum + hc_eps); writes
    /// post [n_rows, n], comb [n_rows, n · n] (row-major, comb[i·n + j]) and the sublayer input
    /// `collapsed = Σ_i pre_i · stream_i` [n_rows, hidden]. fn: [(2 + n) · n, n · hidden];
    /// base: [1, (2 + n) · n]; scale: [1, 3].
    #[allow(clippy::too_many_arguments)]
    fn hc_pre(
        &self,
        streams: &Self::Tensor,
        fn_w: &Self::Weight,
        base: &Self::Weight,
        scale: &Self::Weight,
        hc: HcSpec,
        post: &mut Self::Tensor,
        comb: &mut Self::Tensor,
        collapsed: &mut Self::Tensor,
    );
    /// New streams: `out_j = post_j · y + Σ_i comb[i·n + j] · stream_i` (i ascending).
    /// streams, out: [n_rows, n · hidden]; y: [n_rows, hidden].
    fn hc_post(
        &self,
        streams: &Self::Tensor,
        y: &Self::Tensor,
        post: &Self::Tensor,
        comb: &Self::Tensor,
        out: &mut Self::Tensor,
    );
    /// The final collapse: `Σ_i (σ(x̂ · fn_iᵀ · scale + base_i) + hc_eps) · stream_i`.
    /// fn: [n, n · hidden]; base: [1, n]; scale: [1, 1]; out: [n_rows, hidden].
    #[allow(clippy::too_many_arguments)]
    fn hc_head(
        &self,
        streams: &Self::Tensor,
        fn_w: &Self::Weight,
        base: &Self::Weight,
        scale: &Self::Weight,
        hc: HcSpec,
        out: &mut Self::Tensor,
    );
}

/// DeepSeek V4's routers and experts: sqrt-softplus scores `s = √softplus(logit)`, chosen by a
/// learned top-k (with a correction bias) or by a static token → experts table, and experts
/// whose SwiGLU clamps its inputs. Each row alone.
pub trait ScoredMoeOps: Backend {
    /// Chooses per row the `k` experts of highest `s + bias` (descending, ties to the lower
    /// expert id; a NaN ranks first) and returns their ids [num_rows · k]; `weights` [num_rows,
    /// k] gets `s_e / (Σ_chosen s + 1e-20) · scaling`. logits: [num_rows, E]; bias: [1, E].
    fn sqrt_softplus_topk(
        &self,
        logits: &Self::Tensor,
        bias: &Self::Weight,
        k: usize,
        scaling: f64,
        weights: &mut Self::Tensor,
    ) -> Vec<u32>;
    /// The weights of given experts (hash routing): as `sqrt_softplus_topk`'s, for `ids`
    /// [num_rows · k], k = weights.cols().
    fn hash_route_weights(&self, logits: &Self::Tensor, ids: &[u32], scaling: f64, weights: &mut Self::Tensor);
    /// out = silu(min(gate, limit)) · clamp(up, −limit, limit).
    fn clamped_swiglu(&self, gate: &Self::Tensor, up: &Self::Tensor, limit: f64, out: &mut Self::Tensor);
}

/// The ops of `CompressedAttentionOps`; a backend whose `compressed_attention_ops` is `Some`
/// must pass a conformance case for each.
pub const COMPRESSED_ATTENTION_OPS: [&str; 7] = [
    "rms_norm_unweighted",
    "rope_tail_interleaved",
    "compress_kv",
    "indexer_topk",
    "sink_attention",
    "grouped_linear",
    "paged_rows",
];

/// The ops of `HyperConnectionOps` (conformance as above).
pub const HYPER_CONNECTION_OPS: [&str; 3] = ["hc_pre", "hc_post", "hc_head"];

/// The ops of `ScoredMoeOps` (conformance as above).
pub const SCORED_MOE_OPS: [&str; 3] = ["sqrt_softplus_topk", "hash_route_weights", "clamped_swiglu"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paged_segments_walk_k_then_v_of_each_layer() {
        let seg = |layer, v, offset, from, len| PagedSegment { layer, v, offset, from, len };
        // head_dim 4: columns 0..4 are layer 2's K, 4..8 its V, 8..12 layer 3's K.
        assert_eq!(paged_segments(2, 4, 0, 4), [seg(2, false, 0, 0, 4)]);
        assert_eq!(paged_segments(2, 4, 3, 7), [seg(2, false, 3, 0, 1), seg(2, true, 0, 1, 4), seg(3, false, 0, 5, 2)]);
        assert!(paged_segments(0, 4, 5, 0).is_empty());
    }
}

//! The Gated DeltaNet token mixer of the hybrid families (Qwen3.5 / 3.6, Qwen3-Next):
//! `in_proj_qkv` → causal depthwise conv (k = 4) + SiLU → q ‖ k ‖ v → L2-normed q, k → the gated
//! delta rule over the lane's recurrent state → RMSNorm · SiLU(`in_proj_z`) per value head →
//! `out_proj`, with `g = −exp(A_log)·softplus(in_proj_a + dt_bias)` and `β = σ(in_proj_b)`.
//!
//! One canonical arithmetic for the recurrence. Engines usually compute prefill with a chunked
//! scan (intra-chunk triangular solve, chunk states carried between chunks) and decode with the
//! one-token recurrence; the two agree in exact arithmetic but round differently, so a token's
//! output would depend on whether it was prefilled, in which chunk, or decoded — and a request
//! resumed from a cache or preempted and recomputed would drift from a fresh one. plumb instead
//! runs the recurrence token by token in position order for every step kind
//! (`GatedDeltaOps::gated_delta_rule`), with every sum over the key dimension in ascending order.
//! The state after token t is then a function of tokens 0..=t alone, computed by the same
//! sequence of roundings whether the tokens came as one prefill, chunks of any size, single
//! decode steps or a resumed request: chunked == whole == token by token, bit for bit. The cost
//! is O(dk·dv) per token and head, independent of context length, which is what linear
//! attention promises anyway; a chunked kernel may come later only if it keeps this order
//! (checkpoints at absolute multiples of a fixed chunk size with fixed intra-chunk arithmetic).
//! The conv state (the last K − 1 inputs) is likewise exact under any split.

use crate::Trace;
use crate::layers::loader::WeightLoader;
use crate::registry::ModelError;
use plumb_core::{Backend, ForwardBatch, FullBackend, GatedDeltaOps, GdnHeads, LaneStateSpec, Shape};

/// The geometry of a family's Gated DeltaNet layers (`linear_*` keys of config.json).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnSpec {
    pub heads: GdnHeads,
    pub conv_kernel: usize,
}

impl GdnSpec {
    /// Lane state for `num_layers` such layers and `num_slots` lanes.
    pub fn lane_state(&self, num_layers: usize, num_slots: usize) -> LaneStateSpec {
        LaneStateSpec {
            num_layers,
            num_slots,
            conv_floats: (self.conv_kernel - 1) * self.heads.qkv_cols(),
            recurrent_floats: self.heads.state_floats(),
            num_snapshots: 0,
        }
    }
}

/// The op group, which the registry checked for at load.
pub(crate) fn ops<B: Backend>(
    b: &B,
) -> &dyn GatedDeltaOps<Tensor = B::Tensor, Weight = B::Weight, KvCache = B::KvCache> {
    b.gated_delta_ops().expect("the registry refuses hybrid families on backends without Gated DeltaNet ops")
}

#[derive(Debug)]
pub struct GatedDeltaNet<B: Backend> {
    /// `in_proj_qkv`, or the q ‖ k ‖ v rows of Qwen3-Next's fused `in_proj_qkvz`.
    in_proj_qkv: B::Weight,
    in_proj_z: B::Weight,
    in_proj_b: B::Weight,
    in_proj_a: B::Weight,
    /// [1, C · K] depthwise taps, channel-major.
    conv1d: B::Weight,
    dt_bias: B::Weight,
    a_log: B::Weight,
    /// [1, v_head_dim]: the gated RMSNorm's weight (not zero-centred).
    norm: B::Weight,
    out_proj: B::Weight,
    spec: GdnSpec,
    eps: f64,
    /// This layer's index among the model's lane-state layers.
    state_layer: usize,
}

/// The projections of one layer, loaded by the family (fused or separate in the checkpoint).
pub struct GdnProjections<B: Backend> {
    pub in_proj_qkv: B::Weight,
    pub in_proj_z: B::Weight,
    pub in_proj_b: B::Weight,
    pub in_proj_a: B::Weight,
}

impl<B: Backend> std::fmt::Debug for GdnProjections<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GdnProjections")
    }
}

impl<B: FullBackend> GatedDeltaNet<B> {
    /// Qwen3.5's separate projections `in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`.
    pub fn load_projections(
        w: &WeightLoader<'_, B>,
        prefix: &str,
        spec: &GdnSpec,
        hidden: usize,
    ) -> Result<GdnProjections<B>, ModelError> {
        let h = spec.heads;
        Ok(GdnProjections {
            in_proj_qkv: w.load_shaped(&format!("{prefix}.in_proj_qkv.weight"), h.qkv_cols(), hidden)?,
            in_proj_z: w.load_shaped(&format!("{prefix}.in_proj_z.weight"), h.num_v_heads * h.v_head_dim, hidden)?,
            in_proj_b: w.load_shaped(&format!("{prefix}.in_proj_b.weight"), h.num_v_heads, hidden)?,
            in_proj_a: w.load_shaped(&format!("{prefix}.in_proj_a.weight"), h.num_v_heads, hidden)?,
        })
    }

    /// Qwen3-Next's fused projections, grouped by key head: `in_proj_qkvz` holds, for each key
    /// head g, `[q_g (dk) ‖ k_g (dk) ‖ v (r·dv) ‖ z (r·dv)]` with r = Hv / Hk (the v and z rows of
    /// value heads g·r … g·r + r − 1), and `in_proj_ba` holds `[b (r) ‖ a (r)]` per key head
    /// (transformers' `fix_query_key_value_ordering`). The rows are regrouped at load into the
    /// q ‖ k ‖ v, z, b and a weights of the separate layout, each row copied as stored.
    pub fn load_fused_projections(
        w: &WeightLoader<'_, B>,
        prefix: &str,
        spec: &GdnSpec,
        hidden: usize,
    ) -> Result<GdnProjections<B>, ModelError> {
        let h = spec.heads;
        let (dk, r) = (h.k_head_dim, h.num_v_heads / h.num_k_heads);
        let rv = r * h.v_head_dim;
        let group = 2 * dk + 2 * rv;
        let rows = |offset: usize, len: usize| -> Vec<std::ops::Range<usize>> {
            (0..h.num_k_heads).map(|g| g * group + offset..g * group + offset + len).collect()
        };
        let qkv = [rows(0, dk), rows(dk, dk), rows(2 * dk, rv)].concat();
        let qkvz = w.load_row_parts(
            &format!("{prefix}.in_proj_qkvz.weight"),
            h.num_k_heads * group,
            hidden,
            &[qkv, rows(2 * dk + rv, rv)],
        )?;
        let ba_rows = |offset: usize| -> Vec<std::ops::Range<usize>> {
            (0..h.num_k_heads).map(|g| g * 2 * r + offset..g * 2 * r + offset + r).collect()
        };
        let ba = w.load_row_parts(
            &format!("{prefix}.in_proj_ba.weight"),
            2 * h.num_v_heads,
            hidden,
            &[ba_rows(0), ba_rows(r)],
        )?;
        let ([in_proj_qkv, in_proj_z], [in_proj_b, in_proj_a]) = (
            <[_; 2]>::try_from(qkvz).unwrap_or_else(|_| unreachable!("two parts asked, two returned")),
            <[_; 2]>::try_from(ba).unwrap_or_else(|_| unreachable!("two parts asked, two returned")),
        );
        Ok(GdnProjections { in_proj_qkv, in_proj_z, in_proj_b, in_proj_a })
    }

    /// The rest of the layer at `prefix` (conv, gates, norm, out_proj) around `proj`.
    pub fn load(
        w: &WeightLoader<'_, B>,
        prefix: &str,
        spec: GdnSpec,
        proj: GdnProjections<B>,
        hidden: usize,
        eps: f64,
        state_layer: usize,
    ) -> Result<Self, ModelError> {
        let h = spec.heads;
        let value_dim = h.num_v_heads * h.v_head_dim;
        Ok(GatedDeltaNet {
            in_proj_qkv: proj.in_proj_qkv,
            in_proj_z: proj.in_proj_z,
            in_proj_b: proj.in_proj_b,
            in_proj_a: proj.in_proj_a,
            conv1d: w.load_flat(&format!("{prefix}.conv1d.weight"), h.qkv_cols() * spec.conv_kernel)?,
            dt_bias: w.load_shaped(&format!("{prefix}.dt_bias"), 1, h.num_v_heads)?,
            a_log: w.load_shaped(&format!("{prefix}.A_log"), 1, h.num_v_heads)?,
            norm: w.load_shaped(&format!("{prefix}.norm.weight"), 1, h.v_head_dim)?,
            out_proj: w.load_shaped(&format!("{prefix}.out_proj.weight"), hidden, value_dim)?,
            spec,
            eps,
            state_layer,
        })
    }

    /// x: [num_rows, hidden] (normed) → [num_rows, hidden]; advances each lane's state.
    pub fn forward(
        &self,
        b: &B,
        x: &B::Tensor,
        batch: &ForwardBatch,
        kv: &mut B::KvCache,
        layer: usize,
        trace: &mut Option<Trace<'_, B>>,
    ) -> B::Tensor {
        let ops = ops(b);
        let (n, h) = (x.rows(), self.spec.heads);
        let value_dim = h.num_v_heads * h.v_head_dim;
        let mut mixed = b.tensor(n, h.qkv_cols());
        let mut z = b.tensor(n, value_dim);
        let mut beta_logit = b.tensor(n, h.num_v_heads);
        let mut a = b.tensor(n, h.num_v_heads);
        b.linear_multi(
            x,
            &[&self.in_proj_qkv, &self.in_proj_z, &self.in_proj_b, &self.in_proj_a],
            &mut [&mut mixed, &mut z, &mut beta_logit, &mut a],
        );
        let mut qkv = b.tensor(n, h.qkv_cols());
        ops.conv1d_silu(kv, self.state_layer, &mixed, &self.conv1d, batch, &mut qkv);
        if let Some(t) = trace {
            t("gdn_conv", Some(layer), &qkv);
        }
        let (mut g, mut beta) = (b.tensor(n, h.num_v_heads), b.tensor(n, h.num_v_heads));
        ops.gdn_gates(&a, &beta_logit, &self.a_log, &self.dt_bias, &mut g, &mut beta);
        let mut core = b.tensor(n, value_dim);
        ops.gated_delta_rule(kv, self.state_layer, &qkv, &g, &beta, h, batch, &mut core);
        if let Some(t) = trace {
            t("gdn_core", Some(layer), &core);
        }
        let mut gated = b.tensor(n, value_dim);
        ops.rms_norm_gated(&core, &z, &self.norm, self.eps, &mut gated);
        let mut out = b.tensor(n, self.out_proj.rows());
        b.linear(&gated, &self.out_proj, &mut out);
        out
    }
}

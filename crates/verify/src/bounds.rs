//! Conformance bounds: one table, each bound with its reason. A float32 backend is compared with
//! the float64 reference on the same float32 inputs; u = 2⁻²⁴ is float32's unit roundoff.

/// How a case measures error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Metric {
    /// ‖y − ref‖ / ‖ref‖.
    Nrms,
    /// max_j |y_j − ref_j| / Σ_k |x_k · w_jk| — the normwise backward error of a dot product,
    /// meaningful even when sums cancel.
    DotBackward,
    /// Bit-for-bit equality with the reference values rounded to float32.
    Exact,
}

/// A bound for one op.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Bound {
    pub op: &'static str,
    pub metric: Metric,
    pub bound: f64,
    pub reason: &'static str,
}

const U: f64 = 1.0 / 16_777_216.0;

/// Dot products of length k as a 16-lane FMA chain of k/16 steps then a 4-level tree: the
/// classic γ bound is (k/16 + 4)·u; one more u for weights the backend rounds once (Q4_1's
/// fma(q, d, m)); doubled for headroom.
pub fn dot_bound(k: usize) -> f64 {
    2.0 * ((k / 16) as f64 + 5.0) * U
}

/// The combine of k expert outputs: per element a k-term sum of products, one rounding for each
/// product and each add, γ_{2k}; doubled for headroom.
pub fn combine_bound(k: usize) -> f64 {
    2.0 * (2 * k) as f64 * U
}

/// Every op's bound (linear ones scale with k via [`dot_bound`]).
pub const BOUNDS: &[Bound] = &[
    Bound {
        op: "linear",
        metric: Metric::DotBackward,
        bound: 0.0,
        reason: "dot_bound(k): lane chains of k/16 FMAs, a 4-level tree, one weight rounding, ×2",
    },
    Bound {
        op: "linear_multi",
        metric: Metric::DotBackward,
        bound: 0.0,
        reason: "as linear: each output is computed as linear computes it",
    },
    Bound {
        op: "embed",
        metric: Metric::Exact,
        bound: 0.0,
        reason: "exact dequantization of one row, no arithmetic beyond the format's own",
    },
    Bound { op: "gather_rows", metric: Metric::Exact, bound: 0.0, reason: "a copy" },
    Bound {
        op: "rms_norm",
        metric: Metric::Nrms,
        bound: 4e-7,
        reason: "sum of squares ((k/16+4)u relative, halved by the sqrt), a divide, two multiplies: ≈ 6u for k ≤ 2048",
    },
    Bound {
        op: "rms_norm_heads",
        metric: Metric::Nrms,
        bound: 4e-7,
        reason: "rms_norm's arithmetic over each head_dim-long slice (k ≤ 256): ≈ 6u",
    },
    Bound {
        op: "add",
        metric: Metric::Nrms,
        bound: 6e-8,
        reason: "one correctly rounded add per element: ≤ u even when the operands cancel",
    },
    Bound {
        op: "add_bias",
        metric: Metric::Exact,
        bound: 0.0,
        reason: "one float32 add per element, correctly rounded; the float64 sum of two float32 values rounds to the same float32",
    },
    Bound {
        op: "silu_mul",
        metric: Metric::Nrms,
        bound: 4e-7,
        reason: "exp to ~2 ulp, an add, a divide, a multiply: ≤ 6u",
    },
    Bound {
        op: "rope_table",
        metric: Metric::Nrms,
        bound: 6e-8,
        reason: "angles and cos/sin in float64, one rounding to float32",
    },
    Bound { op: "rope", metric: Metric::Nrms, bound: 2e-7, reason: "two products and a sum per element: ≤ 3u" },
    Bound {
        op: "rope_rotate_half",
        metric: Metric::Nrms,
        bound: 2e-7,
        reason: "as rope, over pairs (i, i + r/2): two products and a sum per element: ≤ 3u",
    },
    Bound {
        op: "write_kv",
        metric: Metric::Exact,
        bound: 0.0,
        reason: "a copy into the slots the batch names (read back through attention)",
    },
    Bound {
        op: "attention",
        metric: Metric::Nrms,
        bound: 4e-6,
        reason: "q·k chains ((d/16+4)u), exp (~2 ulp), softmax sums over ≤ 64 positions and the V sum: ≈ 60u",
    },
    Bound {
        op: "router_topk",
        metric: Metric::Nrms,
        bound: 4e-7,
        reason: "the chosen experts must equal the reference's exactly (same scores, same tie rule); their weights \
                 are a softmax: exp to ~2 ulp, a sum over ≤ 128 positive terms in float32 (≤ 8u typical), a divide: ≤ 6u",
    },
    Bound {
        op: "moe_combine",
        metric: Metric::DotBackward,
        bound: 0.0,
        reason: "combine_bound(k): a k-term sum of products per element, one multiply and one add each, ×2",
    },
    Bound {
        op: "rms_norm_1p",
        metric: Metric::Nrms,
        bound: 4e-7,
        reason: "rms_norm's arithmetic plus the rounding of (1 + w): ≈ 7u",
    },
    Bound {
        op: "rms_norm_gated",
        metric: Metric::Nrms,
        bound: 8e-7,
        reason: "rms_norm's ≈ 6u, then silu (exp ~2 ulp, add, divide, multiply: ≤ 6u) and one more multiply",
    },
    Bound {
        op: "sigmoid_mul",
        metric: Metric::Nrms,
        bound: 4e-7,
        reason: "exp to ~2 ulp, an add, a divide, a multiply: ≤ 6u",
    },
    Bound {
        op: "gdn_gates",
        metric: Metric::Nrms,
        bound: 6e-7,
        reason: "g: two exps and a log1p (~2 ulp each), an add and a multiply: ≤ 9u; beta: a sigmoid ≤ 5u",
    },
    Bound {
        op: "conv1d_silu",
        metric: Metric::Nrms,
        bound: 6e-7,
        reason: "a 4-term dot (≤ 8u relative to Σ|w·x|, which cancellation can amplify a little) and silu (≤ 6u)",
    },
    Bound {
        op: "gated_delta_rule",
        metric: Metric::Nrms,
        bound: 4e-6,
        reason: "per token: L2 norms (≈ dk/2·u), the decay exp, two dk-term sums and a rank-1 update (≈ 2dk·u); \
                 the decayed state carries earlier tokens' errors forward without growth (|e^g| ≤ 1, \
                 |β·k kᵀ| ≤ 1): measured ≤ 2e-7 over 8 tokens on every ISA; 4e-6 ≈ 70u leaves room for longer runs",
    },
    Bound {
        op: "rms_norm_unweighted",
        metric: Metric::Nrms,
        bound: 4e-7,
        reason: "rms_norm without the weight: the mean of squares, a sqrt, a divide and a multiply: ≈ 5u",
    },
    Bound {
        op: "rope_tail_interleaved",
        metric: Metric::Nrms,
        bound: 2e-7,
        reason: "as rope, on the trailing pairs: two products and a sum per element: ≤ 3u",
    },
    Bound {
        op: "compress_kv",
        metric: Metric::Nrms,
        bound: 4e-6,
        reason: "per channel a softmax over ≤ 2·ratio slots (exp ~2 ulp, a sum, a divide) and a ≤ 2·ratio-term \
                 pooled sum (≤ 4·ratio·u at ratio 8: 32u), then an unweighted RMSNorm and the weight (≈ 6u): ≈ 40u, ×4",
    },
    Bound {
        op: "indexer_topk",
        metric: Metric::Exact,
        bound: 0.0,
        reason: "the chosen entries must equal the reference's (the same scores up to rounding, the same tie rule: \
                 duplicated keys tie exactly on both sides)",
    },
    Bound {
        op: "sink_attention",
        metric: Metric::Nrms,
        bound: 4e-6,
        reason: "as attention: q·k chains, exp (~2 ulp), the softmax sum with the sink and the V sum: ≈ 60u",
    },
    Bound {
        op: "grouped_linear",
        metric: Metric::DotBackward,
        bound: 0.0,
        reason: "dot_bound(k): each group's product is computed as linear computes it",
    },
    Bound {
        op: "hc_pre",
        metric: Metric::Nrms,
        bound: 4e-6,
        reason: "a linear of the normalized streams (dot_bound over n·hidden), sigmoids (≤ 6u), a row softmax and 20 \
                 Sinkhorn rounds (a sum of n and a divide each, errors damped by renormalisation): measured ≤ 1e-7; ≈ 65u",
    },
    Bound {
        op: "hc_post",
        metric: Metric::Nrms,
        bound: 4e-7,
        reason: "an n-term sum of products and one more product and add: (2n + 2)u at n = 4 ≈ 10u",
    },
    Bound {
        op: "hc_head",
        metric: Metric::Nrms,
        bound: 1e-6,
        reason: "a linear of the normalized streams, a sigmoid (≤ 6u) and an n-term collapse ((2n)u): ≈ 16u",
    },
    Bound {
        op: "sqrt_softplus_topk",
        metric: Metric::Nrms,
        bound: 6e-7,
        reason: "the chosen experts must equal the reference's exactly (same tie rule); weights: softplus (exp, log1p \
                 ~2 ulp each), a sqrt, a k-term sum, a divide and the scaling: ≈ 9u",
    },
    Bound { op: "hash_route_weights", metric: Metric::Nrms, bound: 6e-7, reason: "as sqrt_softplus_topk's weights" },
    Bound {
        op: "clamped_swiglu",
        metric: Metric::Nrms,
        bound: 4e-7,
        reason: "clamps are exact; silu (exp ~2 ulp, an add, a divide) and a multiply: ≤ 6u, as sigmoid_mul",
    },
];

/// The bound of `op`.
pub fn bound(op: &str) -> &'static Bound {
    BOUNDS.iter().find(|b| b.op == op).unwrap_or_else(|| panic!("no conformance bound for op `{op}`"))
}

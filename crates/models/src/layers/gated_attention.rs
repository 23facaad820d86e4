//! Gated full attention of the hybrid families (Qwen3.5 / 3.6, Qwen3-Next): `q_proj` emits a
//! query and a gate per head (`[q_h ‖ gate_h]`, split here by rows at load, so the products are
//! unchanged), zero-centred per-head QK RMSNorm, rotate-half RoPE over the first `rope_dim` dims
//! of each head (partial rotary; Qwen3.5's mRoPE is this for text), grouped-query attention over
//! the paged KV cache, then `o_proj(attn · σ(gate))`.

use crate::Trace;
use crate::layers::gated_delta::ops;
use crate::layers::loader::WeightLoader;
use crate::registry::ModelError;
use plumb_checkpoint::ModelConfig;
use plumb_core::{Backend, ForwardBatch, FullBackend, Shape};

#[derive(Debug)]
pub struct GatedAttention<B: Backend> {
    q_proj: B::Weight,
    gate_proj: B::Weight,
    k_proj: B::Weight,
    v_proj: B::Weight,
    o_proj: B::Weight,
    /// [1, head_dim] zero-centred norm weights of q and k.
    q_norm: B::Weight,
    k_norm: B::Weight,
    eps: f64,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
    /// This layer's index among the model's KV (full-attention) layers.
    kv_layer: usize,
}

impl<B: FullBackend> GatedAttention<B> {
    pub fn load(w: &WeightLoader<'_, B>, prefix: &str, c: &ModelConfig, kv_layer: usize) -> Result<Self, ModelError> {
        let (h, kvh, d, hidden) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.hidden_size);
        w.backend.check_head_dim(d)?;
        let query = (0..h).map(|i| 2 * i * d..(2 * i + 1) * d).collect();
        let gate = (0..h).map(|i| (2 * i + 1) * d..(2 * i + 2) * d).collect();
        let [q_proj, gate_proj] = <[_; 2]>::try_from(w.load_row_parts(
            &format!("{prefix}.q_proj.weight"),
            2 * h * d,
            hidden,
            &[query, gate],
        )?)
        .unwrap_or_else(|_| unreachable!("two parts asked, two returned"));
        Ok(GatedAttention {
            q_proj,
            gate_proj,
            k_proj: w.load_shaped(&format!("{prefix}.k_proj.weight"), kvh * d, hidden)?,
            v_proj: w.load_shaped(&format!("{prefix}.v_proj.weight"), kvh * d, hidden)?,
            o_proj: w.load_shaped(&format!("{prefix}.o_proj.weight"), hidden, h * d)?,
            q_norm: w.load_shaped(&format!("{prefix}.q_norm.weight"), 1, d)?,
            k_norm: w.load_shaped(&format!("{prefix}.k_norm.weight"), 1, d)?,
            eps: c.rms_norm_eps,
            num_heads: h,
            num_kv_heads: kvh,
            head_dim: d,
            kv_layer,
        })
    }

    /// x: [num_rows, hidden] (normed) → [num_rows, hidden]. `rope` is the step's cos/sin table
    /// over the rotary dims.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        b: &B,
        x: &B::Tensor,
        rope: &B::Tensor,
        batch: &ForwardBatch,
        kv: &mut B::KvCache,
        layer: usize,
        trace: &mut Option<Trace<'_, B>>,
    ) -> B::Tensor {
        let ops = ops(b);
        let n = x.rows();
        let (h, kvh, d) = (self.num_heads, self.num_kv_heads, self.head_dim);
        let (mut q_raw, mut gate) = (b.tensor(n, h * d), b.tensor(n, h * d));
        let (mut k_raw, mut v) = (b.tensor(n, kvh * d), b.tensor(n, kvh * d));
        b.linear_multi(
            x,
            &[&self.q_proj, &self.gate_proj, &self.k_proj, &self.v_proj],
            &mut [&mut q_raw, &mut gate, &mut k_raw, &mut v],
        );
        let (mut q, mut k) = (b.tensor(n, h * d), b.tensor(n, kvh * d));
        ops.rms_norm_1p(&q_raw, &self.q_norm, self.eps, &mut q);
        ops.rms_norm_1p(&k_raw, &self.k_norm, self.eps, &mut k);
        b.rope_rotate_half(&mut q, rope, h, d);
        b.rope_rotate_half(&mut k, rope, kvh, d);
        if let Some(t) = trace {
            t("q_rope", Some(layer), &q);
            t("k_rope", Some(layer), &k);
        }
        b.write_kv(kv, self.kv_layer, &k, &v, batch);
        let mut attn = b.tensor(n, h * d);
        b.attention(&q, kv, self.kv_layer, batch, h, 1.0 / (d as f64).sqrt(), &mut attn);
        let mut gated = b.tensor(n, h * d);
        ops.sigmoid_mul(&attn, &gate, &mut gated);
        if let Some(t) = trace {
            t("attn_out", Some(layer), &gated);
        }
        let mut out = b.tensor(n, self.o_proj.rows());
        b.linear(&gated, &self.o_proj, &mut out);
        out
    }
}

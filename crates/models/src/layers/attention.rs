//! Grouped-query self-attention over the paged KV cache: project, rotate, store K/V, attend,
//! project out, with the projections' biases where a checkpoint has them (Qwen2-style Llamas),
//! optional per-head QK RMSNorm before RoPE (Qwen3), and RoPE in the checkpoint's pair layout.
//! The backend owns the cache layout; this layer never sees a block.

use crate::Trace;
use crate::layers::loader::WeightLoader;
use crate::layers::residual::{self, Input};
use crate::registry::ModelError;
use plumb_checkpoint::{ModelConfig, RopeLayout};
use plumb_core::{Backend, ForwardBatch, FullBackend, Shape};

#[derive(Debug)]
pub struct Attention<B: Backend> {
    q_proj: B::Weight,
    k_proj: B::Weight,
    v_proj: B::Weight,
    o_proj: B::Weight,
    /// Biases of q, k, v and o, each present or not as the checkpoint has it.
    biases: [Option<B::Weight>; 4],
    /// Per-head RMSNorm weights of q and k ([1, head_dim] each), applied before RoPE.
    qk_norm: Option<(B::Weight, B::Weight)>,
    rope_layout: RopeLayout,
    rms_norm_eps: f32,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
}

impl<B: FullBackend> Attention<B> {
    pub fn load(w: &WeightLoader<'_, B>, prefix: &str, c: &ModelConfig) -> Result<Self, ModelError> {
        let (h, kvh, d) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        w.backend.check_head_dim(d)?;
        let bias = |name: &str, len: usize| w.load_optional_vector(&format!("{prefix}.{name}.bias"), len);
        Ok(Attention {
            biases: [
                bias("q_proj", h * d)?,
                bias("k_proj", kvh * d)?,
                bias("v_proj", kvh * d)?,
                bias("o_proj", c.hidden_size)?,
            ],
            q_proj: w.load_shaped(&format!("{prefix}.q_proj.weight"), h * d, c.hidden_size)?,
            k_proj: w.load_shaped(&format!("{prefix}.k_proj.weight"), kvh * d, c.hidden_size)?,
            v_proj: w.load_shaped(&format!("{prefix}.v_proj.weight"), kvh * d, c.hidden_size)?,
            o_proj: w.load_shaped(&format!("{prefix}.o_proj.weight"), c.hidden_size, h * d)?,
            qk_norm: None,
            rope_layout: c.rope_layout,
            rms_norm_eps: c.rms_norm_eps as f32,
            num_heads: h,
            num_kv_heads: kvh,
            head_dim: d,
        })
    }

    /// Adds the per-head `q_norm` / `k_norm` RMSNorm before RoPE (Qwen3 and later families).
    pub fn with_qk_norm(mut self, w: &WeightLoader<'_, B>, prefix: &str) -> Result<Self, ModelError> {
        let d = self.head_dim;
        self.qk_norm = Some((
            w.load_shaped(&format!("{prefix}.q_norm.weight"), 1, d)?,
            w.load_shaped(&format!("{prefix}.k_norm.weight"), 1, d)?,
        ));
        Ok(self)
    }

    /// x: [num_rows, hidden] (normed) → [num_rows, hidden]. `rope` is the step's cos/sin table.
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
        let [mut q, mut k, mut v] = self.qkv_tensors(b, x.rows());
        b.linear_multi(x, &[&self.q_proj, &self.k_proj, &self.v_proj], &mut [&mut q, &mut k, &mut v]);
        let attn = self.attend(b, [q, k, v], rope, batch, kv, layer, trace);
        self.project_out(b, &attn)
    }

    /// x += `forward`(rms_norm(x)) (`input`: the normed rows, or the layer's input norm to apply),
    /// with the norm inside the q|k|v products (`norm_linear_multi`) and the add inside o's
    /// (`linear_add`, where o has no bias), for a backend that fuses them: the bits of `rms_norm`,
    /// `forward` and `add` apart. With `next` (the next sublayer's norm), returns that sublayer's
    /// input where the add computed it (`residual`). Untraced steps only (the trace wants the
    /// normed input).
    #[allow(clippy::too_many_arguments)]
    pub fn forward_residual(
        &self,
        b: &B,
        x: &mut B::Tensor,
        input: Input<'_, B>,
        next: Option<(&B::Weight, f32)>,
        rope: &B::Tensor,
        batch: &ForwardBatch,
        kv: &mut B::KvCache,
        layer: usize,
    ) -> Option<B::Tensor> {
        let [mut q, mut k, mut v] = self.qkv_tensors(b, x.rows());
        let ws = [&self.q_proj, &self.k_proj, &self.v_proj];
        let (from, norm) = match input {
            Input::Normed(n) => (n, None),
            Input::Pending(norm) => (&*x, Some(norm)),
        };
        let attn = if self.biases[..3].iter().all(Option::is_none) && self.qk_norm.is_none() {
            // Nothing between the products and RoPE: one launch where the backend fuses them.
            let (heads, rotate_half) = ((self.num_heads, self.num_kv_heads, self.head_dim), self.rotate_half());
            b.norm_qkv_rope_write_kv(
                from,
                norm,
                ws,
                [&mut q, &mut k, &mut v],
                rope,
                kv,
                layer,
                batch,
                heads,
                rotate_half,
            );
            self.attention(b, &q, batch, kv, layer, &mut None)
        } else {
            match norm {
                Some(norm) => b.norm_linear_multi(from, norm, &ws, &mut [&mut q, &mut k, &mut v]),
                None => b.linear_multi(from, &ws, &mut [&mut q, &mut k, &mut v]),
            }
            self.attend(b, [q, k, v], rope, batch, kv, layer, &mut None)
        };
        // The bias goes in before the residual add: o's add in the store only without one.
        match &self.biases[3] {
            None => residual::linear_add(b, &attn, &self.o_proj, x, next),
            Some(_) => residual::add(b, x, &self.project_out(b, &attn), next),
        }
    }

    /// o's product of the attention output, with its bias where the checkpoint has one.
    fn project_out(&self, b: &B, attn: &B::Tensor) -> B::Tensor {
        let mut out = b.tensor(attn.rows(), self.o_proj.rows());
        b.linear(attn, &self.o_proj, &mut out);
        if let Some(bias) = &self.biases[3] {
            b.add_bias(&mut out, bias);
        }
        out
    }

    /// Empty q, k and v for `n` rows.
    fn qkv_tensors(&self, b: &B, n: usize) -> [B::Tensor; 3] {
        let (h, kvh, d) = (self.num_heads, self.num_kv_heads, self.head_dim);
        [b.tensor(n, h * d), b.tensor(n, kvh * d), b.tensor(n, kvh * d)]
    }

    /// From the projected q, k and v to the attention output (before o): biases, the QK norm,
    /// RoPE and the K/V store, then attention over the cache.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        b: &B,
        [mut q, mut k, mut v]: [B::Tensor; 3],
        rope: &B::Tensor,
        batch: &ForwardBatch,
        kv: &mut B::KvCache,
        layer: usize,
        trace: &mut Option<Trace<'_, B>>,
    ) -> B::Tensor {
        let n = q.rows();
        let (h, kvh, d) = (self.num_heads, self.num_kv_heads, self.head_dim);
        for (t, bias) in [&mut q, &mut k, &mut v].into_iter().zip(&self.biases) {
            if let Some(bias) = bias {
                b.add_bias(t, bias);
            }
        }
        if let Some((q_norm, k_norm)) = &self.qk_norm {
            let (mut q_normed, mut k_normed) = (b.tensor(n, h * d), b.tensor(n, kvh * d));
            b.rms_norm_heads(&q, q_norm, self.rms_norm_eps, &mut q_normed);
            b.rms_norm_heads(&k, k_norm, self.rms_norm_eps, &mut k_normed);
            (q, k) = (q_normed, k_normed);
            if let Some(t) = trace {
                t("q_norm", Some(layer), &q);
                t("k_norm", Some(layer), &k);
            }
        }
        b.rope_write_kv(&mut q, &mut k, &v, rope, kv, layer, batch, (h, kvh, d), self.rotate_half());
        if let Some(t) = trace {
            t("q_rope", Some(layer), &q);
            t("k_rope", Some(layer), &k);
        }
        self.attention(b, &q, batch, kv, layer, trace)
    }

    /// Whether RoPE rotates (x[i], x[i + r/2]) rather than adjacent pairs.
    fn rotate_half(&self) -> bool {
        self.rope_layout == RopeLayout::RotateHalf
    }

    /// Attention of the rotated q over the cache (K/V already stored).
    fn attention(
        &self,
        b: &B,
        q: &B::Tensor,
        batch: &ForwardBatch,
        kv: &mut B::KvCache,
        layer: usize,
        trace: &mut Option<Trace<'_, B>>,
    ) -> B::Tensor {
        let (h, d) = (self.num_heads, self.head_dim);
        let mut attn = b.tensor(q.rows(), h * d);
        // The scale rounded to float32 first, as these families have always computed it.
        let scale = (1.0 / (d as f32).sqrt()) as f64;
        b.attention(q, kv, layer, batch, h, scale, &mut attn);
        if let Some(t) = trace {
            t("attn_out", Some(layer), &attn);
        }
        attn
    }
}

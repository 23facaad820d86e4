//! The pre-norm decoder stack the Llama-style families share: embed, then per layer
//! `x += attn(rms_norm(x))` and `x += mlp(rms_norm(x))`, then the final norm and the head on the
//! rows that want logits. A family loads its attention and feed-forward blocks its own way (QK
//! norm, biases, experts) and hands the pieces over; the forward pass is written once, here.

use crate::Trace;
use crate::layers::residual::{self, Input};
use crate::layers::{attention::Attention, loader::WeightLoader, mlp::Mlp, moe::Moe};
use crate::registry::ModelError;
use plumb_checkpoint::ModelConfig;
use plumb_core::{Backend, ForwardBatch, FullBackend, Shape};

/// A decoder layer's feed-forward block: one SwiGLU MLP, or a mixture of them.
pub enum FeedForward<B: Backend> {
    Dense(Mlp<B>),
    Moe(Moe<B>),
}

impl<B: Backend> std::fmt::Debug for FeedForward<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FeedForward::Dense(_) => "FeedForward::Dense",
            FeedForward::Moe(_) => "FeedForward::Moe",
        })
    }
}

impl<B: FullBackend> FeedForward<B> {
    /// The dense SwiGLU MLP of `intermediate_size` at `prefix` (Llama's and Qwen3's every layer).
    pub fn dense(w: &WeightLoader<'_, B>, prefix: &str, c: &ModelConfig) -> Result<Self, ModelError> {
        Ok(FeedForward::Dense(Mlp::load(w, prefix, c.hidden_size, c.intermediate_size)?))
    }

    /// x: [num_rows, hidden] (normed) → [num_rows, hidden].
    pub fn forward(&self, b: &B, x: &B::Tensor, layer: usize, trace: &mut Option<Trace<'_, B>>) -> B::Tensor {
        match self {
            FeedForward::Dense(mlp) => mlp.forward(b, x, layer, trace),
            FeedForward::Moe(moe) => moe.forward(b, x, layer, trace),
        }
    }

    /// x += `forward`(rms_norm(x)) (`input`: the normed rows, or the norm to apply): a dense block
    /// with the norm and the add inside its products where the backend fuses them
    /// (`Mlp::forward_residual`), experts on the normed rows. With `next`, the next sublayer's
    /// input where the add computed it (`residual`).
    pub fn forward_residual(
        &self,
        b: &B,
        x: &mut B::Tensor,
        input: Input<'_, B>,
        next: Option<(&B::Weight, f32)>,
        layer: usize,
    ) -> Option<B::Tensor> {
        match self {
            FeedForward::Dense(mlp) => mlp.forward_residual(b, x, input, next),
            FeedForward::Moe(moe) => {
                let out = input.with_normed(b, x, |normed| moe.forward(b, normed, layer, &mut None));
                residual::add(b, x, &out, next)
            }
        }
    }
}

/// One decoder layer.
struct DecoderLayer<B: Backend> {
    input_layernorm: B::Weight,
    self_attn: Attention<B>,
    post_attention_layernorm: B::Weight,
    mlp: FeedForward<B>,
}

/// A decoder-only model: its weights and RoPE frequencies.
pub struct Decoder<B: Backend> {
    pub config: ModelConfig,
    embed_tokens: B::Weight,
    layers: Vec<DecoderLayer<B>>,
    norm: B::Weight,
    /// `None` when tied: the head is `embed_tokens`.
    lm_head: Option<B::Weight>,
    inv_freq: Vec<f64>,
}

impl<B: Backend> std::fmt::Debug for Decoder<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tied = if self.lm_head.is_none() { ", tied head" } else { "" };
        write!(f, "Decoder({} layers, hidden {}{tied})", self.layers.len(), self.config.hidden_size)
    }
}

impl<B: FullBackend> Decoder<B> {
    /// Loads every layer (`attention` loads `self_attn` from its prefix, `mlp` layer i's
    /// feed-forward block from its prefix), the embedding, the final norm and the head the
    /// family chose.
    pub fn load(
        w: &WeightLoader<'_, B>,
        config: ModelConfig,
        attention: impl Fn(&str) -> Result<Attention<B>, ModelError>,
        mlp: impl Fn(usize, &str) -> Result<FeedForward<B>, ModelError>,
        lm_head: Option<B::Weight>,
        inv_freq: Vec<f64>,
    ) -> Result<Self, ModelError> {
        let c = &config;
        let hidden = c.hidden_size;
        let layers = (0..c.num_hidden_layers)
            .map(|i| {
                let p = format!("model.layers.{i}");
                Ok(DecoderLayer {
                    input_layernorm: w.load_shaped(&format!("{p}.input_layernorm.weight"), 1, hidden)?,
                    self_attn: attention(&format!("{p}.self_attn"))?,
                    post_attention_layernorm: w.load_shaped(
                        &format!("{p}.post_attention_layernorm.weight"),
                        1,
                        hidden,
                    )?,
                    mlp: mlp(i, &format!("{p}.mlp"))?,
                })
            })
            .collect::<Result<_, ModelError>>()?;
        Ok(Decoder {
            embed_tokens: w.load_shaped("model.embed_tokens.weight", c.vocab_size, hidden)?,
            norm: w.load_shaped("model.norm.weight", 1, hidden)?,
            layers,
            lm_head,
            inv_freq,
            config,
        })
    }

    /// One step: every row's K/V into `kv`; logits [batch.logits_rows.len(), vocab].
    pub fn forward(
        &self,
        b: &B,
        batch: &ForwardBatch,
        kv: &mut B::KvCache,
        mut trace: Option<Trace<'_, B>>,
    ) -> B::Tensor {
        let c = &self.config;
        let (n, hidden, eps) = (batch.num_rows(), c.hidden_size, c.rms_norm_eps as f32);
        b.begin_step(batch, kv);
        let mut x = b.tensor(n, hidden);
        b.embed(&batch.token_ids, &self.embed_tokens, &mut x);
        let rope = b.rope_table(&batch.positions, &self.inv_freq);
        if trace.is_none() {
            // Each sublayer reads rms_norm(x) and adds its output into x, the norm inside its
            // first products and the add inside its last where the backend fuses them, else the
            // add and the next norm as one pass (`residual`): the bits of the traced loop below,
            // which materializes the norms for the trace.
            let mut normed: Option<B::Tensor> = None;
            for (i, layer) in self.layers.iter().enumerate() {
                let (attn_norm, mlp_norm) = ((&layer.input_layernorm, eps), (&layer.post_attention_layernorm, eps));
                let next = self.layers.get(i + 1).map(|next| (&next.input_layernorm, eps));
                let input = Input::from(normed.as_ref(), attn_norm);
                normed = layer.self_attn.forward_residual(b, &mut x, input, Some(mlp_norm), &rope, batch, kv, i);
                normed = layer.mlp.forward_residual(b, &mut x, Input::from(normed.as_ref(), mlp_norm), next, i);
            }
            let head = self.lm_head.as_ref().unwrap_or(&self.embed_tokens);
            return output_head(
                b,
                &x,
                batch,
                c.vocab_size,
                head,
                |x, out| b.rms_norm(x, &self.norm, eps, out),
                &mut trace,
            );
        }
        let mut normed = b.tensor(n, hidden);
        // Each residual add and the norm that reads its sum run as one `add_rms_norm` (the bits of
        // the two apart); the last layer's output goes to the final norm in the head.
        if let Some(first) = self.layers.first() {
            b.rms_norm(&x, &first.input_layernorm, eps, &mut normed);
        }
        for (i, layer) in self.layers.iter().enumerate() {
            if let Some(t) = &mut trace {
                t("attn_norm", Some(i), &normed);
            }
            let attn = layer.self_attn.forward(b, &normed, &rope, batch, kv, i, &mut trace);
            b.add_rms_norm(&mut x, &attn, &layer.post_attention_layernorm, eps, &mut normed);
            let mlp = layer.mlp.forward(b, &normed, i, &mut trace);
            match self.layers.get(i + 1) {
                Some(next) => b.add_rms_norm(&mut x, &mlp, &next.input_layernorm, eps, &mut normed),
                None => b.add(&mut x, &mlp),
            }
            if let Some(t) = &mut trace {
                t("layer_out", Some(i), &x);
            }
        }
        let head = self.lm_head.as_ref().unwrap_or(&self.embed_tokens);
        output_head(b, &x, batch, c.vocab_size, head, |x, out| b.rms_norm(x, &self.norm, eps, out), &mut trace)
    }
}

/// The logits of a step's `logits_rows`: those rows of the last hidden state, the final norm
/// (`norm`, the family's kind), then the head; shared by every decoder stack.
pub(crate) fn output_head<B: FullBackend>(
    b: &B,
    x: &B::Tensor,
    batch: &ForwardBatch,
    vocab_size: usize,
    head: &B::Weight,
    norm: impl FnOnce(&B::Tensor, &mut B::Tensor),
    trace: &mut Option<Trace<'_, B>>,
) -> B::Tensor {
    let (rows, hidden) = (batch.logits_rows.len(), x.cols());
    let mut last = b.tensor(rows, hidden);
    b.gather_rows(x, &batch.logits_rows, &mut last);
    let mut normed_last = b.tensor(rows, hidden);
    norm(&last, &mut normed_last);
    let mut logits = b.tensor(rows, vocab_size);
    b.linear(&normed_last, head, &mut logits);
    if let Some(t) = trace {
        t("logits", None, &logits);
    }
    logits
}

//! The Qwen3 family (Qwen3ForCausalLM, dense): Llama's pre-norm decoder of grouped-query attention
//! and SwiGLU, plus a per-head RMSNorm of q and k (`q_norm`, `k_norm`) before RoPE, no attention
//! bias, and an output head that is tied or not as `tie_word_embeddings` says.
//! RoPE pairs dimensions rotate-half style: Hugging Face stores Q/K that way and llama.cpp's
//! converter leaves Qwen3 unpermuted, so both sources carry `RopeLayout::RotateHalf`.

use crate::layers::{attention::Attention, loader::WeightLoader, mlp::Mlp, rope};
use crate::registry::ModelError;
use crate::{CausalLm, Trace};
use plumb_checkpoint::ModelConfig;
use plumb_checkpoint::hparams::RopeScaling;
use plumb_core::{Backend, ForwardBatch, FullBackend};

#[derive(Debug)]
struct Layer<B: Backend> {
    input_layernorm: B::Weight,
    self_attn: Attention<B>,
    post_attention_layernorm: B::Weight,
    mlp: Mlp<B>,
}

/// A loaded Qwen3 model.
#[derive(Debug)]
pub struct Qwen3<B: Backend> {
    config: ModelConfig,
    embed_tokens: B::Weight,
    layers: Vec<Layer<B>>,
    norm: B::Weight,
    /// `None` when tied: the head is `embed_tokens`.
    lm_head: Option<B::Weight>,
    inv_freq: Vec<f64>,
}

impl<B: FullBackend> Qwen3<B> {
    pub fn load(w: &WeightLoader<'_, B>, config: ModelConfig) -> Result<Self, ModelError> {
        if matches!(config.rope_scaling, Some(RopeScaling::Yarn { .. })) {
            return Err(ModelError::Unsupported("YaRN RoPE scaling"));
        }
        let c = &config;
        let hidden = c.hidden_size;
        let layers = (0..c.num_hidden_layers)
            .map(|i| {
                let p = format!("model.layers.{i}");
                let attn = format!("{p}.self_attn");
                Ok(Layer {
                    input_layernorm: w.load_shaped(&format!("{p}.input_layernorm.weight"), 1, hidden)?,
                    self_attn: Attention::load(w, &attn, c)?.with_qk_norm(w, &attn)?,
                    post_attention_layernorm: w.load_shaped(
                        &format!("{p}.post_attention_layernorm.weight"),
                        1,
                        hidden,
                    )?,
                    mlp: Mlp::load(w, &format!("{p}.mlp"), hidden, c.intermediate_size)?,
                })
            })
            .collect::<Result<_, ModelError>>()?;
        // A tied checkpoint that also stores `lm_head.weight` is refused by `finish` below.
        let lm_head = match c.tie_word_embeddings {
            true => None,
            false => Some(w.load_shaped("lm_head.weight", c.vocab_size, hidden)?),
        };
        let model = Qwen3 {
            embed_tokens: w.load_shaped("model.embed_tokens.weight", c.vocab_size, hidden)?,
            norm: w.load_shaped("model.norm.weight", 1, hidden)?,
            layers,
            lm_head,
            inv_freq: rope::inv_freq(c),
            config,
        };
        w.finish(&[])?;
        Ok(model)
    }
}

impl<B: FullBackend> CausalLm<B> for Qwen3<B> {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn forward(&self, b: &B, batch: &ForwardBatch, kv: &mut B::KvCache, mut trace: Option<Trace<'_, B>>) -> B::Tensor {
        let c = &self.config;
        let (n, hidden, eps) = (batch.num_rows(), c.hidden_size, c.rms_norm_eps as f32);
        let mut x = b.tensor(n, hidden);
        b.embed(&batch.token_ids, &self.embed_tokens, &mut x);
        let rope = b.rope_table(&batch.positions, &self.inv_freq);
        let mut normed = b.tensor(n, hidden);
        for (i, layer) in self.layers.iter().enumerate() {
            b.rms_norm(&x, &layer.input_layernorm, eps, &mut normed);
            if let Some(t) = &mut trace {
                t("attn_norm", Some(i), &normed);
            }
            let attn = layer.self_attn.forward(b, &normed, &rope, batch, kv, i, &mut trace);
            b.add(&mut x, &attn);
            b.rms_norm(&x, &layer.post_attention_layernorm, eps, &mut normed);
            let mlp = layer.mlp.forward(b, &normed, i, &mut trace);
            b.add(&mut x, &mlp);
            if let Some(t) = &mut trace {
                t("layer_out", Some(i), &x);
            }
        }
        let mut last = b.tensor(batch.logits_rows.len(), hidden);
        b.gather_rows(&x, &batch.logits_rows, &mut last);
        let mut normed_last = b.tensor(batch.logits_rows.len(), hidden);
        b.rms_norm(&last, &self.norm, eps, &mut normed_last);
        let head = self.lm_head.as_ref().unwrap_or(&self.embed_tokens);
        let mut logits = b.tensor(batch.logits_rows.len(), c.vocab_size);
        b.linear(&normed_last, head, &mut logits);
        if let Some(t) = &mut trace {
            t("logits", None, &logits);
        }
        logits
    }
}

//! The decoder stack of the hybrid linear-attention families (Qwen3.5 / 3.6, Qwen3-Next): per
//! layer `x += mixer(norm(x))` and `x += ffn(norm(x))`, where the mixer is Gated DeltaNet or gated
//! full attention as `layer_types` says, and every norm is zero-centred (`· (1 + w)`). Only the
//! full-attention layers own paged K/V (KV layer = their rank among full layers); the linear
//! ones own a fixed-size per-lane state (lane-state layer = their rank among linear layers).

use crate::Trace;
use crate::layers::decoder::{FeedForward, output_head};
use crate::layers::gated_attention::GatedAttention;
use crate::layers::gated_delta::{GatedDeltaNet, GdnSpec, ops};
use crate::layers::loader::WeightLoader;
use crate::registry::ModelError;
use plumb_checkpoint::ModelConfig;
use plumb_core::{Backend, ForwardBatch, FullBackend, KvSpec};

/// A layer's token mixer.
pub enum Mixer<B: Backend> {
    Linear(GatedDeltaNet<B>),
    Full(GatedAttention<B>),
}

impl<B: Backend> std::fmt::Debug for Mixer<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mixer::Linear(_) => "Mixer::Linear",
            Mixer::Full(_) => "Mixer::Full",
        })
    }
}

struct HybridLayer<B: Backend> {
    input_layernorm: B::Weight,
    mixer: Mixer<B>,
    post_attention_layernorm: B::Weight,
    mlp: FeedForward<B>,
}

/// A loaded hybrid decoder.
pub struct HybridDecoder<B: Backend> {
    pub config: ModelConfig,
    pub gdn: GdnSpec,
    embed_tokens: B::Weight,
    layers: Vec<HybridLayer<B>>,
    norm: B::Weight,
    /// `None` when tied: the head is `embed_tokens`.
    lm_head: Option<B::Weight>,
    inv_freq: Vec<f64>,
    num_full: usize,
    num_linear: usize,
}

impl<B: Backend> std::fmt::Debug for HybridDecoder<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "HybridDecoder({} linear-attention + {} full-attention layers, hidden {})",
            self.num_linear, self.num_full, self.config.hidden_size
        )
    }
}

/// Loads a Gated DeltaNet at a prefix as the given lane-state layer.
pub type LoadLinear<'f, B> = &'f dyn Fn(&str, usize) -> Result<GatedDeltaNet<B>, ModelError>;
/// Loads layer i's feed-forward block at a prefix.
pub type LoadMlp<'f, B> = &'f dyn Fn(usize, &str) -> Result<FeedForward<B>, ModelError>;

/// How a family builds one layer's pieces (`prefix` is `…layers.{i}`).
pub struct LayerLoaders<'f, B: Backend> {
    /// Layer i's Gated DeltaNet at `{prefix}.linear_attn`, as its `state_layer`-th state layer.
    pub linear: LoadLinear<'f, B>,
    /// Layer i's feed-forward block at `{prefix}.mlp`.
    pub mlp: LoadMlp<'f, B>,
}

impl<B: Backend> std::fmt::Debug for LayerLoaders<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LayerLoaders")
    }
}

impl<B: FullBackend> HybridDecoder<B> {
    /// Loads the stack under `prefix` (`model`, or `model.language_model` in vision-language
    /// checkpoints). `is_linear[i]` says whether layer i is a Gated DeltaNet layer.
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        w: &WeightLoader<'_, B>,
        prefix: &str,
        config: ModelConfig,
        gdn: GdnSpec,
        is_linear: &[bool],
        loaders: LayerLoaders<'_, B>,
        lm_head: Option<B::Weight>,
        inv_freq: Vec<f64>,
    ) -> Result<Self, ModelError> {
        let c = &config;
        let hidden = c.hidden_size;
        let (mut num_full, mut num_linear) = (0, 0);
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for (i, &linear) in is_linear.iter().enumerate() {
            let p = format!("{prefix}.layers.{i}");
            let mixer = if linear {
                num_linear += 1;
                Mixer::Linear((loaders.linear)(&format!("{p}.linear_attn"), num_linear - 1)?)
            } else {
                num_full += 1;
                Mixer::Full(GatedAttention::load(w, &format!("{p}.self_attn"), c, num_full - 1)?)
            };
            layers.push(HybridLayer {
                input_layernorm: w.load_shaped(&format!("{p}.input_layernorm.weight"), 1, hidden)?,
                mixer,
                post_attention_layernorm: w.load_shaped(&format!("{p}.post_attention_layernorm.weight"), 1, hidden)?,
                mlp: (loaders.mlp)(i, &format!("{p}.mlp"))?,
            });
        }
        Ok(HybridDecoder {
            embed_tokens: w.load_shaped(&format!("{prefix}.embed_tokens.weight"), c.vocab_size, hidden)?,
            norm: w.load_shaped(&format!("{prefix}.norm.weight"), 1, hidden)?,
            gdn,
            layers,
            lm_head,
            inv_freq,
            num_full,
            num_linear,
            config,
        })
    }

    /// K/V for the full-attention layers only, and a lane-state slot per lane for the others.
    pub fn kv_spec_for_lanes(&self, block_size: usize, num_blocks: usize, num_lanes: usize) -> KvSpec {
        let c = &self.config;
        KvSpec {
            num_layers: self.num_full,
            num_kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
            block_size,
            num_blocks,
            lane_state: self.gdn.lane_state(self.num_linear, num_lanes),
        }
    }

    /// The stack's state layers are Gated DeltaNet layers, whose recurrence runs token by token
    /// in one canonical order (see gated_delta.rs) and whose kernels honour state snapshots: the
    /// prefix cache can resume them exactly from a snapshot at a block boundary.
    pub fn lane_state_snapshots(&self) -> bool {
        true
    }

    /// One step: K/V of the full layers into `kv`, each lane's state advanced past its rows;
    /// logits [batch.logits_rows.len(), vocab].
    pub fn forward(
        &self,
        b: &B,
        batch: &ForwardBatch,
        kv: &mut B::KvCache,
        mut trace: Option<Trace<'_, B>>,
    ) -> B::Tensor {
        let ops = ops(b);
        let c = &self.config;
        let (n, hidden, eps) = (batch.num_rows(), c.hidden_size, c.rms_norm_eps);
        b.begin_step(batch, kv);
        let mut x = b.tensor(n, hidden);
        b.embed(&batch.token_ids, &self.embed_tokens, &mut x);
        let rope = b.rope_table(&batch.positions, &self.inv_freq);
        let mut normed = b.tensor(n, hidden);
        for (i, layer) in self.layers.iter().enumerate() {
            ops.rms_norm_1p(&x, &layer.input_layernorm, eps, &mut normed);
            if let Some(t) = &mut trace {
                t("attn_norm", Some(i), &normed);
            }
            let mixed = match &layer.mixer {
                Mixer::Linear(gdn) => gdn.forward(b, &normed, batch, kv, i, &mut trace),
                Mixer::Full(attn) => attn.forward(b, &normed, &rope, batch, kv, i, &mut trace),
            };
            b.add(&mut x, &mixed);
            ops.rms_norm_1p(&x, &layer.post_attention_layernorm, eps, &mut normed);
            let mlp = layer.mlp.forward(b, &normed, i, &mut trace);
            b.add(&mut x, &mlp);
            if let Some(t) = &mut trace {
                t("layer_out", Some(i), &x);
            }
        }
        let head = self.lm_head.as_ref().unwrap_or(&self.embed_tokens);
        let norm = |x: &B::Tensor, out: &mut B::Tensor| ops.rms_norm_1p(x, &self.norm, eps, out);
        output_head(b, &x, batch, c.vocab_size, head, norm, &mut trace)
    }
}

//! Model hyper-parameters in Hugging Face terms, read from GGUF metadata (here) or a
//! `config.json` (`hf_config.rs`).
//! Invariant: a `ModelConfig` that was built successfully is internally consistent
//! (heads divide the hidden size, KV heads divide heads), so model code need not re-check.

use crate::error::CheckpointError;
use crate::gguf::GgufFile;
use serde::{Deserialize, Serialize};

/// How RoPE frequencies are scaled beyond the trained context.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rope_type", rename_all = "lowercase")]
pub enum RopeScaling {
    Linear { factor: f64 },
    Yarn { factor: f64, original_max_position_embeddings: u64 },
    Llama3 { factor: f64, low_freq_factor: f64, high_freq_factor: f64, original_max_position_embeddings: u64 },
}

/// The hyper-parameters a family graph needs, named as Hugging Face names them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Hugging Face architecture, e.g. `LlamaForCausalLM`; the model registry's key.
    pub architecture: String,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub max_position_embeddings: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    /// Rotary dimensions per head (≤ `head_dim`).
    pub rope_dim: usize,
    pub rope_scaling: Option<RopeScaling>,
    pub tie_word_embeddings: bool,
    /// Which dimensions RoPE pairs up: a property of where the Q/K weights came from.
    pub rope_layout: RopeLayout,
}

/// How a checkpoint's Q/K rows pair dimensions for RoPE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RopeLayout {
    /// (x[2i], x[2i+1]): GGUF Llama-family checkpoints, whose converter permutes Q/K rows.
    AdjacentPairs,
    /// (x[i], x[i + r/2]): Hugging Face checkpoints, and GGUF architectures llama.cpp runs as NeoX.
    RotateHalf,
}

/// GGUF `general.architecture` → Hugging Face architecture name.
pub fn hf_architecture(gguf_arch: &str) -> Option<&'static str> {
    Some(match gguf_arch {
        "llama" => "LlamaForCausalLM",
        "mistral" => "MistralForCausalLM",
        "qwen2" => "Qwen2ForCausalLM",
        "qwen3" => "Qwen3ForCausalLM",
        "qwen3moe" => "Qwen3MoeForCausalLM",
        "gemma" => "GemmaForCausalLM",
        "gemma2" => "Gemma2ForCausalLM",
        "phi3" => "Phi3ForCausalLM",
        _ => return None,
    })
}

impl ModelConfig {
    /// Reads the hyper-parameters from GGUF metadata (`{arch}.*` keys).
    pub fn from_gguf(file: &GgufFile) -> Result<Self, CheckpointError> {
        let arch = file.get_str("general.architecture")?;
        let key = |k: &str| format!("{arch}.{k}");
        let usize_of = |k: &str| file.get_u64(&key(k)).map(|v| v as usize);
        let num_attention_heads = usize_of("attention.head_count")?;
        let hidden_size = usize_of("embedding_length")?;
        let num_key_value_heads = file
            .opt(&key("attention.head_count_kv"), "an integer", |v| v.as_u64())?
            .map_or(num_attention_heads, |v| v as usize);
        let head_dim = match file.opt(&key("attention.key_length"), "an integer", |v| v.as_u64())? {
            Some(v) => v as usize,
            None if num_attention_heads > 0 => hidden_size / num_attention_heads,
            None => 0,
        };
        let vocab_size = match file.opt(&key("vocab_size"), "an integer", |v| v.as_u64())? {
            Some(v) => v as usize,
            None => match file.get("tokenizer.ggml.tokens") {
                Some(v) => v.as_array().map_or(0, <[_]>::len),
                None => file.tensor("token_embd.weight").map_or(0, |t| t.dims[1] as usize),
            },
        };
        let factor = file.opt(&key("rope.scaling.factor"), "a float", |v| v.as_f64())?;
        let orig = file.opt(&key("rope.scaling.original_context_length"), "an integer", |v| v.as_u64())?;
        let rope_scaling = match file.opt(&key("rope.scaling.type"), "a string", |v| v.as_str().map(String::from))? {
            None => None,
            Some(t) if t == "none" => None,
            Some(t) if t == "linear" => Some(RopeScaling::Linear { factor: factor.unwrap_or(1.0) }),
            Some(t) if t == "yarn" => Some(RopeScaling::Yarn {
                factor: factor.unwrap_or(1.0),
                original_max_position_embeddings: orig.unwrap_or(0),
            }),
            Some(t) => {
                return Err(CheckpointError::BadMetadataValue {
                    key: key("rope.scaling.type"),
                    why: format!("unknown RoPE scaling `{t}`"),
                });
            }
        };
        let config = ModelConfig {
            architecture: hf_architecture(arch).unwrap_or(arch).to_string(),
            hidden_size,
            intermediate_size: usize_of("feed_forward_length")?,
            num_hidden_layers: usize_of("block_count")?,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            vocab_size,
            max_position_embeddings: usize_of("context_length")?,
            rms_norm_eps: file.get_f64(&key("attention.layer_norm_rms_epsilon"))?,
            rope_theta: file.opt(&key("rope.freq_base"), "a float", |v| v.as_f64())?.unwrap_or(10_000.0),
            rope_dim: file
                .opt(&key("rope.dimension_count"), "an integer", |v| v.as_u64())?
                .map_or(head_dim, |v| v as usize),
            rope_scaling,
            tie_word_embeddings: file.tensor("output.weight").is_none(),
            // llama.cpp's converter permutes Q/K rows into adjacent pairs only for these.
            rope_layout: match arch {
                "llama" | "mistral" => RopeLayout::AdjacentPairs,
                _ => RopeLayout::RotateHalf,
            },
        };
        config.validate().map_err(|why| CheckpointError::BadMetadataValue { key: format!("{arch}.*"), why })?;
        Ok(config)
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        let positive = [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
            ("vocab_size", self.vocab_size),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be positive"));
        }
        if !self.num_attention_heads.is_multiple_of(self.num_key_value_heads) {
            return Err(format!(
                "{} attention heads cannot be grouped over {} KV heads",
                self.num_attention_heads, self.num_key_value_heads
            ));
        }
        if self.rope_dim > self.head_dim || !self.rope_dim.is_multiple_of(2) {
            return Err(format!("rotary dimension {} does not fit head_dim {}", self.rope_dim, self.head_dim));
        }
        if !(self.rms_norm_eps > 0.0 && self.rope_theta > 0.0) {
            return Err("rms_norm_eps and rope_theta must be positive".into());
        }
        Ok(())
    }
}

//! What a synthetic checkpoint holds for each architecture it can write: the shape read from a
//! `config.json` (checked by the same parser that reads checkpoints, plus the mixture-of-experts
//! keys) and the list of tensors, named, shaped and initialised as Hugging Face stores them.
//! Invariant: every tensor a family loads is listed, and nothing else (plumb refuses unused tensors).

use super::deepseek_v4::V4Shape;
use super::hybrid::HybridShape;
use crate::error::CheckpointError;
use crate::hparams::ModelConfig;
use serde_json::{Map, Value};

/// Architectures `plumb synth` writes.
pub const SUPPORTED: &str = "LlamaForCausalLM, MistralForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3NextForCausalLM, DeepseekV4ForCausalLM";

/// How one architecture lays out its tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama and Mistral: GQA + SwiGLU, optional attention and MLP biases.
    Llama,
    /// Qwen3: Llama's layout plus per-head `q_norm` / `k_norm`.
    Qwen3,
    /// Qwen3-MoE: Qwen3's attention; sparse layers hold a router and per-expert SwiGLUs.
    Qwen3Moe,
    /// Qwen3.5 (dense): Gated DeltaNet and gated full attention, each followed by a SwiGLU.
    Qwen3_5,
    /// Qwen3.5-MoE: Gated DeltaNet and gated full attention, experts plus a gated shared expert.
    Qwen3_5Moe,
    /// Qwen3-Next: Qwen3.5-MoE's layers with fused DeltaNet projections and optional dense layers.
    Qwen3Next,
    /// DeepSeek V4: compressed sparse attention, hyper-connections, hash-routed and scored MoE.
    DeepseekV4,
}

impl Arch {
    /// The architecture of a Hugging Face `architectures` entry, and its `model_type`.
    pub fn of(architecture: &str) -> Option<(Arch, &'static str)> {
        Some(match architecture {
            "LlamaForCausalLM" => (Arch::Llama, "llama"),
            "MistralForCausalLM" => (Arch::Llama, "mistral"),
            "Qwen3ForCausalLM" => (Arch::Qwen3, "qwen3"),
            "Qwen3MoeForCausalLM" => (Arch::Qwen3Moe, "qwen3_moe"),
            "Qwen3_5ForCausalLM" => (Arch::Qwen3_5, "qwen3_5_text"),
            "Qwen3_5MoeForCausalLM" => (Arch::Qwen3_5Moe, "qwen3_5_moe_text"),
            "Qwen3NextForCausalLM" => (Arch::Qwen3Next, "qwen3_next"),
            "DeepseekV4ForCausalLM" => (Arch::DeepseekV4, "deepseek_v4"),
            _ => return None,
        })
    }
}

/// How a tensor is filled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Bell-shaped values of mean 0 and this standard deviation.
    Random { std: f64 },
    /// Every element 1 (norm weights).
    Ones,
    /// Every element 0 (zero-centred norm weights, which multiply by `1 + w`).
    Zeros,
    /// A hash router's token → experts table [vocab, per_token]: row t holds the distinct ids
    /// `(7t + j) mod num_experts`, j < per_token (stored as int64).
    ExpertIds { num_experts: usize, per_token: usize },
}

/// How a tensor is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// In the checkpoint's dtype (`--dtype`).
    Model,
    /// float32 whatever the dtype (parameters a checkpoint keeps in full precision).
    F32,
    /// int64 (index tables).
    I64,
}

/// One tensor to write.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    /// Hugging Face name, e.g. `model.layers.0.self_attn.q_proj.weight`.
    pub name: String,
    /// Outermost first, as PyTorch stores it.
    pub shape: Vec<usize>,
    pub init: Init,
    pub stored: Stored,
}

impl TensorSpec {
    pub fn num_elems(&self) -> u64 {
        self.shape.iter().map(|&d| d as u64).product()
    }
}

/// Standard deviation of bias vectors (Hugging Face initialises them to zero, which would leave
/// the bias path untested; this is its `initializer_range`).
const BIAS_STD: f64 = 0.02;

/// The mixture-of-experts keys of a Qwen3-MoE config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoeShape {
    pub num_experts: usize,
    pub num_experts_per_tok: usize,
    pub moe_intermediate_size: usize,
    pub decoder_sparse_step: usize,
    pub mlp_only_layers: Vec<usize>,
}

impl MoeShape {
    /// Whether layer `i` is a mixture of experts (else a dense SwiGLU of `intermediate_size`),
    /// as transformers' `Qwen3MoeDecoderLayer` decides.
    pub fn is_sparse(&self, i: usize) -> bool {
        !self.mlp_only_layers.contains(&i) && (i + 1).is_multiple_of(self.decoder_sparse_step)
    }
}

/// The shape of a model: the parsed config and what decides its tensors.
#[derive(Clone, Debug)]
pub struct Shape {
    pub arch: Arch,
    pub config: ModelConfig,
    pub attention_bias: bool,
    pub mlp_bias: bool,
    pub moe: Option<MoeShape>,
    /// The linear-attention layers of the hybrid architectures.
    pub hybrid: Option<HybridShape>,
    /// DeepSeek V4's layer kinds, ranks and experts.
    pub v4: Option<V4Shape>,
}

fn bad(file: &str, key: &str, why: impl Into<String>) -> CheckpointError {
    CheckpointError::BadConfig { file: file.into(), key: key.into(), why: why.into() }
}

fn flag(m: &Map<String, Value>, file: &str, key: &str) -> Result<bool, CheckpointError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(v) => v.as_bool().ok_or_else(|| bad(file, key, format!("is {v}, expected true or false"))),
    }
}

fn count(m: &Map<String, Value>, file: &str, key: &str) -> Result<Option<usize>, CheckpointError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|x| usize::try_from(x).ok())
            .map(Some)
            .ok_or_else(|| bad(file, key, format!("is {v}, expected a non-negative integer"))),
    }
}

fn positive(m: &Map<String, Value>, file: &str, key: &str) -> Result<usize, CheckpointError> {
    match count(m, file, key)? {
        None => Err(bad(file, key, "is missing")),
        Some(0) => Err(bad(file, key, "must be positive")),
        Some(n) => Ok(n),
    }
}

impl Shape {
    /// Reads and checks `config` (the text of a `config.json`, named `file` in errors).
    pub fn parse(text: &str, file: &str) -> Result<Shape, CheckpointError> {
        let m: Map<String, Value> =
            serde_json::from_str(text).map_err(|e| bad(file, "(file)", format!("is not a JSON object: {e}")))?;
        let architecture = match m.get("architectures").and_then(Value::as_array).map(Vec::as_slice) {
            Some([Value::String(a)]) => a.clone(),
            _ => return Err(bad(file, "architectures", "must list exactly one architecture")),
        };
        let (arch, _) = Arch::of(&architecture).ok_or_else(|| {
            bad(file, "architectures", format!("is [{architecture:?}]; plumb synth writes {SUPPORTED}"))
        })?;
        let num_layers = positive(&m, file, "num_hidden_layers")?;
        let moe = match arch {
            Arch::Qwen3Moe | Arch::Qwen3_5Moe | Arch::Qwen3Next => Some(moe_shape(&m, file, num_layers)?),
            Arch::Llama | Arch::Qwen3 | Arch::Qwen3_5 | Arch::DeepseekV4 => None,
        };
        let hybrid = match arch {
            Arch::Qwen3_5 | Arch::Qwen3_5Moe | Arch::Qwen3Next => {
                Some(HybridShape::parse(&m, file, num_layers, arch == Arch::Qwen3Next)?)
            }
            Arch::Llama | Arch::Qwen3 | Arch::Qwen3Moe | Arch::DeepseekV4 => None,
        };
        let v4 = match arch {
            Arch::DeepseekV4 => Some(V4Shape::parse(&m, file, num_layers)?),
            _ => None,
        };
        let config = ModelConfig::from_hf_json(text).map_err(|e| match e {
            CheckpointError::BadConfig { key, why, .. } => CheckpointError::BadConfig { file: file.into(), key, why },
            other => other,
        })?;
        let attention_bias = flag(&m, file, "attention_bias")?;
        let mlp_bias = arch == Arch::Llama && flag(&m, file, "mlp_bias")?;
        Ok(Shape { arch, config, attention_bias, mlp_bias, moe, hybrid, v4 })
    }

    /// Every tensor, in the order Hugging Face's `state_dict` lists them.
    pub fn tensors(&self) -> Vec<TensorSpec> {
        if let Some(hybrid) = &self.hybrid {
            return hybrid.tensors(&self.config, self.moe.as_ref());
        }
        if let Some(v4) = &self.v4 {
            return v4.tensors(&self.config);
        }
        let c = &self.config;
        let (hidden, vocab) = (c.hidden_size, c.vocab_size);
        let (q_dim, kv_dim) = (c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim);
        let mut out = Vec::new();
        linears(&mut out, "model", &[("embed_tokens", vocab, hidden)], false);
        for i in 0..c.num_hidden_layers {
            out.extend(self.layer_tensors(i, q_dim, kv_dim));
        }
        out.push(spec("model.norm.weight".into(), vec![hidden], Init::Ones));
        if !c.tie_word_embeddings {
            let std = 1.0 / (hidden as f64).sqrt();
            out.push(spec("lm_head.weight".into(), vec![vocab, hidden], Init::Random { std }));
        }
        out
    }

    fn layer_tensors(&self, i: usize, q_dim: usize, kv_dim: usize) -> Vec<TensorSpec> {
        let c = &self.config;
        let hidden = c.hidden_size;
        let p = format!("model.layers.{i}");
        let attn = format!("{p}.self_attn");
        let mut out = vec![spec(format!("{p}.input_layernorm.weight"), vec![hidden], Init::Ones)];
        let projections = [
            ("q_proj", q_dim, hidden),
            ("k_proj", kv_dim, hidden),
            ("v_proj", kv_dim, hidden),
            ("o_proj", hidden, q_dim),
        ];
        linears(&mut out, &attn, &projections, self.attention_bias);
        if self.arch != Arch::Llama {
            out.push(spec(format!("{attn}.q_norm.weight"), vec![c.head_dim], Init::Ones));
            out.push(spec(format!("{attn}.k_norm.weight"), vec![c.head_dim], Init::Ones));
        }
        out.push(spec(format!("{p}.post_attention_layernorm.weight"), vec![hidden], Init::Ones));
        let swiglu =
            |inter: usize| [("gate_proj", inter, hidden), ("up_proj", inter, hidden), ("down_proj", hidden, inter)];
        match &self.moe {
            Some(moe) if moe.is_sparse(i) => {
                linears(&mut out, &format!("{p}.mlp"), &[("gate", moe.num_experts, hidden)], false);
                for e in 0..moe.num_experts {
                    linears(&mut out, &format!("{p}.mlp.experts.{e}"), &swiglu(moe.moe_intermediate_size), false);
                }
            }
            _ => linears(&mut out, &format!("{p}.mlp"), &swiglu(c.intermediate_size), self.mlp_bias),
        }
        out
    }
}

pub(crate) fn spec(name: String, shape: Vec<usize>, init: Init) -> TensorSpec {
    TensorSpec { name, shape, init, stored: Stored::Model }
}

/// Appends `{prefix}.{name}.weight` [rows, cols] (std 1/√cols, which keeps each projection's
/// output at its input's scale) for each (name, rows, cols), and its bias when `bias`.
pub(crate) fn linears(out: &mut Vec<TensorSpec>, prefix: &str, layers: &[(&str, usize, usize)], bias: bool) {
    for &(name, rows, cols) in layers {
        let std = 1.0 / (cols as f64).sqrt();
        out.push(spec(format!("{prefix}.{name}.weight"), vec![rows, cols], Init::Random { std }));
        if bias {
            out.push(spec(format!("{prefix}.{name}.bias"), vec![rows], Init::Random { std: BIAS_STD }));
        }
    }
}

/// The Qwen3-MoE keys, checked against each other and the layer count.
fn moe_shape(m: &Map<String, Value>, file: &str, num_layers: usize) -> Result<MoeShape, CheckpointError> {
    let num_experts = positive(m, file, "num_experts")?;
    let num_experts_per_tok = positive(m, file, "num_experts_per_tok")?;
    if num_experts_per_tok > num_experts {
        return Err(bad(
            file,
            "num_experts_per_tok",
            format!("is {num_experts_per_tok}, more than the {num_experts} experts of num_experts"),
        ));
    }
    let decoder_sparse_step = count(m, file, "decoder_sparse_step")?.unwrap_or(1);
    if decoder_sparse_step == 0 {
        return Err(bad(file, "decoder_sparse_step", "must be positive"));
    }
    let mlp_only_layers = match m.get("mlp_only_layers") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => v
            .as_array()
            .and_then(|a| a.iter().map(|x| x.as_u64().and_then(|x| usize::try_from(x).ok())).collect::<Option<_>>())
            .ok_or_else(|| bad(file, "mlp_only_layers", format!("is {v}, expected a list of layer indices")))?,
    };
    if let Some(i) = mlp_only_layers.iter().find(|&&i| i >= num_layers) {
        return Err(bad(file, "mlp_only_layers", format!("names layer {i}, but num_hidden_layers is {num_layers}")));
    }
    Ok(MoeShape {
        num_experts,
        num_experts_per_tok,
        moe_intermediate_size: positive(m, file, "moe_intermediate_size")?,
        decoder_sparse_step,
        mlp_only_layers,
    })
}

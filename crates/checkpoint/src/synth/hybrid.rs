//! The tensors of the hybrid linear-attention architectures `plumb synth` writes (Qwen3.5,
//! Qwen3.5-MoE, Qwen3-Next): Gated DeltaNet layers and gated full-attention layers as
//! `layer_types` says, each followed by a mixture of experts with a gated shared expert (or, in
//! dense Qwen3.5 and Qwen3-Next's `mlp_only_layers`, a dense SwiGLU), named and shaped as transformers saves them (experts one
//! SwiGLU each). Norms that multiply by `1 + w` start at zero, so every norm starts as identity.

use super::arch::{Init, MoeShape, TensorSpec, linears, spec};
use crate::error::CheckpointError;
use crate::hparams::ModelConfig;
use serde_json::{Map, Value};

/// The Gated DeltaNet keys of a hybrid config and which layers are linear.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HybridShape {
    pub is_linear: Vec<bool>,
    pub num_k_heads: usize,
    pub num_v_heads: usize,
    pub k_head_dim: usize,
    pub v_head_dim: usize,
    pub conv_kernel: usize,
    pub shared_expert_intermediate_size: usize,
    /// Qwen3-Next's fused `in_proj_qkvz` / `in_proj_ba` instead of four projections.
    pub fused_projections: bool,
}

fn bad(file: &str, key: &str, why: impl Into<String>) -> CheckpointError {
    CheckpointError::BadConfig { file: file.into(), key: key.into(), why: why.into() }
}

fn positive(m: &Map<String, Value>, file: &str, key: &str, default: usize) -> Result<usize, CheckpointError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_u64()
            .and_then(|x| usize::try_from(x).ok())
            .filter(|&x| x > 0)
            .ok_or_else(|| bad(file, key, format!("is {v}, expected a positive integer"))),
    }
}

impl HybridShape {
    /// Reads the hybrid keys with transformers' defaults.
    pub fn parse(
        m: &Map<String, Value>,
        file: &str,
        num_layers: usize,
        fused_projections: bool,
    ) -> Result<Self, CheckpointError> {
        let is_linear = match m.get("layer_types") {
            None | Some(Value::Null) => {
                let interval = positive(m, file, "full_attention_interval", 4)?;
                (0..num_layers).map(|i| !(i + 1).is_multiple_of(interval)).collect()
            }
            Some(v) => {
                let types = v
                    .as_array()
                    .and_then(|a| a.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
                    .ok_or_else(|| bad(file, "layer_types", format!("is {v}, expected a list of strings")))?;
                if types.len() != num_layers {
                    return Err(bad(
                        file,
                        "layer_types",
                        format!("has {} entries for {num_layers} layers", types.len()),
                    ));
                }
                types
                    .iter()
                    .map(|t| match *t {
                        "linear_attention" => Ok(true),
                        "full_attention" => Ok(false),
                        other => Err(bad(file, "layer_types", format!("holds `{other}`"))),
                    })
                    .collect::<Result<_, _>>()?
            }
        };
        let s = HybridShape {
            is_linear,
            num_k_heads: positive(m, file, "linear_num_key_heads", 16)?,
            num_v_heads: positive(m, file, "linear_num_value_heads", 32)?,
            k_head_dim: positive(m, file, "linear_key_head_dim", 128)?,
            v_head_dim: positive(m, file, "linear_value_head_dim", 128)?,
            conv_kernel: positive(m, file, "linear_conv_kernel_dim", 4)?,
            shared_expert_intermediate_size: positive(m, file, "shared_expert_intermediate_size", 512)?,
            fused_projections,
        };
        if !s.num_v_heads.is_multiple_of(s.num_k_heads) {
            return Err(bad(file, "linear_num_value_heads", "must be a multiple of linear_num_key_heads"));
        }
        Ok(s)
    }

    /// Every tensor of the model, in `state_dict` order; `moe` is `None` for a dense model.
    pub fn tensors(&self, c: &ModelConfig, moe: Option<&MoeShape>) -> Vec<TensorSpec> {
        let (hidden, vocab) = (c.hidden_size, c.vocab_size);
        let mut out = Vec::new();
        linears(&mut out, "model", &[("embed_tokens", vocab, hidden)], false);
        for (i, &linear) in self.is_linear.iter().enumerate() {
            let p = format!("model.layers.{i}");
            out.push(spec(format!("{p}.input_layernorm.weight"), vec![hidden], Init::Zeros));
            match linear {
                true => self.linear_attn(&mut out, &format!("{p}.linear_attn"), hidden),
                false => full_attn(&mut out, &format!("{p}.self_attn"), c),
            }
            out.push(spec(format!("{p}.post_attention_layernorm.weight"), vec![hidden], Init::Zeros));
            let swiglu =
                |inter: usize| [("gate_proj", inter, hidden), ("up_proj", inter, hidden), ("down_proj", hidden, inter)];
            let mlp = format!("{p}.mlp");
            if let Some(moe) = moe.filter(|moe| moe.is_sparse(i)) {
                linears(&mut out, &mlp, &[("gate", moe.num_experts, hidden)], false);
                for e in 0..moe.num_experts {
                    linears(&mut out, &format!("{mlp}.experts.{e}"), &swiglu(moe.moe_intermediate_size), false);
                }
                linears(
                    &mut out,
                    &format!("{mlp}.shared_expert"),
                    &swiglu(self.shared_expert_intermediate_size),
                    false,
                );
                linears(&mut out, &mlp, &[("shared_expert_gate", 1, hidden)], false);
            } else {
                linears(&mut out, &mlp, &swiglu(c.intermediate_size), false);
            }
        }
        out.push(spec("model.norm.weight".into(), vec![hidden], Init::Zeros));
        if !c.tie_word_embeddings {
            let std = 1.0 / (hidden as f64).sqrt();
            out.push(spec("lm_head.weight".into(), vec![vocab, hidden], Init::Random { std }));
        }
        out
    }

    fn linear_attn(&self, out: &mut Vec<TensorSpec>, p: &str, hidden: usize) {
        let (key, value) = (self.num_k_heads * self.k_head_dim, self.num_v_heads * self.v_head_dim);
        let conv = 2 * key + value;
        match self.fused_projections {
            true => linears(
                out,
                p,
                &[("in_proj_qkvz", 2 * key + 2 * value, hidden), ("in_proj_ba", 2 * self.num_v_heads, hidden)],
                false,
            ),
            false => linears(
                out,
                p,
                &[
                    ("in_proj_qkv", conv, hidden),
                    ("in_proj_z", value, hidden),
                    ("in_proj_b", self.num_v_heads, hidden),
                    ("in_proj_a", self.num_v_heads, hidden),
                ],
                false,
            ),
        }
        let taps = Init::Random { std: 1.0 / (self.conv_kernel as f64).sqrt() };
        out.push(spec(format!("{p}.conv1d.weight"), vec![conv, 1, self.conv_kernel], taps));
        out.push(spec(format!("{p}.dt_bias"), vec![self.num_v_heads], Init::Ones));
        // A = e^A_log around 1: per-token decays e^{−A·softplus(·)} spread over (0, 1).
        out.push(spec(format!("{p}.A_log"), vec![self.num_v_heads], Init::Random { std: 1.0 }));
        out.push(spec(format!("{p}.norm.weight"), vec![self.v_head_dim], Init::Ones));
        linears(out, p, &[("out_proj", hidden, value)], false);
    }
}

/// Gated full attention: `q_proj` emits query and gate per head; zero-centred QK norms.
fn full_attn(out: &mut Vec<TensorSpec>, p: &str, c: &ModelConfig) {
    let (hidden, d) = (c.hidden_size, c.head_dim);
    let (q, kv) = (c.num_attention_heads * d, c.num_key_value_heads * d);
    let projections =
        [("q_proj", 2 * q, hidden), ("k_proj", kv, hidden), ("v_proj", kv, hidden), ("o_proj", hidden, q)];
    linears(out, p, &projections, false);
    out.push(spec(format!("{p}.q_norm.weight"), vec![d], Init::Zeros));
    out.push(spec(format!("{p}.k_norm.weight"), vec![d], Init::Zeros));
}

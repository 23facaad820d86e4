//! `plumb inspect`'s experts section: for a mixture-of-experts checkpoint, how many experts, how
//! many each token uses, their FFN width, which layers are sparse, and what they weigh — all
//! experts, and the part one token reads.

use anyhow::Result;
use plumb_checkpoint::{CheckpointRef, ModelConfig};
use plumb_models::families::qwen3_moe::Qwen3MoeConfig;
use serde::Serialize;

/// The experts of a checkpoint.
#[derive(Serialize)]
pub struct ExpertsReport {
    pub num_experts: usize,
    /// Experts each token is routed to (top-k).
    pub experts_per_token: usize,
    /// Each expert's SwiGLU width.
    pub expert_ffn_size: usize,
    pub norm_topk_prob: bool,
    pub sparse_layers: Vec<usize>,
    /// Every expert matrix of every sparse layer.
    pub expert_params: u64,
    pub expert_bytes: u64,
    /// The experts one token reads: top-k of each sparse layer.
    pub active_expert_params: u64,
    pub active_expert_bytes: u64,
}

/// The experts section, or `None` for a dense architecture.
pub fn experts(checkpoint: CheckpointRef<'_>, config: &ModelConfig) -> Result<Option<ExpertsReport>> {
    if config.architecture != "Qwen3MoeForCausalLM" {
        return Ok(None);
    }
    let layers = config.num_hidden_layers;
    let moe = match checkpoint {
        CheckpointRef::Gguf(f) => Qwen3MoeConfig::from_gguf(f, layers, |i| {
            checkpoint.weight(&format!("model.layers.{i}.mlp.gate.weight")).is_ok_and(|w| w.is_some())
        })?,
        CheckpointRef::Hf(_) => {
            let json = checkpoint.config_json().expect("a Hugging Face folder has a config.json");
            Qwen3MoeConfig::from_hf(json, layers, &checkpoint.path().join("config.json").display().to_string())?
        }
    };
    let sparse_layers: Vec<usize> = (0..layers).filter(|&i| moe.is_sparse(i)).collect();
    let mut r = ExpertsReport {
        num_experts: moe.num_experts,
        experts_per_token: moe.num_experts_per_tok,
        expert_ffn_size: moe.moe_intermediate_size,
        norm_topk_prob: moe.norm_topk_prob,
        sparse_layers,
        expert_params: 0,
        expert_bytes: 0,
        active_expert_params: 0,
        active_expert_bytes: 0,
    };
    for &layer in &r.sparse_layers {
        for e in 0..moe.num_experts {
            for proj in ["gate", "up", "down"] {
                let name = format!("model.layers.{layer}.mlp.experts.{e}.{proj}_proj.weight");
                let w = checkpoint.weight(&name)?.ok_or_else(|| anyhow::anyhow!("tensor `{name}` is missing"))?;
                let (params, bytes) = ((w.rows * w.cols) as u64, w.data.len() as u64);
                r.expert_params += params;
                r.expert_bytes += bytes;
                // Every expert of a layer has the same shape and type, so top-k of them weigh
                // top-k times one.
                if e < moe.num_experts_per_tok {
                    r.active_expert_params += params;
                    r.active_expert_bytes += bytes;
                }
            }
        }
    }
    Ok(Some(r))
}

/// Inclusive runs of layer indices: `0-23` or `0, 2-5, 7`.
pub fn layer_runs(layers: &[usize]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &l in layers {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == l => *end = l,
            _ => runs.push((l, l)),
        }
    }
    let text: Vec<String> =
        runs.iter().map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
    if text.is_empty() { "none".into() } else { text.join(", ") }
}

#[cfg(test)]
mod tests {
    #[test]
    fn layer_runs_join_neighbours() {
        assert_eq!(super::layer_runs(&[0, 1, 2, 3]), "0-3");
        assert_eq!(super::layer_runs(&[0, 2, 3, 4, 7]), "0, 2-4, 7");
        assert_eq!(super::layer_runs(&[]), "none");
    }
}

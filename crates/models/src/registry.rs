//! Architecture name → family loader. Adding a family is one file plus one line here.

use crate::CausalLm;
use crate::families::{
    deepseek_v4::DeepseekV4, llama::Llama, qwen3::Qwen3, qwen3_5::Qwen3_5, qwen3_5_moe::Qwen3_5Moe,
    qwen3_moe::Qwen3Moe, qwen3_next::Qwen3Next,
};
use crate::layers::loader::WeightLoader;
use plumb_checkpoint::{CheckpointError, CheckpointRef};
use plumb_core::{BackendError, FullBackend, KvSpec, LaneStateSpec};

/// Why a model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("architecture `{0}` is not supported (plumb runs: {SUPPORTED})")]
    UnsupportedArchitecture(String),
    #[error("{0} is not supported yet")]
    Unsupported(&'static str),
    #[error("tensor `{0}` is missing from the checkpoint")]
    MissingTensor(String),
    #[error(
        "the checkpoint holds tensors the graph does not use, so plumb refuses it rather than drop them silently: {}",
        .0.join(", ")
    )]
    UnusedTensors(Vec<String>),
    #[error("tensor `{name}` {why}")]
    BadValue { name: String, why: String },
    #[error("tensor `{name}` has shape {actual:?}, expected {expected:?}")]
    WrongShape { name: String, expected: (usize, usize), actual: (usize, usize) },
    #[error("{}", gate_refusal(family, backend, model))]
    GateNotPassed { family: String, backend: String, model: String },
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Backends `plumb check` can gate in this build.
pub const CHECKABLE_BACKENDS: &[&str] = &["cpu", "cuda"];

/// The refusal's words: what happened and a command that works.
fn gate_refusal(family: &str, backend: &str, model: &str) -> String {
    let head = format!(
        "the `{family}` family has not passed its whole-model gate on the `{backend}` backend, so plumb refuses to run it there."
    );
    if CHECKABLE_BACKENDS.contains(&backend) {
        format!(
            "{head} Gate it with `plumb check --model {model} --device {backend}`, or set PLUMB_EXPERIMENTAL={family} to run it anyway"
        )
    } else {
        format!(
            "{head} This build cannot gate the `{backend}` backend yet; set PLUMB_EXPERIMENTAL={family} to run it anyway"
        )
    }
}

/// Hugging Face architectures with a family.
pub const SUPPORTED: &str = "LlamaForCausalLM, MistralForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, \
     Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration (text), Qwen3_5MoeForCausalLM, \
     Qwen3_5MoeForConditionalGeneration (text), Qwen3NextForCausalLM, \
     DeepseekV4ForCausalLM";

/// The family name a Hugging Face architecture belongs to, if any.
pub fn family_of(architecture: &str) -> Option<&'static str> {
    match architecture {
        "LlamaForCausalLM" | "MistralForCausalLM" => Some("llama"),
        "Qwen3ForCausalLM" => Some("qwen3"),
        "Qwen3MoeForCausalLM" => Some("qwen3_moe"),
        "Qwen3_5ForCausalLM" | "Qwen3_5ForConditionalGeneration" => Some("qwen3_5"),
        "Qwen3_5MoeForCausalLM" | "Qwen3_5MoeForConditionalGeneration" => Some("qwen3_5_moe"),
        "Qwen3NextForCausalLM" => Some("qwen3_next"),
        "DeepseekV4ForCausalLM" => Some("deepseek_v4"),
        _ => None,
    }
}

/// Families built on the optional mixture-of-experts op group (`Backend::moe_ops`).
const MOE_FAMILIES: &[&str] = &["qwen3_moe", "qwen3_5_moe", "qwen3_next", "deepseek_v4"];

/// Families built on the optional compressed-attention, hyper-connection and scored-router op
/// groups (`Backend::compressed_attention_ops`, `hyper_connection_ops`, `scored_moe_ops`).
const COMPRESSED_ATTENTION_FAMILIES: &[&str] = &["deepseek_v4"];

/// Families built on the optional Gated DeltaNet op group (`Backend::gated_delta_ops`).
const GATED_DELTA_FAMILIES: &[&str] = &["qwen3_5", "qwen3_5_moe", "qwen3_next"];

/// (family, backend kind, receipt) for every family whose whole-model gate has passed on a
/// backend. The reference backend needs no entry: it is the definition the gates compare with.
pub const GATES_PASSED: &[(&str, &str, &str)] = &[
    ("llama", "cpu", "receipts/check-cpu-smollm2.json"),
    ("llama", "cuda", "receipts/check-cuda-smollm2.json"),
    // Real widths (Qwen3-0.6B, 8 of its 28 layers, random weights from `plumb synth`); the
    // family's agreement with transformers is fixtures/qwen3's (float64 graph 1e-14).
    ("qwen3", "cpu", "receipts/check-cpu-qwen3-synth-0.6b-l8.json"),
    // The same shape in bf16 on the H200's tensor cores (declared bf16 activations, gated at that
    // precision).
    ("qwen3", "cuda", "receipts/check-cuda-qwen3-synth-0.6b-l8.json"),
    // Real widths (the `qwen3-moe-1.6b` preset: 64 experts, top-8, expert FFN 256; 8 of its 24
    // layers, random weights from `plumb synth`); the family's agreement with transformers is
    // fixtures/qwen3_moe's.
    ("qwen3_moe", "cpu", "receipts/check-cpu-qwen3-moe-synth-1.6b-l8.json"),
    // Qwen3.5-0.8B's whole text model (24 layers: 18 Gated DeltaNet, 6 gated attention; random
    // weights from `plumb synth --arch qwen3.5-0.8b`); the family's agreement with transformers
    // is fixtures/qwen3_5's.
    ("qwen3_5", "cpu", "receipts/check-cpu-qwen3-5-synth-0.8b.json"),
    // Qwen3-Next-80B-A3B's per-layer widths (the `qwen3-next-1.3b` preset: fused DeltaNet
    // projections, 16 experts, 10 active), 4 of its layers (3 DeltaNet, 1 gated attention).
    ("qwen3_next", "cpu", "receipts/check-cpu-qwen3-next-synth-1.3b-l4.json"),
    // Qwen3.5-35B-A3B's per-layer widths (the `qwen3.5-moe-1.7b` preset, 4 of its layers) with the
    // head tied to the embedding: the float64 and float32 references of an untied 248k-vocabulary
    // head do not fit beside the model in this machine's 24 GiB. The untied head is gated by
    // qwen3_next's receipt (same code) and fixtures/qwen3_5_moe.
    ("qwen3_5_moe", "cpu", "receipts/check-cpu-qwen3-5-moe-synth-1.7b-l4-tied.json"),
    // The `deepseek-v4-1.6b` preset (V4-Flash's attention geometry at hidden 1024: heads of 512,
    // CSA of 4 with a 64 × 128 indexer, HCA of 128, hc_mult 4, 128 experts of 256, 6 active,
    // vocabulary 129,280) with 4 of its 12 layers (3 HCA, 1 CSA; hash-routed and learned MoE);
    // sliding-only layers and agreement with transformers in float64 are fixtures/deepseek_v4's
    // (receipts/check-cpu-deepseek-v4-fixture.json, crates/verify/tests/deepseek_v4.rs).
    ("deepseek_v4", "cpu", "receipts/check-cpu-deepseek-v4-synth-1.6b-l4.json"),
];

/// The KV and lane-state geometry the model in `checkpoint` asks for, read from its config
/// without loading weights (`plumb inspect`): paged K/V only for its attention layers, and for
/// a hybrid family one lane's state for its linear-attention layers (`num_slots` 1). Block size
/// 1 and no blocks: `bytes_per_position` and `bytes_per_slot` are the figures of interest.
pub fn kv_layout(checkpoint: CheckpointRef<'_>) -> Result<KvSpec, ModelError> {
    let config = checkpoint.config()?;
    let family = family_of(&config.architecture)
        .ok_or_else(|| ModelError::UnsupportedArchitecture(config.architecture.clone()))?;
    let mut spec = KvSpec {
        num_layers: config.num_hidden_layers,
        num_kv_heads: config.num_key_value_heads,
        head_dim: config.head_dim,
        block_size: 1,
        num_blocks: 0,
        lane_state: LaneStateSpec::NONE,
    };
    if GATED_DELTA_FAMILIES.contains(&family) {
        let hybrid = crate::families::qwen3_5::hybrid_config(checkpoint, &config)?;
        let num_linear = hybrid.is_linear.iter().filter(|&&l| l).count();
        spec.num_layers -= num_linear;
        spec.lane_state = hybrid.gdn.lane_state(num_linear, 1);
    }
    if family == "deepseek_v4" {
        let json = checkpoint.config_json().ok_or(ModelError::Unsupported("DeepSeek V4 from GGUF files"))?;
        let file = checkpoint.path().join("config.json").display().to_string();
        spec = crate::families::deepseek_v4::kv_layout(json, &config, &file)?;
    }
    Ok(spec)
}

/// Refuses a family on a backend it has not been gated on, unless `experimental` (a comma-separated
/// list, as in `PLUMB_EXPERIMENTAL`) names the family or `all`.
pub fn check_gate(family: &str, backend_kind: &str, experimental: &str, model: &str) -> Result<(), ModelError> {
    let passed = backend_kind == "ref" || GATES_PASSED.iter().any(|&(f, b, _)| f == family && b == backend_kind);
    let opted_in = experimental.split(',').map(str::trim).any(|e| e == family || e == "all");
    if passed || opted_in {
        return Ok(());
    }
    Err(ModelError::GateNotPassed { family: family.into(), backend: backend_kind.into(), model: model.into() })
}

/// Loads the model in `checkpoint` (a GGUF file or a Hugging Face folder) onto `backend`,
/// refusing (before any weight is read) a family that has not passed its gate there unless
/// `PLUMB_EXPERIMENTAL` names it.
pub fn load_model<'a, B: FullBackend + 'static>(
    checkpoint: impl Into<CheckpointRef<'a>>,
    backend: &B,
) -> Result<Box<dyn CausalLm<B>>, ModelError> {
    let experimental = std::env::var("PLUMB_EXPERIMENTAL").unwrap_or_default();
    load_model_with(checkpoint, backend, Some(&experimental))
}

/// [`load_model`] with the opt-in list given explicitly; `None` skips the gate check (used by
/// the gate itself, which must run ungated families).
pub fn load_model_with<'a, B: FullBackend + 'static>(
    checkpoint: impl Into<CheckpointRef<'a>>,
    backend: &B,
    experimental: Option<&str>,
) -> Result<Box<dyn CausalLm<B>>, ModelError> {
    let checkpoint = checkpoint.into();
    let config = checkpoint.config()?;
    let family = family_of(&config.architecture)
        .ok_or_else(|| ModelError::UnsupportedArchitecture(config.architecture.clone()))?;
    // Before the gate: gating or opting in cannot help a backend that lacks the kernels.
    if MOE_FAMILIES.contains(&family) && backend.moe_ops().is_none() {
        let needed_by = format!("the `{family}` family");
        return Err(
            BackendError::MissingOpGroup { backend: backend.name(), group: "mixture-of-experts", needed_by }.into()
        );
    }
    if GATED_DELTA_FAMILIES.contains(&family) && backend.gated_delta_ops().is_none() {
        let needed_by = format!("the `{family}` family");
        return Err(BackendError::MissingOpGroup { backend: backend.name(), group: "Gated DeltaNet", needed_by }.into());
    }
    if COMPRESSED_ATTENTION_FAMILIES.contains(&family) {
        for (missing, group) in [
            (backend.compressed_attention_ops().is_none(), "compressed sparse attention"),
            (backend.hyper_connection_ops().is_none(), "hyper-connection"),
            (backend.scored_moe_ops().is_none(), "scored-router"),
        ] {
            if missing {
                let needed_by = format!("the `{family}` family");
                return Err(BackendError::MissingOpGroup { backend: backend.name(), group, needed_by }.into());
            }
        }
    }
    if let Some(experimental) = experimental {
        check_gate(family, backend.kind(), experimental, &checkpoint.path().display().to_string())?;
    }
    let loader = WeightLoader::new(checkpoint, backend);
    match family {
        "llama" => Ok(Box::new(Llama::load(&loader, config)?)),
        "qwen3" => Ok(Box::new(Qwen3::load(&loader, config)?)),
        "qwen3_moe" => Ok(Box::new(Qwen3Moe::load(&loader, config)?)),
        "qwen3_5" => Ok(Box::new(Qwen3_5::load(&loader, config)?)),
        "qwen3_5_moe" => Ok(Box::new(Qwen3_5Moe::load(&loader, config)?)),
        "qwen3_next" => Ok(Box::new(Qwen3Next::load(&loader, config)?)),
        "deepseek_v4" => Ok(Box::new(DeepseekV4::load(&loader, config)?)),
        _ => Err(ModelError::UnsupportedArchitecture(config.architecture)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_names_a_command_that_this_build_can_run() {
        // Every family plumb has is gated on the CPU; a family added later is not until it passes.
        let cpu = check_gate("new_family", "cpu", "", "model.gguf").unwrap_err().to_string();
        assert!(cpu.contains("`plumb check --model model.gguf --device cpu`"), "{cpu}");
        let cuda = check_gate("qwen3_moe", "cuda", "", "model.gguf").unwrap_err().to_string();
        assert!(cuda.contains("`plumb check --model model.gguf --device cuda`"), "{cuda}");
        let other = check_gate("llama", "metal", "", "model.gguf").unwrap_err().to_string();
        assert!(!other.contains("plumb check"), "no command that cannot work: {other}");
        assert!(other.contains("PLUMB_EXPERIMENTAL=llama"), "{other}");
        assert!(check_gate("llama", "cpu", "", "m").is_ok());
        assert!(check_gate("qwen3", "cpu", "", "m").is_ok());
        assert!(check_gate("qwen3", "cuda", "", "m").is_ok());
        assert!(check_gate("qwen3_moe", "cpu", "", "m").is_ok());
        assert!(check_gate("qwen3_moe", "cuda", "x, qwen3_moe", "m").is_ok());
        assert!(check_gate("qwen3_moe", "cuda", "", "m").is_err());
    }
}

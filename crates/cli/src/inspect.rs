//! `plumb inspect`: what a checkpoint holds, as a table or JSON.

use crate::inspect_moe::ExpertsReport;
use anyhow::{Context, Result};
use plumb_checkpoint::{Checkpoint, CheckpointRef, GgufFile, HfCheckpoint, ModelConfig};
use plumb_engine::load;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Serialize)]
struct TensorTypeCount {
    count: usize,
    bytes: u64,
}

#[derive(Serialize)]
struct SpecialToken {
    role: &'static str,
    id: u32,
    text: String,
}

#[derive(Serialize)]
struct Report {
    path: String,
    file_bytes: u64,
    /// `GGUF v3` or `Hugging Face safetensors`.
    format: String,
    gguf_version: Option<u32>,
    name: Option<String>,
    gguf_architecture: Option<String>,
    config: ModelConfig,
    num_tensors: usize,
    tensor_types: BTreeMap<String, TensorTypeCount>,
    num_params: u64,
    tokenizer_kind: String,
    pre_tokenizer: String,
    vocab_size: usize,
    add_bos: bool,
    special_tokens: Vec<SpecialToken>,
    has_chat_template: bool,
    /// Mixture-of-experts checkpoints only.
    #[serde(skip_serializing_if = "Option::is_none")]
    experts: Option<ExpertsReport>,
    /// What serving it holds per token and per sequence.
    memory: MemoryReport,
}

/// The KV cache grows with the context in the attention layers only; the linear-attention
/// layers of a hybrid model hold a fixed-size state per sequence instead.
#[derive(Serialize)]
struct MemoryReport {
    kv_layers: usize,
    /// K and V of every attention layer, f32.
    kv_bytes_per_token: usize,
    state_layers: usize,
    /// Conv and recurrent state of every linear-attention layer, f32; constant in the context.
    state_bytes_per_sequence: usize,
}

/// What a GGUF file holds.
fn report(file: &GgufFile) -> Result<Report> {
    let mut tensor_types: BTreeMap<String, TensorTypeCount> = BTreeMap::new();
    for t in &file.tensors {
        let e = tensor_types.entry(t.ty.to_string()).or_insert(TensorTypeCount { count: 0, bytes: 0 });
        e.count += 1;
        e.bytes += t.size;
    }
    let mut r = common(CheckpointRef::Gguf(file), tensor_types)?;
    r.file_bytes = file.file_len();
    r.format = format!("GGUF v{}", file.version);
    r.gguf_version = Some(file.version);
    r.name = file.get("general.name").and_then(|v| v.as_str()).map(String::from);
    r.gguf_architecture = Some(file.get_str("general.architecture")?.to_string());
    r.num_params = file.tensors.iter().map(|t| t.num_elems()).sum();
    Ok(r)
}

/// What a Hugging Face folder holds.
fn report_hf(h: &HfCheckpoint) -> Result<Report> {
    let mut tensor_types: BTreeMap<String, TensorTypeCount> = BTreeMap::new();
    let mut num_params = 0u64;
    for name in h.weights.names() {
        let (_, t) = h.weights.tensor(name).expect("listed names exist");
        let e = tensor_types.entry(format!("{:?}", t.dtype)).or_insert(TensorTypeCount { count: 0, bytes: 0 });
        e.count += 1;
        e.bytes += t.end - t.begin;
        num_params += t.shape.iter().product::<usize>() as u64;
    }
    let mut r = common(CheckpointRef::Hf(h), tensor_types)?;
    r.file_bytes = r.tensor_types.values().map(|t| t.bytes).sum();
    r.format = "Hugging Face safetensors".into();
    r.num_params = num_params;
    Ok(r)
}

fn common(checkpoint: CheckpointRef<'_>, tensor_types: BTreeMap<String, TensorTypeCount>) -> Result<Report> {
    let config = checkpoint.config()?;
    let experts = crate::inspect_moe::experts(checkpoint, &config)?;
    let kv = plumb_models::registry::kv_layout(checkpoint)?;
    let memory = MemoryReport {
        kv_layers: kv.num_layers,
        kv_bytes_per_token: kv.bytes_per_position(),
        state_layers: kv.lane_state.num_layers,
        state_bytes_per_sequence: kv.lane_state.bytes_per_slot(),
    };
    let tok = load::checkpoint_tokenizer(checkpoint)?;
    let spec = tok.spec();
    let mut special_tokens = Vec::new();
    let named = [("bos", spec.bos_id), ("eos", spec.eos_id), ("unk", spec.unk_id), ("pad", spec.pad_id)];
    for (role, id) in named {
        if let Some(id) = id {
            special_tokens.push(SpecialToken { role, id, text: spec.tokens[id as usize].clone() });
        }
    }
    for &id in &spec.eog_ids {
        special_tokens.push(SpecialToken { role: "end of generation", id, text: spec.tokens[id as usize].clone() });
    }
    Ok(Report {
        path: checkpoint.path().display().to_string(),
        file_bytes: 0,
        format: String::new(),
        gguf_version: None,
        name: None,
        gguf_architecture: None,
        config,
        num_tensors: tensor_types.values().map(|t| t.count).sum(),
        tensor_types,
        num_params: 0,
        tokenizer_kind: format!("{:?}", spec.kind),
        pre_tokenizer: spec.pre.clone(),
        vocab_size: tok.vocab_size(),
        add_bos: spec.add_bos,
        special_tokens,
        has_chat_template: spec.chat_template.is_some(),
        experts,
        memory,
    })
}

fn mb(bytes: u64) -> String {
    format!("{:.2} MB", bytes as f64 / 1e6)
}

pub fn run(model: Option<&str>, json: bool) -> Result<()> {
    let path = crate::resolve_model(model)?;
    let file = Checkpoint::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let r = match &file {
        Checkpoint::Gguf(f) => report(f),
        Checkpoint::Hf(h) => report_hf(h),
    };
    let r = match r {
        Ok(r) => r,
        Err(e) => {
            // An architecture plumb does not run explains more than a metadata key it lacks.
            crate::session::check_architecture(file.as_ref())?;
            return Err(e);
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let c = &r.config;
    let rope_scaling = c.rope_scaling.as_ref().map_or("none".to_string(), |s| format!("{s:?}"));
    let rows = [
        ("model", r.name.clone().unwrap_or_else(|| "(unnamed)".into())),
        ("file", format!("{} ({}, {})", r.path, mb(r.file_bytes), r.format)),
        (
            "architecture",
            match &r.gguf_architecture {
                Some(g) => format!("{g} ({})", c.architecture),
                None => c.architecture.clone(),
            },
        ),
        (
            "parameters",
            match &r.experts {
                Some(x) => format!(
                    "{:.1} M ({:.1} M active per token)",
                    r.num_params as f64 / 1e6,
                    (r.num_params - x.expert_params + x.active_expert_params) as f64 / 1e6
                ),
                None => format!("{:.1} M", r.num_params as f64 / 1e6),
            },
        ),
        ("layers", c.num_hidden_layers.to_string()),
        ("hidden size", c.hidden_size.to_string()),
        ("ffn size", c.intermediate_size.to_string()),
        (
            "attention heads",
            format!("{} ({} KV heads, head_dim {})", c.num_attention_heads, c.num_key_value_heads, c.head_dim),
        ),
        ("context length", c.max_position_embeddings.to_string()),
        ("rope", format!("theta {}, {} dims, scaling {rope_scaling}", c.rope_theta, c.rope_dim)),
        ("rms norm eps", format!("{:e}", c.rms_norm_eps as f32)),
        ("output head", if c.tie_word_embeddings { "tied to the token embeddings".into() } else { "separate".into() }),
        (
            "tokenizer",
            format!(
                "{} (pre `{}`), {} tokens, adds BOS: {}",
                r.tokenizer_kind, r.pre_tokenizer, r.vocab_size, r.add_bos
            ),
        ),
        ("chat template", if r.has_chat_template { "yes".into() } else { "no".into() }),
    ];
    for (k, v) in rows {
        println!("{k:<16} {v}");
    }
    if let Some(x) = &r.experts {
        println!(
            "{:<16} {} per layer, {} per token (weights {}), FFN size {}",
            "experts",
            x.num_experts,
            x.experts_per_token,
            if x.norm_topk_prob { "renormalized" } else { "as routed" },
            x.expert_ffn_size
        );
        println!(
            "{:<16} {} of {}: {}",
            "sparse layers",
            x.sparse_layers.len(),
            c.num_hidden_layers,
            crate::inspect_moe::layer_runs(&x.sparse_layers)
        );
        println!(
            "{:<16} {:.1} M parameters, {} (one token reads {})",
            "expert weights",
            x.expert_params as f64 / 1e6,
            mb(x.expert_bytes),
            mb(x.active_expert_bytes)
        );
    }
    let m = &r.memory;
    if r.config.architecture == "DeepseekV4ForCausalLM" {
        // Its whole state is paged rows per position; nothing is per sequence besides them.
        println!(
            "{:<16} {} bytes per token (f32 paged rows of every attention layer: raw K, compressor rows, \
             compressed entries and indexer keys), {:.1} MiB per request at {} tokens; no fixed per-request state",
            "kv cache",
            m.kv_bytes_per_token,
            (m.kv_bytes_per_token * r.config.max_position_embeddings) as f64 / (1 << 20) as f64,
            r.config.max_position_embeddings
        );
    } else {
        println!(
            "{:<16} {} bytes per token (K and V of {} attention layers, f32)",
            "kv cache", m.kv_bytes_per_token, m.kv_layers
        );
    }
    if m.state_layers > 0 {
        println!(
            "{:<16} {:.1} KiB per sequence in {} linear-attention layers, constant in the context length",
            "lane state",
            m.state_bytes_per_sequence as f64 / 1024.0,
            m.state_layers
        );
    }
    let specials: Vec<String> =
        r.special_tokens.iter().map(|s| format!("{} {:?} ({})", s.role, s.text, s.id)).collect();
    println!("{:<16} {}", "special tokens", specials.join(", "));
    println!("{:<16} {}", "tensors", r.num_tensors);
    for (ty, n) in &r.tensor_types {
        println!("{:<16} {ty:<6} {:>4} tensors, {}", "", n.count, mb(n.bytes));
    }
    Ok(())
}

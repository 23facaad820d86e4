//! `plumb inspect`: what a checkpoint holds, as a table or JSON.

use anyhow::{Context, Result};
use plumb_checkpoint::{GgufFile, ModelConfig};
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
    gguf_version: u32,
    name: Option<String>,
    gguf_architecture: String,
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
}

fn report(file: &GgufFile) -> Result<Report> {
    let config = ModelConfig::from_gguf(file)?;
    let tok = load::tokenizer(file)?;
    let spec = tok.spec();
    let mut tensor_types: BTreeMap<String, TensorTypeCount> = BTreeMap::new();
    for t in &file.tensors {
        let e = tensor_types.entry(t.ty.to_string()).or_insert(TensorTypeCount { count: 0, bytes: 0 });
        e.count += 1;
        e.bytes += t.size;
    }
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
        path: file.path().display().to_string(),
        file_bytes: file.file_len(),
        gguf_version: file.version,
        name: file.get("general.name").and_then(|v| v.as_str()).map(String::from),
        gguf_architecture: file.get_str("general.architecture")?.to_string(),
        config,
        num_tensors: file.tensors.len(),
        tensor_types,
        num_params: file.tensors.iter().map(|t| t.num_elems()).sum(),
        tokenizer_kind: format!("{:?}", spec.kind),
        pre_tokenizer: spec.pre.clone(),
        vocab_size: tok.vocab_size(),
        add_bos: spec.add_bos,
        special_tokens,
        has_chat_template: spec.chat_template.is_some(),
    })
}

fn mb(bytes: u64) -> String {
    format!("{:.2} MB", bytes as f64 / 1e6)
}

pub fn run(model: Option<&str>, json: bool) -> Result<()> {
    let path = crate::resolve_model(model)?;
    let file = GgufFile::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let r = match report(&file) {
        Ok(r) => r,
        Err(e) => {
            // An architecture plumb does not run explains more than a metadata key it lacks.
            crate::session::check_architecture(&file)?;
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
        ("file", format!("{} ({}, GGUF v{})", r.path, mb(r.file_bytes), r.gguf_version)),
        ("architecture", format!("{} ({})", r.gguf_architecture, c.architecture)),
        ("parameters", format!("{:.1} M", r.num_params as f64 / 1e6)),
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
        ("output head", if c.tie_word_embeddings { "tied to token_embd".into() } else { "separate".into() }),
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
    let specials: Vec<String> =
        r.special_tokens.iter().map(|s| format!("{} {:?} ({})", s.role, s.text, s.id)).collect();
    println!("{:<16} {}", "special tokens", specials.join(", "));
    println!("{:<16} {}", "tensors", r.num_tensors);
    for (ty, n) in &r.tensor_types {
        println!("{:<16} {ty:<6} {:>4} tensors, {}", "", n.count, mb(n.bytes));
    }
    Ok(())
}

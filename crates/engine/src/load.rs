//! What a checkpoint's metadata says beyond weights: the tokenizer spec (the one place that reads
//! `tokenizer.ggml.*`, or a Hugging Face folder's tokenizer and generation files) and the chat
//! template. Shared by the CLI and the server.

use crate::generation_config::GenerationConfig;
use plumb_checkpoint::{CheckpointError, CheckpointRef, GgufFile, HfCheckpoint, MetaValue};
use plumb_tokenizer::{ChatTemplate, Normalizer, TokenType, Tokenizer, TokenizerError, TokenizerKind, TokenizerSpec};

/// Why a checkpoint's tokenizer could not be built.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("metadata key `{key}` holds {what}")]
    BadArray { key: &'static str, what: &'static str },
    #[error("{dir} has no tokenizer.json; plumb reads Hugging Face tokenizers from that file")]
    NoTokenizerJson { dir: String },
    #[error("{file}: `{key}` {why}")]
    BadGenerationConfig { file: String, key: &'static str, why: String },
}

fn opt_id(file: &GgufFile, key: &str) -> Result<Option<u32>, LoadError> {
    Ok(file.opt(key, "a token id", MetaValue::as_u64)?.map(|v| v as u32))
}

fn opt_bool(file: &GgufFile, key: &str) -> Result<Option<bool>, LoadError> {
    Ok(file.opt(key, "a boolean", MetaValue::as_bool)?)
}

fn opt_array<T>(
    file: &GgufFile,
    key: &'static str,
    what: &'static str,
    f: impl Fn(&MetaValue) -> Option<T>,
) -> Result<Vec<T>, LoadError> {
    match file.get(key) {
        None => Ok(Vec::new()),
        Some(_) => file.get_array(key)?.iter().map(|v| f(v).ok_or(LoadError::BadArray { key, what })).collect(),
    }
}

/// The tokenizer described by a GGUF file's `tokenizer.ggml.*` metadata.
pub fn tokenizer_spec(file: &GgufFile) -> Result<TokenizerSpec, LoadError> {
    let kind = match file.get_str("tokenizer.ggml.model")? {
        "gpt2" => TokenizerKind::ByteLevelBpe,
        "llama" => TokenizerKind::SentencePiece,
        other => return Err(TokenizerError::UnsupportedModel(other.into()).into()),
    };
    let tokens: Vec<String> = file.get_str_array("tokenizer.ggml.tokens")?.into_iter().map(String::from).collect();
    let spm = kind == TokenizerKind::SentencePiece;
    let pre = file.opt("tokenizer.ggml.pre", "a string", |v| v.as_str().map(String::from))?.unwrap_or_default();
    let mut spec = TokenizerSpec {
        kind,
        // llama.cpp skips merging a word that is itself a token for Llama 3 vocabularies (as
        // their tokenizer.json's `ignore_merges` says), and normalizes no GGUF text.
        ignore_merges: matches!(pre.as_str(), "llama-bpe" | "llama3" | "llama-v3"),
        normalizer: Normalizer::None,
        pre,
        tokens,
        scores: opt_array(file, "tokenizer.ggml.scores", "a non-float", |v| v.as_f64().map(|x| x as f32))?,
        token_types: opt_array(file, "tokenizer.ggml.token_type", "a non-integer", |v| {
            v.as_i64().map(TokenType::from_gguf)
        })?,
        merges: opt_array(file, "tokenizer.ggml.merges", "a non-string", |v| v.as_str().map(String::from))?,
        bos_id: opt_id(file, "tokenizer.ggml.bos_token_id")?,
        eos_id: opt_id(file, "tokenizer.ggml.eos_token_id")?,
        unk_id: opt_id(file, "tokenizer.ggml.unknown_token_id")?,
        pad_id: opt_id(file, "tokenizer.ggml.padding_token_id")?,
        eog_ids: Vec::new(),
        add_bos: opt_bool(file, "tokenizer.ggml.add_bos_token")?.unwrap_or(spm),
        add_eos: opt_bool(file, "tokenizer.ggml.add_eos_token")?.unwrap_or(false),
        add_space_prefix: opt_bool(file, "tokenizer.ggml.add_space_prefix")?.unwrap_or(spm),
        chat_template: file.opt("tokenizer.chat_template", "a string", |v| v.as_str().map(String::from))?,
    };
    let mut extra = Vec::new();
    for key in ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
        extra.extend(opt_id(file, key)?);
    }
    spec.derive_eog(&extra);
    Ok(spec)
}

/// The tokenizer of a GGUF file.
pub fn tokenizer(file: &GgufFile) -> Result<Tokenizer, LoadError> {
    Ok(Tokenizer::new(tokenizer_spec(file)?)?)
}

/// The tokenizer of a Hugging Face folder: `tokenizer.json`, `tokenizer_config.json` and
/// `chat_template.jinja` (which wins over the config's template, as in transformers), with the
/// end-of-generation ids of `generation_config.json` added to the stop ids.
pub fn hf_tokenizer_spec(ckpt: &HfCheckpoint) -> Result<TokenizerSpec, LoadError> {
    let json = ckpt
        .read_optional("tokenizer.json")?
        .ok_or_else(|| LoadError::NoTokenizerJson { dir: ckpt.dir().display().to_string() })?;
    let config = ckpt.read_optional("tokenizer_config.json")?;
    let template = ckpt.read_optional("chat_template.jinja")?;
    let mut spec = TokenizerSpec::from_hf_files(&json, config.as_deref(), template.as_deref())?;
    let extra = match ckpt.read_optional("generation_config.json")? {
        Some(text) => GenerationConfig::parse(&text, &ckpt.dir().join("generation_config.json"))?.eos_ids,
        None => Vec::new(),
    };
    spec.derive_eog(&extra);
    Ok(spec)
}

/// The tokenizer of any checkpoint.
pub fn checkpoint_tokenizer(ckpt: CheckpointRef<'_>) -> Result<Tokenizer, LoadError> {
    let spec = match ckpt {
        CheckpointRef::Gguf(f) => tokenizer_spec(f)?,
        CheckpointRef::Hf(h) => hf_tokenizer_spec(h)?,
    };
    Ok(Tokenizer::new(spec)?)
}

/// The chat template of a tokenizer, if its model has one.
pub fn chat_template(tok: &Tokenizer) -> Result<Option<ChatTemplate>, LoadError> {
    let spec = tok.spec();
    let Some(source) = &spec.chat_template else {
        return Ok(None);
    };
    let text = |id: Option<u32>| id.map(|i| spec.tokens[i as usize].clone()).unwrap_or_default();
    Ok(Some(ChatTemplate::new(source, &text(spec.bos_id), &text(spec.eos_id))?))
}

//! Building the pieces a command needs from an opened checkpoint: the tokenizer spec from GGUF
//! metadata (the one place that reads `tokenizer.ggml.*`), and the chat template.

use anyhow::{Context, Result, bail};
use plumb_checkpoint::{GgufFile, MetaValue};
use plumb_tokenizer::{ChatTemplate, TokenType, Tokenizer, TokenizerKind, TokenizerSpec};

fn opt_id(file: &GgufFile, key: &str) -> Result<Option<u32>> {
    Ok(file
        .opt(key, "a token id", MetaValue::as_u64)?
        .map(|v| v as u32))
}

fn opt_bool(file: &GgufFile, key: &str) -> Result<Option<bool>> {
    Ok(file.opt(key, "a boolean", MetaValue::as_bool)?)
}

/// The tokenizer described by a GGUF file's `tokenizer.ggml.*` metadata.
pub fn tokenizer_spec(file: &GgufFile) -> Result<TokenizerSpec> {
    let model = file.get_str("tokenizer.ggml.model")?;
    let kind = match model {
        "gpt2" => TokenizerKind::ByteLevelBpe,
        "llama" => TokenizerKind::SentencePiece,
        other => bail!(plumb_tokenizer::TokenizerError::UnsupportedModel(
            other.into()
        )),
    };
    let tokens: Vec<String> = file
        .get_str_array("tokenizer.ggml.tokens")?
        .into_iter()
        .map(String::from)
        .collect();
    let scores = match file.get("tokenizer.ggml.scores") {
        None => Vec::new(),
        Some(_) => file
            .get_array("tokenizer.ggml.scores")?
            .iter()
            .map(|v| {
                v.as_f64()
                    .map(|x| x as f32)
                    .context("tokenizer.ggml.scores holds a non-float")
            })
            .collect::<Result<_>>()?,
    };
    let token_types = match file.get("tokenizer.ggml.token_type") {
        None => Vec::new(),
        Some(_) => file
            .get_array("tokenizer.ggml.token_type")?
            .iter()
            .map(|v| {
                v.as_i64()
                    .map(TokenType::from_gguf)
                    .context("tokenizer.ggml.token_type holds a non-integer")
            })
            .collect::<Result<_>>()?,
    };
    let merges = match file.get("tokenizer.ggml.merges") {
        None => Vec::new(),
        Some(_) => file
            .get_str_array("tokenizer.ggml.merges")?
            .into_iter()
            .map(String::from)
            .collect(),
    };
    let default_add_bos = kind == TokenizerKind::SentencePiece;
    let mut spec = TokenizerSpec {
        kind,
        pre: file
            .opt("tokenizer.ggml.pre", "a string", |v| {
                v.as_str().map(String::from)
            })?
            .unwrap_or_default(),
        tokens,
        scores,
        token_types,
        merges,
        bos_id: opt_id(file, "tokenizer.ggml.bos_token_id")?,
        eos_id: opt_id(file, "tokenizer.ggml.eos_token_id")?,
        unk_id: opt_id(file, "tokenizer.ggml.unknown_token_id")?,
        pad_id: opt_id(file, "tokenizer.ggml.padding_token_id")?,
        eog_ids: Vec::new(),
        add_bos: opt_bool(file, "tokenizer.ggml.add_bos_token")?.unwrap_or(default_add_bos),
        add_eos: opt_bool(file, "tokenizer.ggml.add_eos_token")?.unwrap_or(false),
        add_space_prefix: opt_bool(file, "tokenizer.ggml.add_space_prefix")?
            .unwrap_or(kind == TokenizerKind::SentencePiece),
        chat_template: file.opt("tokenizer.chat_template", "a string", |v| {
            v.as_str().map(String::from)
        })?,
    };
    let extra: Vec<u32> = ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"]
        .iter()
        .map(|k| opt_id(file, k))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .collect();
    spec.derive_eog(&extra);
    Ok(spec)
}

/// The tokenizer of a GGUF file.
pub fn tokenizer(file: &GgufFile) -> Result<Tokenizer> {
    let spec = tokenizer_spec(file)
        .with_context(|| format!("reading the tokenizer of {}", file.path().display()))?;
    Ok(Tokenizer::new(spec)?)
}

/// The chat template of a tokenizer, if its model has one.
pub fn chat_template(tok: &Tokenizer) -> Result<Option<ChatTemplate>> {
    let spec = tok.spec();
    let Some(source) = &spec.chat_template else {
        return Ok(None);
    };
    let text = |id: Option<u32>| {
        id.map(|i| spec.tokens[i as usize].clone())
            .unwrap_or_default()
    };
    Ok(Some(ChatTemplate::new(
        source,
        &text(spec.bos_id),
        &text(spec.eos_id),
    )?))
}

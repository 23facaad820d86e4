//! A Hugging Face `tokenizer.json` (+ `tokenizer_config.json`, `chat_template.jinja`) →
//! [`TokenizerSpec`], so plumb's own byte-level BPE runs it. Only what plumb implements is
//! accepted: a BPE model without dropout, byte fallback or word affixes (`ignore_merges` either
//! way), a pre-tokenizer that is one of plumb's named ones (recognized by its exact Hugging Face
//! shape), no normalizer or NFC. Anything
//! else is an error naming the part, never a tokenizer that silently gives other ids.

use crate::pretokenize;
use crate::{Normalizer, TokenId, TokenType, TokenizerError, TokenizerKind, TokenizerSpec};
use serde_json::Value;

fn bad(file: &'static str, why: impl Into<String>) -> TokenizerError {
    TokenizerError::BadHfFile { file, why: why.into() }
}

const TOK: &str = "tokenizer.json";
const CONFIG: &str = "tokenizer_config.json";

/// An absent word affix: null or "".
fn no_affix(v: &Value) -> bool {
    v.is_null() || v.as_str() == Some("")
}

/// The text of a special-token entry: `"<s>"` or `{"content": "<s>", ...}`.
fn token_text(v: &Value) -> Option<String> {
    v.as_str().map(String::from).or_else(|| v.get("content")?.as_str().map(String::from))
}

impl TokenizerSpec {
    /// Builds the spec from the files of a Hugging Face model folder.
    pub fn from_hf_files(
        tokenizer_json: &str,
        tokenizer_config: Option<&str>,
        chat_template_jinja: Option<&str>,
    ) -> Result<Self, TokenizerError> {
        let t: Value = serde_json::from_str(tokenizer_json).map_err(|e| bad(TOK, format!("is not JSON: {e}")))?;
        let model = t.get("model").filter(|m| m.is_object()).ok_or_else(|| bad(TOK, "has no `model` object"))?;
        let kind = model.get("type").and_then(Value::as_str).unwrap_or("BPE");
        if kind != "BPE" {
            return Err(TokenizerError::UnsupportedModel(format!("{kind} (tokenizer.json)")));
        }
        for (key, ok) in [
            ("dropout", model.get("dropout").is_none_or(Value::is_null)),
            ("byte_fallback", model.get("byte_fallback").is_none_or(|v| v == &Value::Bool(false))),
            // An empty prefix or suffix changes nothing (Qwen2.5's files spell "no affix" so).
            ("continuing_subword_prefix", model.get("continuing_subword_prefix").is_none_or(no_affix)),
            ("end_of_word_suffix", model.get("end_of_word_suffix").is_none_or(no_affix)),
        ] {
            if !ok {
                return Err(bad(TOK, format!("model.{key} is set; plumb's byte-level BPE does not implement it")));
            }
        }
        let ignore_merges = match model.get("ignore_merges") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(v) => return Err(bad(TOK, format!("model.ignore_merges is {v}, not true or false"))),
        };
        let normalizer = match t.get("normalizer").filter(|n| !n.is_null()) {
            None => Normalizer::None,
            Some(n) if n.get("type").and_then(Value::as_str) == Some("NFC") => Normalizer::Nfc,
            Some(n) => return Err(bad(TOK, format!("has normalizer {n}, which plumb does not implement (only NFC)"))),
        };
        let pre = pre_tokenizer_name(t.get("pre_tokenizer").unwrap_or(&Value::Null))?;

        let vocab =
            model.get("vocab").and_then(Value::as_object).ok_or_else(|| bad(TOK, "model.vocab is not an object"))?;
        let mut slots: Vec<Option<String>> = Vec::new();
        let mut put = |id: u64, text: &str, what: &str| -> Result<(), TokenizerError> {
            let id = usize::try_from(id)
                .ok()
                .filter(|&i| i < 1 << 24)
                .ok_or_else(|| bad(TOK, format!("{what} id {id} is too large")))?;
            if slots.len() <= id {
                slots.resize(id + 1, None);
            }
            match &slots[id] {
                Some(old) if old != text => Err(bad(TOK, format!("id {id} is both `{old}` and `{text}`"))),
                _ => {
                    slots[id] = Some(text.to_string());
                    Ok(())
                }
            }
        };
        for (text, id) in vocab {
            put(
                id.as_u64().ok_or_else(|| bad(TOK, format!("vocab entry `{text}` has no integer id")))?,
                text,
                "vocab",
            )?;
        }
        let mut types_by_id: Vec<(usize, TokenType)> = Vec::new();
        for a in t.get("added_tokens").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
            let (Some(id), Some(text)) =
                (a.get("id").and_then(Value::as_u64), a.get("content").and_then(Value::as_str))
            else {
                return Err(bad(TOK, format!("added token {a} has no id or content")));
            };
            put(id, text, "added token")?;
            let special = a.get("special").and_then(Value::as_bool).unwrap_or(false);
            types_by_id.push((id as usize, if special { TokenType::Control } else { TokenType::UserDefined }));
        }
        let tokens: Vec<String> = slots
            .into_iter()
            .enumerate()
            .map(|(id, s)| s.ok_or_else(|| bad(TOK, format!("no token has id {id}"))))
            .collect::<Result<_, _>>()?;
        let mut token_types = vec![TokenType::Normal; tokens.len()];
        for (id, ty) in types_by_id {
            token_types[id] = ty;
        }
        let merges = model
            .get("merges")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(TOK, "model.merges is not a list"))?
            .iter()
            .enumerate()
            .map(|(i, m)| {
                match m {
                    Value::String(s) => Some(s.clone()),
                    Value::Array(p) => match p.as_slice() {
                        [Value::String(l), Value::String(r)] => Some(format!("{l} {r}")),
                        _ => None,
                    },
                    _ => None,
                }
                .ok_or_else(|| TokenizerError::BadMerge { idx: i, rule: m.to_string() })
            })
            .collect::<Result<Vec<_>, _>>()?;

        let id_of = |text: &str| tokens.iter().position(|t| t == text).map(|i| i as TokenId);
        let config: Value = match tokenizer_config {
            Some(text) => serde_json::from_str(text).map_err(|e| bad(CONFIG, format!("is not JSON: {e}")))?,
            None => Value::Null,
        };
        let special = |key: &str| -> Result<Option<TokenId>, TokenizerError> {
            match config.get(key).filter(|v| !v.is_null()) {
                None => Ok(None),
                Some(v) => {
                    let text = token_text(v).ok_or_else(|| bad(CONFIG, format!("`{key}` is {v}, not a token")))?;
                    id_of(&text)
                        .map(Some)
                        .ok_or_else(|| bad(CONFIG, format!("`{key}` `{text}` is not in the vocabulary")))
                }
            }
        };
        let (post_bos, post_eos) = post_processor_specials(t.get("post_processor").unwrap_or(&Value::Null))?;
        let bos_id = special("bos_token")?.or(post_bos);
        let eos_id = special("eos_token")?;
        let flag = |key: &str| config.get(key).and_then(Value::as_bool);
        let chat_template = match chat_template_jinja {
            Some(text) => Some(text.to_string()),
            None => match config.get("chat_template") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Array(list)) => list
                    .iter()
                    .find(|e| e.get("name").and_then(Value::as_str) == Some("default"))
                    .and_then(|e| e.get("template")?.as_str().map(String::from)),
                Some(v) => return Err(bad(CONFIG, format!("`chat_template` is {v}, not a template"))),
            },
        };
        let (unk_id, pad_id) = (special("unk_token")?, special("pad_token")?);
        let mut spec = TokenizerSpec {
            kind: TokenizerKind::ByteLevelBpe,
            pre: pre.into(),
            tokens,
            scores: Vec::new(),
            token_types,
            merges,
            ignore_merges,
            normalizer,
            bos_id,
            eos_id,
            unk_id,
            pad_id,
            eog_ids: Vec::new(),
            add_bos: flag("add_bos_token").unwrap_or(post_bos.is_some()),
            add_eos: flag("add_eos_token").unwrap_or(post_eos.is_some()),
            add_space_prefix: false,
            chat_template,
        };
        spec.derive_eog(&[]);
        spec.validate()?;
        Ok(spec)
    }
}

/// plumb's name for a Hugging Face pre-tokenizer, if it is one plumb implements exactly.
fn pre_tokenizer_name(p: &Value) -> Result<&'static str, TokenizerError> {
    let ty = |v: &Value| v.get("type").and_then(Value::as_str).unwrap_or("").to_string();
    let byte_level = |v: &Value, regex: bool| {
        ty(v) == "ByteLevel"
            && v.get("add_prefix_space").and_then(Value::as_bool) == Some(false)
            && v.get("use_regex").and_then(Value::as_bool).unwrap_or(true) == regex
    };
    let split_name = |v: &Value| -> Option<&'static str> {
        let isolated = v.get("behavior").and_then(Value::as_str) == Some("Isolated")
            && v.get("invert").and_then(Value::as_bool) == Some(false);
        let pattern = v.get("pattern")?.get("Regex")?.as_str()?;
        (ty(v) == "Split" && isolated).then_some(())?;
        pretokenize::NAMED_PATTERNS.iter().find(|(_, p)| *p == pattern).map(|(name, _)| *name)
    };
    if byte_level(p, true) {
        return Ok("gpt2");
    }
    if ty(p) == "Sequence" {
        let parts = p.get("pretokenizers").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        match parts {
            [split, bl] if byte_level(bl, false) => {
                if let Some(name) = split_name(split) {
                    return Ok(name);
                }
            }
            [digits, bl]
                if byte_level(bl, true)
                    && ty(digits) == "Digits"
                    && digits.get("individual_digits").and_then(Value::as_bool) == Some(true) =>
            {
                return Ok("smollm");
            }
            _ => {}
        }
    }
    Err(TokenizerError::UnsupportedPreTokenizer(format!("{p} (tokenizer.json)"), pretokenize::SUPPORTED.into()))
}

/// Special tokens a `TemplateProcessing` post-processor puts before / after a single sequence.
fn post_processor_specials(p: &Value) -> Result<(Option<TokenId>, Option<TokenId>), TokenizerError> {
    let ty = p.get("type").and_then(Value::as_str).unwrap_or("");
    if p.is_null() || ty == "ByteLevel" {
        return Ok((None, None));
    }
    if ty != "TemplateProcessing" {
        return Err(bad(TOK, format!("post_processor `{ty}` is not supported")));
    }
    let single = p.get("single").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let special_id = |e: &Value| -> Option<TokenId> {
        let name = e.get("SpecialToken")?.get("id")?.as_str()?;
        let ids = p.get("special_tokens")?.get(name)?.get("ids")?.as_array()?;
        match ids.as_slice() {
            [id] => id.as_u64().map(|i| i as TokenId),
            _ => None,
        }
    };
    let seq_at = single.iter().position(|e| e.get("Sequence").is_some());
    let (before, after) = match seq_at {
        Some(i) => (&single[..i], &single[i + 1..]),
        None => return Err(bad(TOK, "post_processor.single has no sequence")),
    };
    let one = |part: &[Value], what: &str| -> Result<Option<TokenId>, TokenizerError> {
        match part {
            [] => Ok(None),
            [e] => special_id(e)
                .map(Some)
                .ok_or_else(|| bad(TOK, format!("post_processor {what} token {e} is not understood"))),
            _ => Err(bad(TOK, format!("post_processor adds {} tokens {what} a sequence", part.len()))),
        }
    };
    Ok((one(before, "before")?, one(after, "after")?))
}

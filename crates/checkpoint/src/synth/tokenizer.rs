//! The tokenizer of a synthetic checkpoint: a byte-level BPE over exactly `vocab_size` ids — the
//! 256 byte tokens, merges that fill the vocabulary, and the family's special tokens at the top —
//! written as `tokenizer.json`, `tokenizer_config.json` (with a chat template) and
//! `generation_config.json`, the way Hugging Face stores Llama 3 and Qwen3 tokenizers.
//! Invariants: every id the model can emit decodes (the vocabulary is the config's `vocab_size`),
//! and any UTF-8 text round-trips (every byte has a token).

use super::arch::Arch;
use crate::error::CheckpointError;
use serde_json::{Map, Value, json};

/// Llama 3's pre-tokenizer pattern, as its `tokenizer.json` holds it.
const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2/Qwen3's pre-tokenizer pattern (every digit on its own).
const QWEN2_PATTERN: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const LLAMA3_TEMPLATE: &str = "{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + \
    '<|end_header_id|>\\n\\n' + (message['content'] | trim) + '<|eot_id|>' }}{%- endfor %}\
    {%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";
const CHATML_TEMPLATE: &str = "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + \
    message['content'] + '<|im_end|>' + '\\n' }}{%- endfor %}\
    {%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

/// A family's special tokens, pre-tokenizer and chat format.
#[derive(Debug)]
struct Style {
    specials: &'static [&'static str],
    /// Put before every sequence by the post-processor (Llama 3), else none.
    bos: Option<&'static str>,
    /// `tokenizer_config.json`'s end of turn.
    eos: &'static str,
    pad: Option<&'static str>,
    /// What ends generation (`generation_config.json`).
    stops: &'static [&'static str],
    pattern: &'static str,
    template: &'static str,
}

const LLAMA3: Style = Style {
    specials: &["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
    bos: Some("<|begin_of_text|>"),
    eos: "<|eot_id|>",
    pad: None,
    stops: &["<|end_of_text|>", "<|eot_id|>"],
    pattern: LLAMA3_PATTERN,
    template: LLAMA3_TEMPLATE,
};

const CHATML: Style = Style {
    specials: &["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    bos: None,
    eos: "<|im_end|>",
    pad: Some("<|endoftext|>"),
    stops: &["<|im_end|>", "<|endoftext|>"],
    pattern: QWEN2_PATTERN,
    template: CHATML_TEMPLATE,
};

/// Bytes in the order merges pair them first: space, letters by English frequency, digits,
/// common punctuation, then every other byte.
const MERGE_PRIORITY: &[u8] = b" etaoinsrhldcumfpgwybvkxjqzETAOINSRHLDCUMFPGWYBVKXJQZ0123456789\n.,'-\"";

/// GPT-2's byte → character table (printable Latin-1 bytes stand for themselves, the rest take
/// code points from U+0100 up, in byte order), as every byte-level `tokenizer.json` uses it.
fn byte_chars() -> Vec<String> {
    let mut next = 256u32;
    (0..=255u8)
        .map(|b| {
            let c = if matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF) {
                b as char
            } else {
                next += 1;
                char::from_u32(next - 1).expect("below the surrogate range")
            };
            c.to_string()
        })
        .collect()
}

/// `n` merge rules (left, right): all pairs of bytes, then every pair + byte, and so on,
/// each level walked in anti-diagonals of merge priority so common letters pair first.
fn merges(n: usize) -> Vec<(String, String)> {
    let chars = byte_chars();
    let mut order: Vec<u8> = MERGE_PRIORITY.to_vec();
    order.extend((0..=255u8).filter(|b| !MERGE_PRIORITY.contains(b)));
    let alphabet: Vec<&str> = order.iter().map(|&b| chars[b as usize].as_str()).collect();
    let mut out = Vec::with_capacity(n);
    let mut prev: Vec<String> = alphabet.iter().map(|s| s.to_string()).collect();
    while out.len() < n {
        let mut next = Vec::new();
        'level: for diag in 0..prev.len() + alphabet.len() - 1 {
            for i in diag.saturating_sub(alphabet.len() - 1)..=diag.min(prev.len() - 1) {
                if out.len() == n {
                    break 'level;
                }
                let right = alphabet[diag - i];
                next.push(format!("{}{right}", prev[i]));
                out.push((prev[i].clone(), right.to_string()));
            }
        }
        prev = next;
    }
    out
}

/// A byte-level BPE of `vocab_size` ids in a family's style.
#[derive(Debug)]
pub struct SynthTokenizer {
    vocab_size: usize,
    style: &'static Style,
}

impl SynthTokenizer {
    /// The tokenizer for `arch` with `vocab_size` ids, or why that size cannot hold one.
    pub fn new(arch: Arch, vocab_size: usize, file: &str) -> Result<Self, CheckpointError> {
        let style = match arch {
            Arch::Llama => &LLAMA3,
            // DeepSeek V4's own template is not in its config: a synthetic checkpoint chats in ChatML.
            Arch::Qwen3 | Arch::Qwen3Moe | Arch::Qwen3_5 | Arch::Qwen3_5Moe | Arch::Qwen3Next | Arch::DeepseekV4 => {
                &CHATML
            }
        };
        let least = 256 + style.specials.len();
        if vocab_size < least {
            return Err(CheckpointError::BadConfig {
                file: file.into(),
                key: "vocab_size".into(),
                why: format!(
                    "is {vocab_size}; a byte-level tokenizer needs 256 byte tokens + {} special tokens",
                    style.specials.len()
                ),
            });
        }
        // plumb's tokenizer.json reader refuses ids from 2^24 up.
        if vocab_size > 1 << 24 {
            return Err(CheckpointError::BadConfig {
                file: file.into(),
                key: "vocab_size".into(),
                why: format!("is {vocab_size}; plumb synth writes vocabularies of at most 2^24 tokens"),
            });
        }
        Ok(SynthTokenizer { vocab_size, style })
    }

    /// The id of special token `text` (specials fill the top ids).
    fn special_id(&self, text: &str) -> u32 {
        let i = self.style.specials.iter().position(|s| *s == text).expect("a special token of this style");
        (self.vocab_size - self.style.specials.len() + i) as u32
    }

    /// `bos_token_id` for `config.json` and `generation_config.json`.
    pub fn bos_id(&self) -> u32 {
        self.special_id(self.style.bos.unwrap_or(self.style.specials[0]))
    }

    /// The ids that end generation.
    pub fn stop_ids(&self) -> Vec<u32> {
        self.style.stops.iter().map(|s| self.special_id(s)).collect()
    }

    /// `tokenizer.json`.
    pub fn tokenizer_json(&self) -> String {
        let num_specials = self.style.specials.len();
        let chars = byte_chars();
        let rules = merges(self.vocab_size - 256 - num_specials);
        let mut vocab = Map::with_capacity(self.vocab_size - num_specials);
        for (b, c) in chars.iter().enumerate() {
            vocab.insert(c.clone(), json!(b));
        }
        for (l, r) in &rules {
            let id = vocab.len();
            vocab.insert(format!("{l}{r}"), json!(id));
        }
        let added: Vec<Value> = self
            .style
            .specials
            .iter()
            .map(|s| {
                json!({"id": self.special_id(s), "content": s, "single_word": false, "lstrip": false,
                    "rstrip": false, "normalized": false, "special": true})
            })
            .collect();
        let post_processor = match self.style.bos {
            Some(bos) => {
                let id = self.special_id(bos);
                let seq = |s: &str, type_id: u32| json!({"Sequence": {"id": s, "type_id": type_id}});
                let special = |type_id: u32| json!({"SpecialToken": {"id": bos, "type_id": type_id}});
                json!({"type": "TemplateProcessing", "single": [special(0), seq("A", 0)],
                    "pair": [special(0), seq("A", 0), special(1), seq("B", 1)],
                    "special_tokens": {bos: {"id": bos, "ids": [id], "tokens": [bos]}}})
            }
            None => json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}),
        };
        let merges: Vec<Value> = rules.into_iter().map(|(l, r)| json!([l, r])).collect();
        json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": null,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": self.style.pattern}, "behavior": "Isolated", "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
            ]},
            "post_processor": post_processor,
            "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                "vocab": vocab, "merges": merges}
        })
        .to_string()
    }

    /// `tokenizer_config.json` for a model of `max_len` positions.
    pub fn tokenizer_config_json(&self, max_len: usize) -> String {
        let s = self.style;
        let decoder: Map<String, Value> = s
            .specials
            .iter()
            .map(|t| {
                let entry = json!({"content": t, "lstrip": false, "normalized": false, "rstrip": false,
                    "single_word": false, "special": true});
                (self.special_id(t).to_string(), entry)
            })
            .collect();
        let mut c = json!({
            "added_tokens_decoder": decoder,
            "bos_token": s.bos,
            "chat_template": s.template,
            "clean_up_tokenization_spaces": false,
            "eos_token": s.eos,
            "model_max_length": max_len,
            "pad_token": s.pad,
            "tokenizer_class": "PreTrainedTokenizerFast"
        });
        if s.bos.is_none() {
            c["add_bos_token"] = json!(false);
        }
        serde_json::to_string_pretty(&c).expect("JSON values serialize")
    }

    /// `generation_config.json`: the stop ids (sampling defaults would mean nothing for random weights).
    pub fn generation_config_json(&self) -> String {
        let mut c = json!({"bos_token_id": self.bos_id(), "eos_token_id": self.stop_ids()});
        if let Some(pad) = self.style.pad {
            c["pad_token_id"] = json!(self.special_id(pad));
        }
        serde_json::to_string_pretty(&c).expect("JSON values serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_are_unique_and_build_on_known_tokens() {
        let chars = byte_chars();
        let rules = merges(70_000);
        let mut known: std::collections::HashSet<String> = chars.iter().cloned().collect();
        for (l, r) in &rules {
            assert!(known.contains(l) && known.contains(r), "{l} {r}");
            assert!(known.insert(format!("{l}{r}")), "{l}{r} made twice");
        }
        assert_eq!(rules[0], ("Ġ".to_string(), "Ġ".to_string()));
        assert_eq!(rules[1], ("Ġ".to_string(), "e".to_string()));
        assert_eq!(rules.len(), 70_000, "past the 65 536 byte pairs into the next level");
    }
}

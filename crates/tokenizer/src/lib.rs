//! plumb-tokenizer: text ↔ token ids, and chat templates.
//! It is built from a plain [`TokenizerSpec`] (what GGUF metadata or a `tokenizer.json` says,
//! `hf_json.rs`), so it depends on no file format. Invariant: ids equal Hugging Face's for the same vocabulary, and
//! decoding is byte-exact (streaming never emits a partial UTF-8 character).
#![forbid(unsafe_code)]

mod bpe;
pub mod chat;
mod decode;
mod hf_json;
mod pretokenize;
mod spec;
mod special;
mod spm;
pub mod stop;

pub use chat::{ChatMessage, ChatTemplate};
pub use decode::StreamDecoder;
pub use spec::{Normalizer, TokenType, TokenizerKind, TokenizerSpec};
pub use stop::{StopMatcher, StopStep};

use special::SpecialSplitter;
use std::collections::HashMap;
use unicode_normalization::UnicodeNormalization;

/// A token id.
pub type TokenId = u32;

/// Why a tokenizer could not be built or used.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(
        "tokenizer model `{0}` is not supported (plumb reads `gpt2` byte-level BPE and `llama` SentencePiece vocabularies)"
    )]
    UnsupportedModel(String),
    #[error("pre-tokenizer `{0}` is not supported yet; supported: {1}")]
    UnsupportedPreTokenizer(String, String),
    #[error("the vocabulary is empty")]
    EmptyVocab,
    #[error("{field} has {actual} entries but the vocabulary has {expected} tokens")]
    LengthMismatch { field: &'static str, expected: usize, actual: usize },
    #[error("merge rule {idx} `{rule}` is malformed or names a token not in the vocabulary")]
    BadMerge { idx: usize, rule: String },
    #[error("special token id {id} ({what}) is outside the vocabulary of {vocab_size} tokens")]
    BadSpecialId { what: &'static str, id: u32, vocab_size: usize },
    #[error("token id {id} is outside the vocabulary of {vocab_size} tokens")]
    UnknownId { id: u32, vocab_size: usize },
    #[error("{file} {why}")]
    BadHfFile { file: &'static str, why: String },
    #[error("chat template error: {0}")]
    Template(String),
}

/// A ready tokenizer.
#[derive(Debug)]
pub struct Tokenizer {
    spec: TokenizerSpec,
    model: Model,
    specials: SpecialSplitter,
    /// Raw bytes each token decodes to.
    token_bytes: Vec<Vec<u8>>,
}

#[derive(Debug)]
enum Model {
    Bpe(bpe::ByteLevelBpe),
    Spm(spm::SentencePiece),
}

impl Tokenizer {
    /// Builds a tokenizer, checking the spec's consistency.
    pub fn new(spec: TokenizerSpec) -> Result<Self, TokenizerError> {
        spec.validate()?;
        let model = Self::build_model(&spec)?;
        let token_bytes = (0..spec.tokens.len()).map(|id| decode::raw_bytes(&spec, id)).collect();
        let specials = SpecialSplitter::new(&spec);
        // The merge rules live on in the model's rank table; the text copy is not needed.
        let mut spec = spec;
        spec.merges = Vec::new();
        Ok(Tokenizer { spec, model, specials, token_bytes })
    }

    fn build_model(spec: &TokenizerSpec) -> Result<Model, TokenizerError> {
        let token_to_id: HashMap<&str, TokenId> =
            spec.tokens.iter().enumerate().map(|(i, t)| (t.as_str(), i as TokenId)).collect();
        let model = match spec.kind {
            TokenizerKind::ByteLevelBpe => Model::Bpe(bpe::ByteLevelBpe::new(spec, &token_to_id)?),
            TokenizerKind::SentencePiece => Model::Spm(spm::SentencePiece::new(spec, &token_to_id)),
        };
        Ok(model)
    }

    pub fn spec(&self) -> &TokenizerSpec {
        &self.spec
    }

    pub fn vocab_size(&self) -> usize {
        self.spec.tokens.len()
    }

    /// Text → ids. `add_special` adds BOS/EOS as the vocabulary's metadata asks; `parse_special`
    /// turns control-token text such as `<|im_start|>` into its id instead of tokenizing it as text.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<TokenId> {
        let mut ids = Vec::new();
        if add_special && self.spec.add_bos {
            ids.extend(self.spec.bos_id);
        }
        let mut first_text = true;
        for piece in self.specials.split(text, parse_special) {
            match piece {
                special::Piece::Special(id) => ids.push(id),
                special::Piece::Text(t) => {
                    let normalized;
                    let t = match self.spec.normalizer {
                        Normalizer::None => t,
                        Normalizer::Nfc => {
                            normalized = t.nfc().collect::<String>();
                            normalized.as_str()
                        }
                    };
                    match &self.model {
                        Model::Bpe(m) => m.encode(t, &mut ids),
                        Model::Spm(m) => m.encode(t, first_text, &mut ids),
                    }
                    first_text = false;
                }
            }
        }
        if add_special && self.spec.add_eos {
            ids.extend(self.spec.eos_id);
        }
        ids
    }

    /// The bytes token `id` stands for (control tokens: their text).
    pub fn token_bytes(&self, id: TokenId) -> Result<&[u8], TokenizerError> {
        self.token_bytes
            .get(id as usize)
            .map(Vec::as_slice)
            .ok_or(TokenizerError::UnknownId { id, vocab_size: self.vocab_size() })
    }

    /// Whether `id` is a control token (BOS, EOS, `<|im_end|>`, ...).
    pub fn is_special(&self, id: TokenId) -> bool {
        self.spec.token_type(id) == TokenType::Control
    }

    /// Whether generation should stop at `id` (EOS, end-of-turn and end-of-generation tokens).
    pub fn is_eog(&self, id: TokenId) -> bool {
        self.spec.eog_ids.contains(&id)
    }

    /// Ids → text. Invalid UTF-8 (a sequence cut mid-character) becomes U+FFFD.
    pub fn decode(&self, ids: &[TokenId], skip_special: bool) -> Result<String, TokenizerError> {
        let mut d = StreamDecoder::new(self, skip_special);
        let mut out = String::new();
        for &id in ids {
            out.push_str(&d.push(id)?);
        }
        out.push_str(&d.finish());
        Ok(out)
    }
}

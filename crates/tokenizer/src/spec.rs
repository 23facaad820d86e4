//! What a tokenizer is made of, independent of the file it came from.

use crate::{TokenId, TokenizerError};

/// The tokenization algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum TokenizerKind {
    /// GPT-2 style byte-level BPE with ranked merges (GGUF `gpt2`).
    ByteLevelBpe,
    /// SentencePiece-style BPE over scored pieces with byte fallback (GGUF `llama`).
    SentencePiece,
}

/// What the text goes through before it is split into words (Hugging Face `normalizer`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub enum Normalizer {
    #[default]
    None,
    /// Unicode canonical composition (Qwen2/Qwen3 tokenizers).
    Nfc,
}

/// A token's role, numbered as GGUF's `tokenizer.ggml.token_type` numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum TokenType {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    /// The type for a GGUF token-type number (0, "undefined", counts as normal).
    pub fn from_gguf(n: i64) -> Self {
        match n {
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Normal,
        }
    }
}

/// Everything needed to build a [`crate::Tokenizer`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct TokenizerSpec {
    pub kind: TokenizerKind,
    /// Pre-tokenizer name as GGUF spells it (`tokenizer.ggml.pre`), e.g. `smollm`, `gpt2`, `llama-bpe`.
    pub pre: String,
    pub tokens: Vec<String>,
    /// Piece scores (SentencePiece); empty when absent.
    pub scores: Vec<f32>,
    /// Per-token types; empty means all normal.
    pub token_types: Vec<TokenType>,
    /// Merge rules `"left right"`, highest priority first (byte-level BPE).
    pub merges: Vec<String>,
    /// Byte-level BPE: a word that is itself a token becomes that token without merging
    /// (Hugging Face `ignore_merges`, llama.cpp's Llama 3 vocabularies).
    pub ignore_merges: bool,
    /// Applied to each run of text between special tokens.
    pub normalizer: Normalizer,
    pub bos_id: Option<TokenId>,
    pub eos_id: Option<TokenId>,
    pub unk_id: Option<TokenId>,
    pub pad_id: Option<TokenId>,
    /// Tokens that end generation: EOS, end-of-turn and friends.
    pub eog_ids: Vec<TokenId>,
    pub add_bos: bool,
    pub add_eos: bool,
    /// SentencePiece: prepend a space to the text before tokenizing.
    pub add_space_prefix: bool,
    pub chat_template: Option<String>,
}

/// Texts of control tokens that end a turn or generation in common chat formats.
const EOG_TEXTS: [&str; 8] =
    ["<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "<|end_of_text|>", "</s>"];

impl TokenizerSpec {
    /// The type of token `id` (normal when types are absent).
    pub fn token_type(&self, id: TokenId) -> TokenType {
        self.token_types.get(id as usize).copied().unwrap_or(TokenType::Normal)
    }

    /// Fills `eog_ids` from EOS, `extra` (end-of-turn ids from metadata) and well-known control texts.
    pub fn derive_eog(&mut self, extra: &[TokenId]) {
        let mut eog: Vec<TokenId> = self.eos_id.into_iter().chain(extra.iter().copied()).collect();
        for (id, text) in self.tokens.iter().enumerate() {
            let id = id as TokenId;
            if EOG_TEXTS.contains(&text.as_str()) && self.token_type(id) == TokenType::Control {
                eog.push(id);
            }
        }
        eog.sort_unstable();
        eog.dedup();
        self.eog_ids = eog;
    }

    pub(crate) fn validate(&self) -> Result<(), TokenizerError> {
        let n = self.tokens.len();
        if n == 0 {
            return Err(TokenizerError::EmptyVocab);
        }
        for (field, len) in [("scores", self.scores.len()), ("token types", self.token_types.len())] {
            if len != 0 && len != n {
                return Err(TokenizerError::LengthMismatch { field, expected: n, actual: len });
            }
        }
        let ids = [("bos", self.bos_id), ("eos", self.eos_id), ("unk", self.unk_id), ("pad", self.pad_id)];
        for (what, id) in ids {
            if let Some(id) = id.filter(|&id| id as usize >= n) {
                return Err(TokenizerError::BadSpecialId { what, id, vocab_size: n });
            }
        }
        if let Some(&id) = self.eog_ids.iter().find(|&&id| id as usize >= n) {
            return Err(TokenizerError::BadSpecialId { what: "end of generation", id, vocab_size: n });
        }
        Ok(())
    }
}

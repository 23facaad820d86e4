//! Ids → bytes → text, incrementally. A streaming client must never see half a character:
//! [`StreamDecoder`] holds back an incomplete UTF-8 tail until the next token completes it.

use crate::bpe::char_to_byte;
use crate::{TokenId, TokenType, Tokenizer, TokenizerError, TokenizerKind, TokenizerSpec};

/// The raw bytes token `id` stands for.
pub(crate) fn raw_bytes(spec: &TokenizerSpec, id: usize) -> Vec<u8> {
    let text = &spec.tokens[id];
    let ty = spec.token_type(id as TokenId);
    if matches!(ty, TokenType::Control | TokenType::UserDefined | TokenType::Unknown) {
        return text.as_bytes().to_vec();
    }
    match spec.kind {
        TokenizerKind::ByteLevelBpe => {
            let mut out = Vec::with_capacity(text.len());
            for c in text.chars() {
                match char_to_byte(c) {
                    Some(b) => out.push(b),
                    None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                }
            }
            out
        }
        TokenizerKind::SentencePiece => {
            if ty == TokenType::Byte {
                let hex = text.strip_prefix("<0x").and_then(|t| t.strip_suffix('>'));
                if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    return vec![b];
                }
            }
            text.replace('▁', " ").into_bytes()
        }
    }
}

/// Turns a stream of ids into text pieces that are always whole characters.
#[derive(Debug)]
pub struct StreamDecoder<'t> {
    tok: &'t Tokenizer,
    skip_special: bool,
    pending: Vec<u8>,
    /// SentencePiece drops the space its prefix added before the first piece.
    strip_leading_space: bool,
}

impl<'t> StreamDecoder<'t> {
    pub fn new(tok: &'t Tokenizer, skip_special: bool) -> Self {
        let spec = tok.spec();
        let strip = spec.kind == TokenizerKind::SentencePiece && spec.add_space_prefix;
        StreamDecoder { tok, skip_special, pending: Vec::new(), strip_leading_space: strip }
    }

    /// Adds one token; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, id: TokenId) -> Result<String, TokenizerError> {
        let bytes = self.tok.token_bytes(id)?;
        if self.skip_special && self.tok.is_special(id) {
            return Ok(String::new());
        }
        let mut bytes = bytes;
        if self.strip_leading_space && self.tok.spec().token_type(id) != TokenType::Control {
            self.strip_leading_space = false;
            bytes = bytes.strip_prefix(b" ").unwrap_or(bytes);
        }
        self.pending.extend_from_slice(bytes);
        Ok(self.take_complete(false))
    }

    /// Flushes what is left; an incomplete tail becomes U+FFFD.
    pub fn finish(&mut self) -> String {
        self.take_complete(true)
    }

    fn take_complete(&mut self, flush: bool) -> String {
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).expect("checked valid"));
                    match e.error_len() {
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[n..];
                        }
                        None if flush => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &[];
                            break;
                        }
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }
}

//! Splitting input text around special tokens before the model tokenizes the rest.
//! User-defined tokens are always matched; control tokens only when the caller asks (so that a
//! user typing `<|im_start|>` cannot forge a turn unless the caller allows it).

use crate::{TokenId, TokenType, TokenizerSpec};

#[derive(Debug, PartialEq)]
pub enum Piece<'a> {
    Special(TokenId),
    Text(&'a str),
}

#[derive(Debug)]
pub struct SpecialSplitter {
    /// (text, id, is_control), longest text first so the longest match wins.
    tokens: Vec<(String, TokenId, bool)>,
}

impl SpecialSplitter {
    pub fn new(spec: &TokenizerSpec) -> Self {
        let mut tokens: Vec<(String, TokenId, bool)> = spec
            .tokens
            .iter()
            .enumerate()
            .filter_map(|(id, text)| match spec.token_type(id as TokenId) {
                TokenType::Control if !text.is_empty() => Some((text.clone(), id as TokenId, true)),
                TokenType::UserDefined if !text.is_empty() => Some((text.clone(), id as TokenId, false)),
                _ => None,
            })
            .collect();
        tokens.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        SpecialSplitter { tokens }
    }

    /// Splits `text` into plain-text pieces and special tokens, in order.
    pub fn split<'a>(&self, text: &'a str, parse_control: bool) -> Vec<Piece<'a>> {
        let candidates: Vec<&(String, TokenId, bool)> =
            self.tokens.iter().filter(|(_, _, control)| parse_control || !control).collect();
        let mut out = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            // Earliest match; at equal positions the longest (candidates are sorted by length).
            let found = candidates
                .iter()
                .filter_map(|(t, id, _)| rest.find(t.as_str()).map(|pos| (pos, t.len(), *id)))
                .min_by_key(|&(pos, len, _)| (pos, usize::MAX - len));
            match found {
                None => {
                    out.push(Piece::Text(rest));
                    break;
                }
                Some((pos, len, id)) => {
                    if pos > 0 {
                        out.push(Piece::Text(&rest[..pos]));
                    }
                    out.push(Piece::Special(id));
                    rest = &rest[pos + len..];
                }
            }
        }
        out
    }
}

//! Byte-level BPE (GPT-2 family): bytes map to printable characters, words merge by rank.
//! Invariant: for the same vocabulary and merges, ids equal Hugging Face `tokenizers`' BPE model
//! (lowest rank first, leftmost first among equal ranks).

use crate::pretokenize::PreTokenizer;
use crate::{TokenId, TokenizerError, TokenizerSpec};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// GPT-2's byte → character table: printable Latin-1 bytes stand for themselves, the other 68
/// bytes take the code points from U+0100 upward, in byte order.
pub fn byte_to_char() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        table[b as usize] = if printable {
            b as char
        } else {
            next += 1;
            char::from_u32(next - 1).expect("below the surrogate range")
        };
    }
    table
}

/// The inverse of [`byte_to_char`]: the byte a byte-level character stands for.
pub fn char_to_byte(c: char) -> Option<u8> {
    static INVERSE: std::sync::OnceLock<HashMap<char, u8>> = std::sync::OnceLock::new();
    let inverse = INVERSE.get_or_init(|| byte_to_char().iter().enumerate().map(|(b, &c)| (c, b as u8)).collect());
    inverse.get(&c).copied()
}

#[derive(Debug)]
pub struct ByteLevelBpe {
    pre: PreTokenizer,
    /// Token of each single byte; a byte the vocabulary lacks is dropped, as Hugging Face's BPE
    /// drops characters it has no token for when there is no unknown token.
    byte_ids: [Option<TokenId>; 256],
    /// (left, right) → (rank, merged id).
    merges: HashMap<(TokenId, TokenId), (u32, TokenId)>,
    /// With `ignore_merges`: every token's byte-level text → its id, so a whole word that is a
    /// token skips merging.
    words: Option<HashMap<String, TokenId>>,
}

impl ByteLevelBpe {
    pub fn new(spec: &TokenizerSpec, token_to_id: &HashMap<&str, TokenId>) -> Result<Self, TokenizerError> {
        let chars = byte_to_char();
        let mut byte_ids = [None; 256];
        for (b, id) in byte_ids.iter_mut().enumerate() {
            *id = token_to_id.get(chars[b].encode_utf8(&mut [0u8; 4]) as &str).copied();
        }
        let mut merges = HashMap::with_capacity(spec.merges.len());
        for (rank, rule) in spec.merges.iter().enumerate() {
            let bad = || TokenizerError::BadMerge { idx: rank, rule: rule.clone() };
            let (l, r) = rule.split_once(' ').ok_or_else(bad)?;
            let merged = format!("{l}{r}");
            let (l, r, m) = match (token_to_id.get(l), token_to_id.get(r), token_to_id.get(merged.as_str())) {
                (Some(&l), Some(&r), Some(&m)) => (l, r, m),
                _ => return Err(bad()),
            };
            // Keep the first (highest-priority) rule if a pair repeats, as Hugging Face does.
            merges.entry((l, r)).or_insert((rank as u32, m));
        }
        let words = spec.ignore_merges.then(|| token_to_id.iter().map(|(&text, &id)| (text.to_string(), id)).collect());
        Ok(ByteLevelBpe { pre: PreTokenizer::new(&spec.pre)?, byte_ids, merges, words })
    }

    /// Appends the ids of `text` (no special tokens inside) to `out`.
    pub fn encode(&self, text: &str, out: &mut Vec<TokenId>) {
        self.pre.for_each_word(text, |word| self.encode_word(word.as_bytes(), out));
    }

    fn encode_word(&self, word: &[u8], out: &mut Vec<TokenId>) {
        if let Some(words) = &self.words {
            static CHARS: std::sync::OnceLock<[char; 256]> = std::sync::OnceLock::new();
            let chars = CHARS.get_or_init(byte_to_char);
            let text: String = word.iter().map(|&b| chars[b as usize]).collect();
            if let Some(&id) = words.get(&text) {
                out.push(id);
                return;
            }
        }
        let mut syms: Vec<Symbol> = word
            .iter()
            .filter_map(|&b| self.byte_ids[b as usize])
            .enumerate()
            .map(|(i, id)| Symbol { id, prev: i.wrapping_sub(1), next: i + 1, len: 1 })
            .collect();
        let mut queue = BinaryHeap::new();
        for i in 1..syms.len() {
            if let Some(&(rank, id)) = self.merges.get(&(syms[i - 1].id, syms[i].id)) {
                queue.push(Reverse((rank, i - 1, id)));
            }
        }
        while let Some(Reverse((rank, left, merged))) = queue.pop() {
            let right = syms[left].next;
            // Skip stale entries: the left symbol was absorbed, or its right neighbour changed.
            if syms[left].len == 0 || right >= syms.len() {
                continue;
            }
            if self.merges.get(&(syms[left].id, syms[right].id)) != Some(&(rank, merged)) {
                continue;
            }
            syms[left].id = merged;
            syms[left].len += syms[right].len;
            syms[left].next = syms[right].next;
            syms[right].len = 0;
            if syms[left].next < syms.len() {
                let n = syms[left].next;
                syms[n].prev = left;
                if let Some(&(r, id)) = self.merges.get(&(merged, syms[n].id)) {
                    queue.push(Reverse((r, left, id)));
                }
            }
            let p = syms[left].prev;
            if p < syms.len()
                && let Some(&(r, id)) = self.merges.get(&(syms[p].id, merged))
            {
                queue.push(Reverse((r, p, id)));
            }
        }
        out.extend(syms.iter().filter(|s| s.len > 0).map(|s| s.id));
    }
}

#[derive(Clone, Copy, Debug)]
struct Symbol {
    id: TokenId,
    /// Index of the previous live symbol (`usize::MAX` at the start).
    prev: usize,
    /// Index of the next live symbol (`len` at the end).
    next: usize,
    /// Bytes covered; 0 once merged into its left neighbour.
    len: usize,
}

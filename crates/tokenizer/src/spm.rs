//! SentencePiece-style BPE (GGUF `llama` vocabularies): spaces become `▁`, adjacent pieces merge
//! highest score first (leftmost among equal scores) while the merged piece is in the vocabulary,
//! and pieces left unknown fall back to `<0xNN>` byte tokens, else to the unknown token.

use crate::{TokenId, TokenType, TokenizerSpec};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

#[derive(Debug)]
pub struct SentencePiece {
    piece_ids: HashMap<String, TokenId>,
    scores: Vec<f32>,
    byte_ids: [Option<TokenId>; 256],
    unk_id: Option<TokenId>,
    add_space_prefix: bool,
}

#[derive(Debug, PartialEq)]
struct Bigram {
    score: f32,
    left: usize,
    /// Byte length of the merged piece, to detect stale entries.
    len: usize,
}

impl Eq for Bigram {}

impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl SentencePiece {
    pub fn new(spec: &TokenizerSpec, token_to_id: &HashMap<&str, TokenId>) -> Self {
        let mut byte_ids = [None; 256];
        for (id, text) in spec.tokens.iter().enumerate() {
            if spec.token_type(id as TokenId) == TokenType::Byte
                && let Some(b) = text.strip_prefix("<0x").and_then(|t| t.strip_suffix('>'))
                && let Ok(b) = u8::from_str_radix(b, 16)
            {
                byte_ids[b as usize] = Some(id as TokenId);
            }
        }
        // Control and byte tokens never take part in merges; only normal-ish pieces do.
        let piece_ids = token_to_id
            .iter()
            .filter(|&(_, &id)| !matches!(spec.token_type(id), TokenType::Control | TokenType::Byte))
            .map(|(&t, &id)| (t.to_string(), id))
            .collect();
        SentencePiece {
            piece_ids,
            scores: spec.scores.clone(),
            byte_ids,
            unk_id: spec.unk_id,
            add_space_prefix: spec.add_space_prefix,
        }
    }

    fn score(&self, id: TokenId) -> f32 {
        self.scores.get(id as usize).copied().unwrap_or(0.0)
    }

    /// Appends the ids of `text`; `at_start` says whether it begins the input (space prefix).
    pub fn encode(&self, text: &str, at_start: bool, out: &mut Vec<TokenId>) {
        if text.is_empty() {
            return;
        }
        let mut norm = String::with_capacity(text.len() + 3);
        if self.add_space_prefix && at_start {
            norm.push('▁');
        }
        norm.extend(text.chars().map(|c| if c == ' ' { '▁' } else { c }));
        // Symbols: (start, len) byte spans, linked as a list.
        let start: Vec<usize> = norm.char_indices().map(|(i, _)| i).collect();
        let mut len: Vec<usize> = start.windows(2).map(|w| w[1] - w[0]).collect();
        len.push(norm.len() - start.last().copied().unwrap_or(0));
        let n = start.len();
        let mut next: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut heap = BinaryHeap::new();
        let try_push = |heap: &mut BinaryHeap<Bigram>, l: usize, r: usize, start: &[usize], len: &[usize]| {
            let piece = &norm[start[l]..start[r] + len[r]];
            if let Some(&id) = self.piece_ids.get(piece) {
                heap.push(Bigram { score: self.score(id), left: l, len: piece.len() });
            }
        };
        for i in 1..n {
            try_push(&mut heap, i - 1, i, &start, &len);
        }
        while let Some(b) = heap.pop() {
            let l = b.left;
            let r = next[l];
            if len[l] == 0 || r >= n || len[l] + len[r] != b.len {
                continue;
            }
            len[l] += len[r];
            len[r] = 0;
            next[l] = next[r];
            if next[l] < n {
                prev[next[l]] = l;
                try_push(&mut heap, l, next[l], &start, &len);
            }
            if prev[l] < n {
                try_push(&mut heap, prev[l], l, &start, &len);
            }
        }
        let mut i = 0;
        while i < n {
            let piece = &norm[start[i]..start[i] + len[i]];
            match self.piece_ids.get(piece) {
                Some(&id) => out.push(id),
                None => match piece.bytes().map(|b| self.byte_ids[b as usize]).collect::<Option<Vec<_>>>() {
                    Some(bytes) => out.extend(bytes),
                    None => out.extend(self.unk_id),
                },
            }
            i = next[i];
        }
    }
}

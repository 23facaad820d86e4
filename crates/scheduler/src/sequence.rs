//! A sequence: its tokens, how many are computed, its blocks, and when it stops.

/// A sequence id, unique within an engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(pub u64);

/// Why a sequence stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// A stop token was generated.
    Stop,
    /// `max_tokens` were generated.
    Length,
}

#[derive(Clone, Debug)]
pub struct Sequence {
    pub id: SeqId,
    /// Prompt then generated tokens.
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    pub num_computed_tokens: usize,
    pub block_table: Vec<u32>,
    pub max_tokens: usize,
    pub stop_ids: Vec<u32>,
}

impl Sequence {
    pub fn new(id: SeqId, prompt: Vec<u32>, max_tokens: usize, stop_ids: Vec<u32>) -> Self {
        let prompt_len = prompt.len();
        Sequence {
            id,
            tokens: prompt,
            prompt_len,
            num_computed_tokens: 0,
            block_table: Vec::new(),
            max_tokens,
            stop_ids,
        }
    }

    pub fn num_generated(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }

    pub(crate) fn finish_reason(&self, last: u32) -> Option<FinishReason> {
        if self.stop_ids.contains(&last) {
            Some(FinishReason::Stop)
        } else if self.num_generated() >= self.max_tokens {
            Some(FinishReason::Length)
        } else {
            None
        }
    }
}

//! A sequence: its tokens, how many are computed, its blocks, and when it stops.
//! Invariant: `tokens` only grow (prompt, then sampled tokens); `block_table` covers at least
//! positions 0..num_computed_tokens while running and is empty while waiting.

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

/// Where a sequence is: in the waiting queue (never admitted, or preempted) or in a lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Waiting,
    Running,
}

/// One request as the scheduler sees it. The request's fields are public; the scheduler's
/// bookkeeping (computed tokens, blocks) is read through methods and changed only by the scheduler.
#[derive(Clone, Debug)]
pub struct Sequence {
    /// Unique within the scheduler it is added to.
    pub id: SeqId,
    /// Tokens to generate at most.
    pub max_tokens: usize,
    /// Tokens that end the sequence when sampled.
    pub stop_ids: Vec<u32>,
    /// Mixed into the hash of the first block: sequences with different salts never share
    /// prefix-cache blocks.
    pub cache_salt: u64,
    tokens: Vec<u32>,
    prompt_len: usize,
    pub(crate) num_computed_tokens: usize,
    pub(crate) block_table: Vec<u32>,
    /// Hash chain of the full blocks of `tokens` computed so far (a pure function of the tokens
    /// and the salt, so it survives preemption).
    pub(crate) block_hashes: Vec<u64>,
    /// Prefix-cache identity of the first `prefix_ids.len()` blocks of `block_table`.
    pub(crate) prefix_ids: Vec<u64>,
    pub(crate) status: Status,
    /// The lane slot it holds while running (per-lane state of linear-attention models lives
    /// there); `None` while waiting. A preempted sequence gives its slot back.
    pub(crate) lane_slot: Option<u32>,
    /// Lane-state snapshots its planned step takes, not yet attached to cached blocks:
    /// (tokens absorbed, snapshot slot). Empty between steps.
    pub(crate) pending_snapshots: Vec<(usize, u32)>,
}

impl Sequence {
    /// A new sequence with the prompt as its tokens, salt 0.
    pub fn new(id: SeqId, prompt: Vec<u32>, max_tokens: usize, stop_ids: Vec<u32>) -> Self {
        let prompt_len = prompt.len();
        Sequence {
            id,
            max_tokens,
            stop_ids,
            cache_salt: 0,
            tokens: prompt,
            prompt_len,
            num_computed_tokens: 0,
            block_table: Vec::new(),
            block_hashes: Vec::new(),
            prefix_ids: Vec::new(),
            status: Status::Waiting,
            lane_slot: None,
            pending_snapshots: Vec::new(),
        }
    }

    /// The same sequence with a prefix-cache salt (e.g. per tenant).
    pub fn with_cache_salt(mut self, cache_salt: u64) -> Self {
        self.cache_salt = cache_salt;
        self
    }

    /// Prompt then generated tokens.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Length of the prompt at the start of `tokens`.
    pub fn prompt_len(&self) -> usize {
        self.prompt_len
    }

    /// Tokens generated so far.
    pub fn num_generated(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }

    /// Tokens whose KV is in the blocks (0 while waiting).
    pub fn num_computed_tokens(&self) -> usize {
        self.num_computed_tokens
    }

    /// The lane slot (0..max_lanes) it holds while running, distinct from every other running
    /// sequence's; `None` while waiting.
    pub fn lane_slot(&self) -> Option<u32> {
        self.lane_slot
    }

    /// KV block ids, block `i` holding positions `i*block_size..(i+1)*block_size`.
    pub fn block_table(&self) -> &[u32] {
        &self.block_table
    }

    /// Running with only its last token left to compute: the next step samples from it.
    pub(crate) fn is_decoding(&self) -> bool {
        self.tokens.len() == self.num_computed_tokens + 1
    }

    pub(crate) fn push_token(&mut self, token: u32) {
        self.tokens.push(token);
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

//! plumb-scheduler: which tokens of which sequences run in the next step (continuous batching,
//! chunked prefill, paged KV blocks with a prefix cache, preemption by recompute).
//! Pure bookkeeping — no tensors, no device. Invariant: a planned sequence's block table covers
//! positions 0..end of its item, and a finished or aborted sequence returns every block it held.
#![forbid(unsafe_code)]

mod block_manager;
mod block_pool;
mod integrity;
mod prefix_cache;
mod scheduler;
mod sequence;
mod snapshot_pool;

pub use block_pool::{BlockPool, FreeEnd};
pub use scheduler::Scheduler;
pub use sequence::{FinishReason, SeqId, Sequence};
pub use snapshot_pool::StateSnapshots;

#[cfg(test)]
mod scheduler_props;
#[cfg(test)]
mod scheduler_tests;
#[cfg(test)]
mod snapshot_tests;

/// Limits of one engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// KV positions per block.
    pub block_size: usize,
    /// Blocks in the KV pool.
    pub num_blocks: usize,
    /// Sequences that may run at once.
    pub max_lanes: usize,
    /// Rows per step (prefill is chunked to fit).
    pub max_batch_tokens: usize,
    /// Longest sequence (prompt + output) the model accepts.
    pub max_model_len: usize,
    /// Requests that may wait for a lane; `add` refuses more. (Preempted sequences always
    /// go back to the queue, even past this bound.)
    pub max_waiting: usize,
    /// Reuse the KV of full blocks whose token prefix was computed before.
    pub enable_prefix_cache: bool,
}

impl SchedulerConfig {
    /// Checks that the limits allow any work at all.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("block_size", self.block_size),
            ("num_blocks", self.num_blocks),
            ("max_lanes", self.max_lanes),
            ("max_batch_tokens", self.max_batch_tokens),
            ("max_model_len", self.max_model_len),
            ("max_waiting", self.max_waiting),
        ];
        if let Some(&(name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Zero { name });
        }
        if self.num_blocks >= u32::MAX as usize {
            return Err(ConfigError::TooManyBlocks { num_blocks: self.num_blocks });
        }
        Ok(())
    }
}

/// A configuration the scheduler cannot run with.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("scheduler setting {name} must be at least 1")]
    Zero { name: &'static str },
    #[error("{num_blocks} KV blocks is more than block ids can name")]
    TooManyBlocks { num_blocks: usize },
}

/// A request the scheduler refuses; the request fails, the engine goes on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestError {
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error(
        "the prompt has {prompt_len} tokens; with max_tokens {max_tokens} that exceeds the limit of {max_len} tokens"
    )]
    TooLong {
        prompt_len: usize,
        max_tokens: usize,
        /// `Scheduler::max_len()`: min(max_model_len, num_blocks · block_size).
        max_len: usize,
    },
    #[error("max_tokens must be at least 1")]
    ZeroMaxTokens,
    #[error("{limit} requests are already waiting; try again later")]
    QueueFull { limit: usize },
    #[error("sequence id {} is already in use", .id.0)]
    DuplicateId { id: SeqId },
}

/// One sequence's share of a step: compute tokens `start..end`; `sample` when the step's last
/// row for it yields the next token. A decoding sequence may also carry `drafts`: guessed tokens
/// for positions `end..end + drafts.len()`, computed as extra rows (verify rows) whose samples
/// decide how many of them the sequence keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanItem {
    pub seq_id: SeqId,
    /// First position to compute (= the sequence's `num_computed_tokens`).
    pub start: usize,
    /// One past the last position; the sequence's blocks cover 0..end.
    pub end: usize,
    /// `end` is the sequence's length: the last row's logits give its next token.
    pub sample: bool,
    /// Draft tokens to verify after `end` (only with `sample`); the block table covers them.
    pub drafts: Vec<u32>,
    /// Lane-state snapshot the lane starts from (a prefix-cache hit of a model with lane state;
    /// it holds the state after `start` tokens). Restored before the step runs.
    pub restore: Option<u32>,
    /// Lane-state snapshots the step takes: (tokens absorbed, a block boundary in
    /// `start + 1..=end`; snapshot slot).
    pub snapshots: Vec<(usize, u32)>,
}

impl PlanItem {
    /// Rows this item puts in the step: its computed tokens plus its verify rows.
    pub fn num_rows(&self) -> usize {
        self.end - self.start + self.drafts.len()
    }

    /// Tokens it samples: one per verify row plus the one after `end`, or none.
    pub fn num_samples(&self) -> usize {
        if self.sample { 1 + self.drafts.len() } else { 0 }
    }
}

/// What a step computes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepPlan {
    /// Decodes first, then prefill chunks, then newly admitted sequences.
    pub items: Vec<PlanItem>,
    /// Sequences preempted while planning this step, in order (they are back in the waiting queue).
    pub preempted: Vec<SeqId>,
}

/// What happened to a sequence in `update`: one per token it kept (several when drafts were accepted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqUpdate {
    pub seq_id: SeqId,
    /// The sampled token, now appended to the sequence.
    pub token: u32,
    /// Set when this token ended the sequence (its blocks are released).
    pub finished: Option<FinishReason>,
}

/// Counters for metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    /// Sequences in the waiting queue (new and preempted).
    pub num_waiting: usize,
    /// Sequences holding a lane.
    pub num_running: usize,
    /// Preemptions since start.
    pub num_preemptions_total: u64,
    /// Blocks in the pool.
    pub num_blocks: usize,
    /// Blocks with at least one reference.
    pub num_blocks_in_use: usize,
    /// Blocks holding a prefix-cache entry (in use or free).
    pub num_blocks_cached: usize,
    /// Tokens of admitted sequences looked up in the prefix cache.
    pub prefix_cache_queried_tokens: u64,
    /// Of those, tokens found cached.
    pub prefix_cache_hit_tokens: u64,
    /// Lane-state snapshots attached to cached blocks (models with lane state).
    pub num_state_snapshots_cached: usize,
    /// Lane-state snapshots planned since start (more than the pool holds means evictions).
    pub num_state_snapshots_taken: u64,
}

//! plumb-scheduler: which tokens of which sequences run in the next step.
//! Pure bookkeeping — no tensors, no device. Invariant: a sequence's block table always covers
//! positions 0..num_computed_tokens (+ the tokens planned this step), and a freed sequence
//! returns every block it held.
#![forbid(unsafe_code)]

mod block_pool;
mod sequence;

pub use block_pool::BlockPool;
pub use sequence::{FinishReason, SeqId, Sequence};

use std::collections::VecDeque;

/// Limits of one engine.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    pub block_size: usize,
    pub num_blocks: usize,
    /// Sequences that may run at once.
    pub max_lanes: usize,
    /// Rows per step (prefill is chunked to fit).
    pub max_batch_tokens: usize,
    /// Longest sequence (prompt + output) the model accepts.
    pub max_model_len: usize,
}

/// A request the scheduler refuses; the request fails, the engine goes on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestError {
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error(
        "the prompt has {prompt_len} tokens; with max_tokens {max_tokens} that exceeds the context of {max_model_len} tokens"
    )]
    TooLong { prompt_len: usize, max_tokens: usize, max_model_len: usize },
    #[error("max_tokens must be at least 1")]
    ZeroMaxTokens,
}

/// One sequence's share of a step: compute tokens `start..end`; `sample` when the step's last
/// row for it yields the next token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanItem {
    pub seq_id: SeqId,
    pub start: usize,
    pub end: usize,
    pub sample: bool,
}

/// What a step computes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepPlan {
    pub items: Vec<PlanItem>,
}

/// What happened to a sequence in `update`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqUpdate {
    pub seq_id: SeqId,
    pub token: u32,
    pub finished: Option<FinishReason>,
}

#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    pool: BlockPool,
    waiting: VecDeque<Sequence>,
    running: Vec<Sequence>,
}

impl Scheduler {
    pub fn new(config: SchedulerConfig) -> Self {
        let pool = BlockPool::new(config.num_blocks);
        Scheduler { config, pool, waiting: VecDeque::new(), running: Vec::new() }
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Queues a sequence after checking it can ever run.
    pub fn add(&mut self, seq: Sequence) -> Result<(), RequestError> {
        if seq.prompt_len == 0 {
            return Err(RequestError::EmptyPrompt);
        }
        if seq.max_tokens == 0 {
            return Err(RequestError::ZeroMaxTokens);
        }
        let limit = self.config.max_model_len.min(self.config.num_blocks * self.config.block_size);
        if seq.prompt_len + seq.max_tokens > limit {
            return Err(RequestError::TooLong {
                prompt_len: seq.prompt_len,
                max_tokens: seq.max_tokens,
                max_model_len: limit,
            });
        }
        self.waiting.push_back(seq);
        Ok(())
    }

    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    pub fn get(&self, id: SeqId) -> Option<&Sequence> {
        self.running.iter().find(|s| s.id == id)
    }

    /// Plans the next step: running sequences first (decodes, then prefill chunks), then
    /// admits waiting ones while lanes, blocks and the token budget allow.
    pub fn schedule(&mut self) -> StepPlan {
        while self.running.len() < self.config.max_lanes {
            let Some(seq) = self.waiting.pop_front() else {
                break;
            };
            self.running.push(seq);
        }
        let mut budget = self.config.max_batch_tokens;
        let mut items = Vec::new();
        for seq in &mut self.running {
            if budget == 0 {
                break;
            }
            let start = seq.num_computed_tokens;
            let end = seq.tokens.len().min(start + budget);
            let needed = end.div_ceil(self.config.block_size);
            if needed > seq.block_table.len() {
                match self.pool.allocate(needed - seq.block_table.len()) {
                    Some(blocks) => seq.block_table.extend(blocks),
                    None => continue,
                }
            }
            budget -= end - start;
            items.push(PlanItem { seq_id: seq.id, start, end, sample: end == seq.tokens.len() });
        }
        StepPlan { items }
    }

    /// Records the step: computed tokens advance, sampled tokens append, finished sequences
    /// free their blocks. `sampled` holds one token per plan item with `sample` set, in order.
    pub fn update(&mut self, plan: &StepPlan, sampled: &[u32]) -> Vec<SeqUpdate> {
        let mut tokens = sampled.iter();
        let mut updates = Vec::new();
        for item in &plan.items {
            let Some(seq) = self.running.iter_mut().find(|s| s.id == item.seq_id) else {
                continue;
            };
            seq.num_computed_tokens = item.end;
            if !item.sample {
                continue;
            }
            let token = *tokens.next().expect("one sampled token per sampling item");
            seq.tokens.push(token);
            let finished = seq.finish_reason(token);
            updates.push(SeqUpdate { seq_id: seq.id, token, finished });
        }
        for u in updates.iter().filter(|u| u.finished.is_some()) {
            self.finish(u.seq_id);
        }
        updates
    }

    /// Removes a sequence (finished or aborted) and frees its blocks.
    pub fn finish(&mut self, id: SeqId) {
        if let Some(i) = self.running.iter().position(|s| s.id == id) {
            let seq = self.running.remove(i);
            self.pool.free(&seq.block_table);
        }
        self.waiting.retain(|s| s.id != id);
    }

    pub fn num_free_blocks(&self) -> usize {
        self.pool.num_free()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SchedulerConfig {
        SchedulerConfig { block_size: 4, num_blocks: 8, max_lanes: 1, max_batch_tokens: 6, max_model_len: 32 }
    }

    #[test]
    fn prefill_is_chunked_then_decodes_one_token() {
        let mut s = Scheduler::new(config());
        s.add(Sequence::new(SeqId(1), vec![1; 10], 3, vec![])).unwrap();
        let p = s.schedule();
        assert_eq!(p.items, [PlanItem { seq_id: SeqId(1), start: 0, end: 6, sample: false }]);
        assert_eq!(s.get(SeqId(1)).unwrap().block_table, [0, 1]);
        assert!(s.update(&p, &[]).is_empty());
        let p = s.schedule();
        assert_eq!(p.items, [PlanItem { seq_id: SeqId(1), start: 6, end: 10, sample: true }]);
        assert_eq!(s.get(SeqId(1)).unwrap().block_table, [0, 1, 2]);
        let u = s.update(&p, &[42]);
        assert_eq!(u, [SeqUpdate { seq_id: SeqId(1), token: 42, finished: None }]);
        let p = s.schedule();
        assert_eq!(p.items, [PlanItem { seq_id: SeqId(1), start: 10, end: 11, sample: true }]);
    }

    #[test]
    fn finishing_frees_every_block() {
        let mut s = Scheduler::new(config());
        s.add(Sequence::new(SeqId(1), vec![1; 5], 1, vec![])).unwrap();
        let p = s.schedule();
        let u = s.update(&p, &[7]);
        assert_eq!(u[0].finished, Some(FinishReason::Length));
        assert_eq!(s.num_free_blocks(), 8);
        assert!(!s.has_work());
    }

    #[test]
    fn stop_tokens_finish() {
        let mut s = Scheduler::new(config());
        s.add(Sequence::new(SeqId(1), vec![1; 2], 10, vec![9])).unwrap();
        let p = s.schedule();
        assert_eq!(s.update(&p, &[9])[0].finished, Some(FinishReason::Stop));
    }

    #[test]
    fn bad_requests_are_refused() {
        let mut s = Scheduler::new(config());
        assert_eq!(s.add(Sequence::new(SeqId(1), vec![], 1, vec![])), Err(RequestError::EmptyPrompt));
        let err = s.add(Sequence::new(SeqId(2), vec![1; 30], 5, vec![])).unwrap_err();
        assert!(matches!(err, RequestError::TooLong { max_model_len: 32, .. }));
        assert_eq!(s.add(Sequence::new(SeqId(3), vec![1], 0, vec![])), Err(RequestError::ZeroMaxTokens));
    }
}

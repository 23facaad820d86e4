//! The scheduler: the waiting queue, the lanes, and the plan of each step.
//! Invariants: `running` is in admission order (oldest first) and holds at most `max_lanes`
//! sequences; every known sequence is in exactly one of `waiting` and `running`; a waiting
//! sequence holds no blocks.
//!
//! Preemption takes the most recently admitted running sequence, so the oldest one is never
//! preempted while another runs. Alone, it always fits (`add` refused anything longer than the
//! pool), so it always progresses: no deadlock, and no two sequences can preempt each other
//! forever, since the older of them keeps its blocks and finishes in a bounded number of steps.

use crate::block_manager::BlockManager;
use crate::prefix_cache::{BlockHasher, hash_block};
use crate::sequence::Status;
use crate::snapshot_pool::{SnapshotPool, StateSnapshots};
use crate::{PlanItem, RequestError, SchedulerConfig, SchedulerStats, SeqId, SeqUpdate, Sequence, StepPlan};
use std::collections::{HashMap, VecDeque};

/// Continuous-batching scheduler over a pool of KV blocks.
#[derive(Debug)]
pub struct Scheduler {
    pub(crate) config: SchedulerConfig,
    pub(crate) blocks: BlockManager,
    pub(crate) seqs: HashMap<SeqId, Sequence>,
    /// FIFO; preempted sequences go back to the front.
    pub(crate) waiting: VecDeque<SeqId>,
    /// Admission order; preemption takes from the back.
    pub(crate) running: Vec<SeqId>,
    /// Lane slots no running sequence holds (`Sequence::lane_slot`).
    pub(crate) free_slots: Vec<u32>,
    num_preemptions_total: u64,
    prefix_cache_queried_tokens: u64,
    prefix_cache_hit_tokens: u64,
}

impl Scheduler {
    /// An idle scheduler with every block free. Panics on a config that `validate` refuses.
    pub fn new(config: SchedulerConfig) -> Self {
        Self::with_hasher(config, hash_block)
    }

    pub(crate) fn with_hasher(config: SchedulerConfig, hasher: BlockHasher) -> Self {
        if let Err(e) = config.validate() {
            panic!("invalid scheduler config: {e}");
        }
        let blocks = BlockManager::new(config.num_blocks, config.block_size, config.enable_prefix_cache, hasher);
        let free_slots = (0..config.max_lanes as u32).rev().collect();
        Scheduler {
            config,
            blocks,
            seqs: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            free_slots,
            num_preemptions_total: 0,
            prefix_cache_queried_tokens: 0,
            prefix_cache_hit_tokens: 0,
        }
    }

    /// For a model with per-lane state: the prefix cache keeps snapshots of lane state at block
    /// boundaries as `snapshots` says, and a hit resumes only from one (`PlanItem::restore`).
    /// Steps then name the snapshots to take (`PlanItem::snapshots`). Call before any request
    /// is added; without it (and with the prefix cache on) a hit assumes the blocks hold all the
    /// model's memory.
    pub fn with_state_snapshots(mut self, snapshots: StateSnapshots) -> Self {
        assert!(self.seqs.is_empty(), "snapshots are configured before requests arrive");
        self.blocks.snapshots = Some(SnapshotPool::new(snapshots, self.config.num_blocks));
        self
    }

    /// The limits it was built with.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// The longest sequence (prompt + max_tokens) `add` accepts:
    /// min(max_model_len, num_blocks · block_size).
    pub fn max_len(&self) -> usize {
        self.config.max_model_len.min(self.config.num_blocks.saturating_mul(self.config.block_size))
    }

    /// Queues a sequence after checking it can ever run; a refused one leaves no trace.
    pub fn add(&mut self, mut seq: Sequence) -> Result<(), RequestError> {
        let (prompt_len, max_tokens) = (seq.prompt_len(), seq.max_tokens);
        if prompt_len == 0 {
            return Err(RequestError::EmptyPrompt);
        }
        if max_tokens == 0 {
            return Err(RequestError::ZeroMaxTokens);
        }
        let max_len = self.max_len();
        if prompt_len.checked_add(max_tokens).is_none_or(|total| total > max_len) {
            return Err(RequestError::TooLong { prompt_len, max_tokens, max_len });
        }
        if self.seqs.contains_key(&seq.id) {
            return Err(RequestError::DuplicateId { id: seq.id });
        }
        if self.waiting.len() >= self.config.max_waiting {
            return Err(RequestError::QueueFull { limit: self.config.max_waiting });
        }
        // A clone of a scheduled sequence carries bookkeeping that is not its own.
        seq.num_computed_tokens = 0;
        seq.block_table.clear();
        seq.block_hashes.clear();
        seq.prefix_ids.clear();
        seq.pending_snapshots.clear();
        seq.lane_slot = None;
        seq.status = Status::Waiting;
        self.waiting.push_back(seq.id);
        self.seqs.insert(seq.id, seq);
        Ok(())
    }

    /// Whether any sequence is waiting or running.
    pub fn has_work(&self) -> bool {
        !self.seqs.is_empty()
    }

    /// A waiting or running sequence.
    pub fn get(&self, id: SeqId) -> Option<&Sequence> {
        self.seqs.get(&id)
    }

    /// Running sequences whose next step decodes (samples their next token), oldest first: the
    /// lanes a proposer may draft for before `schedule_with_drafts`.
    pub fn decoding(&self) -> impl Iterator<Item = &Sequence> + '_ {
        self.running.iter().map(|id| &self.seqs[id]).filter(|seq| seq.is_decoding())
    }

    /// Plans the next step: running sequences in decode (one row each, oldest first), then
    /// running sequences in prefill (chunks up to the remaining budget), then waiting ones in
    /// FIFO order while a lane, the budget and free blocks allow. A running sequence that needs
    /// a block when none is free preempts the most recently admitted one (maybe itself); a
    /// step that preempted admits nobody.
    pub fn schedule(&mut self) -> StepPlan {
        self.schedule_with_drafts(|_, _| Vec::new())
    }

    /// `schedule`, where each decoding sequence may also verify drafts: `propose(seq, max)` gives
    /// up to `max` tokens guessed to follow `seq`'s tokens. `max` leaves a row of the budget for
    /// every decode after this one and stops short of `max_tokens`; drafts take only free blocks,
    /// leaving one for each later decode, and are dropped when
    /// those are short.
    pub fn schedule_with_drafts(&mut self, mut propose: impl FnMut(&Sequence, usize) -> Vec<u32>) -> StepPlan {
        let mut plan = StepPlan::default();
        let mut budget = self.config.max_batch_tokens;
        let seqs = &self.seqs;
        let mut num_decodes_left = self.running.iter().filter(|id| seqs[*id].is_decoding()).count();
        for decode in [true, false] {
            // Preemption only removes from the back, so indices below `i` stay valid.
            let mut i = 0;
            while i < self.running.len() && budget > 0 {
                let id = self.running[i];
                i += 1;
                let seq = &self.seqs[&id];
                if seq.is_decoding() != decode {
                    continue;
                }
                let remaining = seq.tokens().len() - seq.num_computed_tokens;
                let (start, end) = (seq.num_computed_tokens, seq.num_computed_tokens + remaining.min(budget));
                let mut drafts = Vec::new();
                if decode {
                    num_decodes_left -= 1;
                    let to_emit = seq.max_tokens - seq.num_generated();
                    let max = (to_emit - 1).min(budget.saturating_sub(1 + num_decodes_left));
                    if max > 0 {
                        drafts = propose(seq, max);
                        drafts.truncate(max);
                        let seq = self.seqs.get_mut(&id).expect("running sequences are known");
                        // Each later decode may need one new block: drafts leave them that many.
                        let spare = self.blocks.num_free().saturating_sub(num_decodes_left);
                        let fits = self.blocks.num_needed(seq, end + drafts.len()) <= spare;
                        if drafts.is_empty() || !fits || !self.blocks.grow(seq, end + drafts.len()) {
                            drafts.clear();
                        }
                    }
                }
                if self.grow_or_preempt(id, end, &mut plan, &mut budget) {
                    budget -= end - start + drafts.len();
                    let sample = end == start + remaining;
                    let seq = self.seqs.get_mut(&id).expect("running sequences are known");
                    let snapshots = self.blocks.plan_snapshots(seq, start, end);
                    plan.items.push(PlanItem { seq_id: id, start, end, sample, drafts, restore: None, snapshots });
                }
            }
        }
        if plan.preempted.is_empty() {
            self.admit(&mut plan, &mut budget);
        }
        plan
    }

    /// Makes `id`'s table cover 0..end, preempting from the back of `running` until it can.
    /// `false` when `id` itself was preempted.
    fn grow_or_preempt(&mut self, id: SeqId, end: usize, plan: &mut StepPlan, budget: &mut usize) -> bool {
        loop {
            let seq = self.seqs.get_mut(&id).expect("running sequences are known");
            if self.blocks.grow(seq, end) {
                return true;
            }
            let victim = self.running.pop().expect("the requester is running");
            self.preempt(victim, plan, budget);
            if victim == id {
                return false;
            }
        }
    }

    /// Releases a running sequence's blocks and puts it at the front of the waiting queue; an
    /// item already planned for it this step is dropped and its tokens return to the budget
    /// (a safety net: with decodes first and FIFO admission, a sequence in prefill is never
    /// older than a decoding one, so victims are not planned yet).
    fn preempt(&mut self, id: SeqId, plan: &mut StepPlan, budget: &mut usize) {
        if let Some(i) = plan.items.iter().position(|item| item.seq_id == id) {
            let item = plan.items.remove(i);
            *budget += item.num_rows();
        }
        let seq = self.seqs.get_mut(&id).expect("running sequences are known");
        self.blocks.release(seq);
        self.free_slots.extend(seq.lane_slot.take());
        seq.status = Status::Waiting;
        self.waiting.push_front(id);
        plan.preempted.push(id);
        self.num_preemptions_total += 1;
    }

    /// Admits waiting sequences in FIFO order, each starting from its prefix-cache hit.
    fn admit(&mut self, plan: &mut StepPlan, budget: &mut usize) {
        while *budget > 0 && self.running.len() < self.config.max_lanes {
            let Some(&id) = self.waiting.front() else { break };
            let seq = self.seqs.get_mut(&id).expect("waiting sequences are known");
            let hit = self.blocks.lookup(seq);
            let len = seq.tokens().len();
            let start = hit.num_blocks() * self.config.block_size;
            let end = start + (len - start).min(*budget);
            if !self.blocks.can_admit(&hit, end) {
                break;
            }
            if self.config.enable_prefix_cache {
                self.prefix_cache_queried_tokens += len as u64;
                self.prefix_cache_hit_tokens += start as u64;
            }
            let restore = self.blocks.admit(seq, hit, end);
            let snapshots = self.blocks.plan_snapshots(seq, start, end);
            seq.lane_slot = Some(self.free_slots.pop().expect("fewer than max_lanes run, so a slot is free"));
            seq.status = Status::Running;
            self.waiting.pop_front();
            self.running.push(id);
            *budget -= end - start;
            let sample = end == len;
            plan.items.push(PlanItem { seq_id: id, start, end, sample, drafts: Vec::new(), restore, snapshots });
        }
    }

    /// Records the step: computed tokens advance, newly full blocks enter the prefix cache,
    /// sampled tokens append, finished sequences release their blocks. `sampled` holds one
    /// token per plan item with `sample` set, in order. Items of sequences aborted since
    /// `schedule` are skipped.
    pub fn update(&mut self, plan: &StepPlan, sampled: &[u32]) -> Vec<SeqUpdate> {
        let kept: Vec<Vec<u32>> = sampled.iter().map(|&t| vec![t]).collect();
        self.update_verified(plan, &kept)
    }

    /// `update` for a plan with drafts: `kept` holds, per sampling item in order, the tokens it
    /// keeps — its accepted drafts then the first sample that differs from a draft (or the
    /// sample after the last draft), so between 1 and `1 + drafts.len()` tokens. They append
    /// one by one, and a token that finishes the sequence (a stop id, `max_tokens`) drops those
    /// after it, exactly as if each had come from a step of its own. Rollback: computed tokens
    /// end just before the last kept token (the verify rows of rejected drafts are forgotten,
    /// their slots overwritten later), and blocks past the new length return to the pool.
    /// Prefix-cache blocks register only from kept tokens, so a rejected draft never enters it.
    pub fn update_verified(&mut self, plan: &StepPlan, kept: &[Vec<u32>]) -> Vec<SeqUpdate> {
        let num_samples = plan.items.iter().filter(|item| item.sample).count();
        assert_eq!(kept.len(), num_samples, "one list of kept tokens per sampling plan item");
        let mut kept_iter = kept.iter();
        let mut updates = Vec::with_capacity(num_samples);
        for item in &plan.items {
            let tokens = if item.sample { &kept_iter.next().expect("counted above")[..] } else { &[] };
            assert!(
                !item.sample || (1..=item.num_samples()).contains(&tokens.len()),
                "{} kept tokens for an item with {} drafts",
                tokens.len(),
                item.drafts.len()
            );
            assert!(
                tokens.iter().zip(&item.drafts).take(tokens.len().saturating_sub(1)).all(|(t, d)| t == d),
                "only the last kept token may differ from its draft"
            );
            let Some(seq) = self.seqs.get_mut(&item.seq_id) else { continue };
            assert!(
                seq.status == Status::Running && seq.num_computed_tokens == item.start,
                "update with a plan that is not the last schedule() (sequence {:?})",
                item.seq_id
            );
            debug_assert!(seq.block_table.len() * self.config.block_size >= item.end + item.drafts.len());
            let mut num_pushed = 0usize;
            for &token in tokens {
                seq.push_token(token);
                num_pushed += 1;
                let finished = seq.finish_reason(token);
                updates.push(SeqUpdate { seq_id: item.seq_id, token, finished });
                if finished.is_some() {
                    break;
                }
            }
            // The rows before the last kept token hold its prefix's K/V; that token's own row
            // is the next step's.
            seq.num_computed_tokens = item.end + num_pushed.saturating_sub(1);
            self.blocks.shrink(seq);
            self.blocks.register_full_blocks(seq);
        }
        let mut any_finished = false;
        for u in updates.iter().filter(|u| u.finished.is_some()) {
            let mut seq = self.seqs.remove(&u.seq_id).expect("updated sequences are known");
            self.blocks.release(&mut seq);
            self.free_slots.extend(seq.lane_slot.take());
            any_finished = true;
        }
        if any_finished {
            let seqs = &self.seqs;
            self.running.retain(|id| seqs.contains_key(id));
        }
        #[cfg(debug_assertions)]
        if let Err(e) = self.check_integrity() {
            panic!("scheduler integrity: {e}");
        }
        updates
    }

    /// Removes a waiting, running or preempted sequence and releases its blocks. `false` when
    /// the id is unknown (finished or never added).
    pub fn abort(&mut self, id: SeqId) -> bool {
        let Some(mut seq) = self.seqs.remove(&id) else { return false };
        match seq.status {
            Status::Running => self.running.retain(|&r| r != id),
            Status::Waiting => self.waiting.retain(|&w| w != id),
        }
        self.blocks.release(&mut seq);
        self.free_slots.extend(seq.lane_slot.take());
        true
    }

    /// Blocks with no reference (including cached blocks that may be evicted).
    pub fn num_free_blocks(&self) -> usize {
        self.blocks.num_free()
    }

    /// `num_blocks` scratch blocks from the pool (evicting cached blocks if needed), e.g. for
    /// scoring a whole sequence, or `None` with nothing taken. While blocks are reserved the
    /// running sequences have fewer: reserve and unreserve between steps.
    pub fn reserve(&mut self, num_blocks: usize) -> Option<Vec<u32>> {
        self.blocks.reserve(num_blocks)
    }

    /// Returns blocks from `reserve`. Panics on a block that is not reserved.
    pub fn unreserve(&mut self, blocks: &[u32]) {
        self.blocks.unreserve(blocks);
    }

    /// Counters for metrics.
    pub fn stats(&self) -> SchedulerStats {
        let num_blocks = self.config.num_blocks;
        SchedulerStats {
            num_waiting: self.waiting.len(),
            num_running: self.running.len(),
            num_preemptions_total: self.num_preemptions_total,
            num_blocks,
            num_blocks_in_use: num_blocks - self.blocks.num_free(),
            num_blocks_cached: self.blocks.cache.num_cached(),
            prefix_cache_queried_tokens: self.prefix_cache_queried_tokens,
            prefix_cache_hit_tokens: self.prefix_cache_hit_tokens,
            num_state_snapshots_cached: self.blocks.snapshots.as_ref().map_or(0, |s| s.num_attached()),
            num_state_snapshots_taken: self.blocks.snapshots.as_ref().map_or(0, |s| s.num_taken),
        }
    }
}

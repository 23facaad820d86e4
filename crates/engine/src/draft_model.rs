//! A draft model: a smaller checkpoint that shares the target's tokenizer guesses each lane's
//! next tokens. It runs on the engine's own backend, in lanes of its own (its own paged KV cache,
//! one block table per target lane), all lanes of a step batched into each of its forward passes.
//!
//! Its KV follows the target's accepted tokens without being told which were accepted: a lane
//! remembers the tokens whose K/V it holds (`fed`), and each step keeps only the longest prefix
//! those share with the target lane's tokens; the rest (rejected drafts) is overwritten. Drafts
//! are sampled with the request's own sampler and position-keyed noise, so a draft model that
//! agrees with the target proposes exactly the target's samples, at any temperature.

use crate::draft::{DraftQuery, Proposer};
use plumb_core::{ForwardBatch, FullBackend, LaneView, Shape};
use plumb_models::CausalLm;
use plumb_scheduler::SeqId;
use std::collections::{HashMap, HashSet};

/// How a draft model drafts and the room it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DraftModelConfig {
    /// Most drafts per step and lane.
    pub k: usize,
    /// KV positions per block of the draft model's cache.
    pub block_size: usize,
    /// Blocks in the draft model's cache, shared by its lanes (a lane that finds none drafts
    /// nothing that step).
    pub num_blocks: usize,
    /// Most rows in one forward pass of the draft model (long prompts catch up in chunks).
    pub max_batch_tokens: usize,
}

/// Why a draft model cannot draft for a target.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DraftModelError {
    #[error("the draft model's vocabulary has {draft} tokens, the target's {target}: they must share a tokenizer")]
    VocabMismatch { draft: usize, target: usize },
    #[error("a draft model needs k in 1..=16 drafts per step (got {0})")]
    BadK(usize),
    #[error("the draft model's cache needs at least one block of at least one position")]
    NoRoom,
    #[error(
        "the draft model keeps per-lane recurrent state (linear attention), which cannot take back rejected drafts"
    )]
    LaneState,
}

/// Drafts with a model. See the module documentation.
#[allow(missing_debug_implementations)]
pub struct ModelProposer<B: FullBackend> {
    model: Box<dyn CausalLm<B>>,
    kv: B::KvCache,
    config: DraftModelConfig,
    free: Vec<u32>,
    lanes: HashMap<SeqId, DraftLane>,
}

/// A draft lane: the tokens whose K/V its blocks hold, position by position.
#[derive(Debug, Default)]
struct DraftLane {
    fed: Vec<u32>,
    blocks: Vec<u32>,
}

/// A lane being drafted this call.
struct Work {
    query: usize,
    /// The lane's tokens then its drafts so far (the sampler's history).
    history: Vec<u32>,
    /// First position not yet fed to the draft model.
    next: usize,
    k: usize,
}

impl<B: FullBackend> ModelProposer<B> {
    /// A draft model for a target with `target_vocab` tokens, its cache allocated on `backend`.
    pub fn new(
        backend: &B,
        model: Box<dyn CausalLm<B>>,
        target_vocab: usize,
        config: DraftModelConfig,
    ) -> Result<Self, DraftModelError> {
        let draft = model.config().vocab_size;
        if draft != target_vocab {
            return Err(DraftModelError::VocabMismatch { draft, target: target_vocab });
        }
        if !(1..=16).contains(&config.k) {
            return Err(DraftModelError::BadK(config.k));
        }
        if model.kv_spec_for_lanes(1, 1, 1).lane_state.num_layers > 0 {
            return Err(DraftModelError::LaneState);
        }
        if config.num_blocks == 0 || config.block_size == 0 || config.max_batch_tokens == 0 {
            return Err(DraftModelError::NoRoom);
        }
        let kv = backend.new_kv_cache(&model.kv_spec(config.block_size, config.num_blocks));
        let free = (0..config.num_blocks as u32).rev().collect();
        Ok(ModelProposer { model, kv, config, free, lanes: HashMap::new() })
    }

    /// Makes `id`'s lane cover `positions` positions, taking blocks from lanes not drafting now
    /// (finished lanes are released by the engine; these are preempted or idle) when short.
    fn grow(&mut self, id: SeqId, positions: usize, drafting: &HashSet<SeqId>) -> bool {
        let needed = positions.div_ceil(self.config.block_size);
        let have = self.lanes.get(&id).map_or(0, |l| l.blocks.len());
        if needed > self.config.num_blocks {
            return false;
        }
        while self.free.len() + have < needed {
            let Some(&idle) = self.lanes.keys().find(|other| !drafting.contains(other)) else { return false };
            self.release_lane(idle);
        }
        let lane = self.lanes.entry(id).or_default();
        while lane.blocks.len() < needed {
            lane.blocks.push(self.free.pop().expect("counted above"));
        }
        true
    }

    fn release_lane(&mut self, id: SeqId) {
        if let Some(lane) = self.lanes.remove(&id) {
            self.free.extend(lane.blocks);
        }
    }

    /// One forward pass over `rows` (lane, token, position); logits of the rows flagged, in order.
    fn forward(
        &mut self,
        backend: &B,
        work: &[Work],
        rows: &[(usize, u32, usize, bool)],
        queries: &[DraftQuery<'_>],
    ) -> Vec<Vec<f32>> {
        let mut batch = ForwardBatch { block_size: self.config.block_size, ..ForwardBatch::default() };
        let mut lane_of = HashMap::new();
        for &(w, token, position, want) in rows {
            let lane = *lane_of.entry(w).or_insert_with(|| {
                let table = self.lanes[&queries[work[w].query].seq_id].blocks.clone();
                batch.lanes.push(LaneView { block_table: table });
                batch.lanes.len() - 1
            });
            batch.push_row(lane, token, position);
            if want {
                batch.logits_rows.push(batch.num_rows() as u32 - 1);
            }
        }
        if let Err(e) = batch.validate() {
            panic!("the draft model built an invalid batch (a bug): {e}");
        }
        let logits = self.model.forward(backend, &batch, &mut self.kv, None);
        let vocab = logits.cols();
        backend.download(&logits).chunks_exact(vocab).map(<[f32]>::to_vec).collect()
    }
}

impl<B: FullBackend> Proposer<B> for ModelProposer<B> {
    fn propose(&mut self, backend: &B, queries: &[DraftQuery<'_>]) -> Vec<Vec<u32>> {
        let mut drafts = vec![Vec::new(); queries.len()];
        let drafting: HashSet<SeqId> = queries.iter().map(|q| q.seq_id).collect();
        let mut work = Vec::new();
        for (i, q) in queries.iter().enumerate() {
            let k = self.config.k.min(q.max_drafts);
            if k == 0 || q.tokens.is_empty() {
                continue;
            }
            // K/V of the last token is always recomputed: its logits give the first draft.
            let lane = self.lanes.entry(q.seq_id).or_default();
            let common = common_prefix(&lane.fed, q.tokens).min(q.tokens.len() - 1);
            lane.fed.truncate(common);
            // Drafts 1..k-1 are fed too (the last draft is not): positions up to len + k - 2.
            if self.grow(q.seq_id, q.tokens.len() + k - 1, &drafting) {
                work.push(Work { query: i, history: q.tokens.to_vec(), next: common, k });
            }
        }
        // Catch up on the tokens the lanes gained since they last drafted, in chunks; each lane's
        // last token gives the logits of its first draft.
        while work.iter().any(|w| w.next < queries[w.query].tokens.len()) {
            let mut rows = Vec::new();
            let mut budget = self.config.max_batch_tokens;
            let mut sampled = Vec::new();
            for (w, lane) in work.iter_mut().enumerate() {
                let len = queries[lane.query].tokens.len();
                let take = (len - lane.next).min(budget);
                for pos in lane.next..lane.next + take {
                    let last = pos + 1 == len;
                    rows.push((w, lane.history[pos], pos, last));
                    if last {
                        sampled.push(w);
                    }
                }
                lane.next += take;
                budget -= take;
            }
            let logits = self.forward(backend, &work, &rows, queries);
            for (w, row) in sampled.into_iter().zip(&logits) {
                draw(&mut work[w], row, queries);
            }
        }
        // Then one row per lane and round: each draft gives the logits of the next.
        for round in 1..work.iter().map(|w| w.k).max().unwrap_or(0) {
            let rows: Vec<_> = (0..work.len())
                .filter(|&w| work[w].k > round)
                .map(|w| (w, *work[w].history.last().expect("drafted"), work[w].history.len() - 1, true))
                .collect();
            let logits = self.forward(backend, &work, &rows, queries);
            for (&(w, ..), row) in rows.iter().zip(&logits) {
                draw(&mut work[w], row, queries);
            }
        }
        for w in work {
            let q = &queries[w.query];
            let lane = self.lanes.get_mut(&q.seq_id).expect("grown above");
            // Fed: the tokens, then every draft but the last.
            lane.fed = w.history[..w.history.len() - 1].to_vec();
            drafts[w.query] = w.history[q.tokens.len()..].to_vec();
        }
        drafts
    }

    fn release(&mut self, seq_id: SeqId) {
        self.release_lane(seq_id);
    }
}

/// Samples the lane's next draft from `row` as the target's sampler would at that position.
fn draw(work: &mut Work, row: &[f32], queries: &[DraftQuery<'_>]) {
    let q = &queries[work.query];
    let position = work.history.len() as u64;
    let token = plumb_sampling::sample(row, q.params, &work.history, q.prompt_len, position);
    work.history.push(token);
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

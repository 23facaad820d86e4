//! Speculative drafts: the `Proposer` interface, the n-gram (prompt lookup) proposer, and the
//! counters a drafting engine reports. A proposer only guesses; whether a guess is kept is decided
//! by the sampler against the model's own samples (`plumb_sampling::sample_drafted`), so no
//! proposer, however wrong, can change what a request produces — only how fast.

use plumb_core::Backend;
use plumb_sampling::SamplingParams;
use plumb_scheduler::SeqId;
use std::collections::HashMap;

/// One lane asking for drafts: its tokens so far (prompt, then output, of which the first
/// `prompt_len` are the prompt), how its answer is sampled, and the most drafts it can verify.
#[derive(Clone, Copy, Debug)]
pub struct DraftQuery<'a> {
    pub seq_id: SeqId,
    pub tokens: &'a [u32],
    pub prompt_len: usize,
    pub params: &'a SamplingParams,
    pub max_drafts: usize,
}

/// Guesses the tokens that follow each lane's tokens. The engine asks once per step for every
/// decoding lane whose request allows drafts (all of them in one call, so a drafter that runs a
/// model batches them), then reports how many guesses each lane kept. Model-native drafters (a
/// draft model's own lanes, MTP heads) implement the same three calls on the engine's backend;
/// they keep whatever per-lane state they need, keyed by `SeqId`, and drop it in `release`.
pub trait Proposer<B: Backend>: Send {
    /// Up to `max_drafts` tokens per query, in query order. Fewer, or none, is always fine; the
    /// engine may also verify fewer than were proposed (the step's budget or free blocks).
    fn propose(&mut self, backend: &B, queries: &[DraftQuery<'_>]) -> Vec<Vec<u32>>;
    /// After verification: `num_accepted` of the `num_proposed` drafts were kept.
    fn observe(&mut self, seq_id: SeqId, num_proposed: usize, num_accepted: usize) {
        let _ = (seq_id, num_proposed, num_accepted);
    }
    /// The request finished or was aborted.
    fn release(&mut self, seq_id: SeqId) {
        let _ = seq_id;
    }
}

/// Counters since the engine started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DraftStats {
    /// Lane-steps that verified at least one draft.
    pub num_verify_steps: u64,
    /// Draft tokens verified.
    pub num_draft_tokens: u64,
    /// Of those, drafts accepted (equal to the model's own sample).
    pub num_accepted_tokens: u64,
    /// Tokens kept by verify lane-steps: accepted drafts plus one sample each.
    pub num_emitted_tokens: u64,
}

impl DraftStats {
    /// Accepted drafts / verified drafts (0 when none were verified).
    pub fn acceptance_rate(&self) -> f64 {
        ratio(self.num_accepted_tokens, self.num_draft_tokens)
    }

    /// The counts added since `earlier` (a snapshot of the same counters).
    pub fn since(&self, earlier: &DraftStats) -> DraftStats {
        DraftStats {
            num_verify_steps: self.num_verify_steps - earlier.num_verify_steps,
            num_draft_tokens: self.num_draft_tokens - earlier.num_draft_tokens,
            num_accepted_tokens: self.num_accepted_tokens - earlier.num_accepted_tokens,
            num_emitted_tokens: self.num_emitted_tokens - earlier.num_emitted_tokens,
        }
    }

    /// Tokens a lane keeps per verify step (1 would be no gain over plain decoding).
    pub fn tokens_per_verify_step(&self) -> f64 {
        ratio(self.num_emitted_tokens, self.num_verify_steps)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// Settings of the n-gram proposer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NgramConfig {
    /// Most drafts per step.
    pub k: usize,
    /// Length of the suffix matched against the lane's earlier tokens.
    pub n: usize,
}

impl Default for NgramConfig {
    fn default() -> Self {
        NgramConfig { k: 4, n: 3 }
    }
}

/// Prompt lookup: finds the latest earlier occurrence of the lane's last `n` tokens in its
/// prompt and output and proposes the (up to `k`) tokens that followed it. A verify step costs
/// more than a plain decode (on the CPU a few rows cost about as much as two or three single
/// steps), so it only pays when at least two drafts are kept: it proposes no fewer than two, and
/// a lane whose verify step kept fewer than two rests 2, 4, … up to 32 steps before drafting
/// again, so free-form text, where lookups rarely continue, pays little for failed verify rows.
#[derive(Debug, Default)]
pub struct NgramProposer {
    config: NgramConfig,
    lanes: HashMap<SeqId, Backoff>,
}

#[derive(Debug, Default)]
struct Backoff {
    num_misses: u32,
    rest: u32,
}

const MAX_REST: u32 = 32;
/// Fewest drafts worth a verify step, and fewest accepted for it to count as paid off.
const MIN_DRAFTS: usize = 2;

impl NgramProposer {
    pub fn new(config: NgramConfig) -> Self {
        NgramProposer { config, lanes: HashMap::new() }
    }
}

impl NgramProposer {
    /// Drafts for one lane (`propose` asks this of each).
    fn propose_lane(&mut self, seq_id: SeqId, tokens: &[u32], max_drafts: usize) -> Vec<u32> {
        let lane = self.lanes.entry(seq_id).or_default();
        if lane.rest > 0 {
            lane.rest -= 1;
            return Vec::new();
        }
        let drafts = lookup(tokens, self.config.n, self.config.k.min(max_drafts));
        if drafts.len() < MIN_DRAFTS.min(self.config.k) { Vec::new() } else { drafts }
    }
}

impl<B: Backend> Proposer<B> for NgramProposer {
    fn propose(&mut self, _backend: &B, queries: &[DraftQuery<'_>]) -> Vec<Vec<u32>> {
        queries.iter().map(|q| self.propose_lane(q.seq_id, q.tokens, q.max_drafts)).collect()
    }

    fn observe(&mut self, seq_id: SeqId, num_proposed: usize, num_accepted: usize) {
        let Some(lane) = self.lanes.get_mut(&seq_id) else { return };
        if num_accepted >= MIN_DRAFTS.min(num_proposed) {
            lane.num_misses = 0;
        } else {
            lane.num_misses += 1;
            lane.rest = (1u32 << lane.num_misses.min(5)).min(MAX_REST);
        }
    }

    fn release(&mut self, seq_id: SeqId) {
        self.lanes.remove(&seq_id);
    }
}

/// Up to `k` tokens that followed the latest earlier occurrence of the last `n` tokens.
fn lookup(tokens: &[u32], n: usize, k: usize) -> Vec<u32> {
    let len = tokens.len();
    if n == 0 || k == 0 || len <= n {
        return Vec::new();
    }
    let suffix = &tokens[len - n..];
    // Latest match first: recent text predicts the continuation best (a copy in progress).
    (0..len - n)
        .rev()
        .find(|&start| &tokens[start..start + n] == suffix)
        .map(|start| tokens[start + n..(start + n + k).min(len)].to_vec())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    type Cpu = plumb_backend_cpu::CpuBackend;

    #[test]
    fn lookup_continues_the_latest_match() {
        let t = [1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3];
        assert_eq!(lookup(&t, 3, 2), [7, 8]);
        assert_eq!(lookup(&t, 3, 9), [7, 8, 5, 1, 2, 3]);
        assert_eq!(lookup(&t, 2, 3), [7, 8, 5], "the latest of two earlier matches");
        assert!(lookup(&t, 4, 3).is_empty(), "5 1 2 3 occurs only at the end");
        assert!(lookup(&[4, 5, 6], 3, 4).is_empty());
        assert!(lookup(&t, 3, 0).is_empty());
    }

    #[test]
    fn a_lane_that_keeps_missing_rests_longer_and_longer() {
        let mut p = NgramProposer::new(NgramConfig { k: 4, n: 1 });
        let (id, t) = (SeqId(1), [5, 6, 7, 5]);
        assert_eq!(p.propose_lane(id, &t, 8), [6, 7, 5]);
        assert!(p.propose_lane(id, &t, 1).is_empty(), "one draft is not worth a verify step");
        Proposer::<Cpu>::observe(&mut p, id, 3, 1);
        assert_eq!((0..2).filter(|_| p.propose_lane(id, &t, 8).is_empty()).count(), 2, "rests 2 steps");
        assert_eq!(p.propose_lane(id, &t, 8), [6, 7, 5]);
        Proposer::<Cpu>::observe(&mut p, id, 3, 0);
        assert_eq!((0..4).filter(|_| p.propose_lane(id, &t, 8).is_empty()).count(), 4, "a second miss rests 4");
        assert_eq!(p.propose_lane(id, &t, 8), [6, 7, 5]);
        Proposer::<Cpu>::observe(&mut p, id, 3, 2);
        assert_eq!(p.propose_lane(id, &t, 8), [6, 7, 5], "two kept: no rest");
        Proposer::<Cpu>::observe(&mut p, id, 3, 0);
        assert!(p.propose_lane(id, &t, 8).is_empty(), "the count started over: rests 2");
        Proposer::<Cpu>::release(&mut p, id);
        assert_eq!(p.propose_lane(id, &t, 8), [6, 7, 5]);
    }
}

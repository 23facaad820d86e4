//! Property tests: random workloads (shared prefixes, follow-up turns, stop tokens, aborts at
//! any point) on a small pool with many lanes, run by a fake engine whose "KV" at a position is
//! the hash of the tokens up to it. Every step: integrity holds, a plan is valid and non-empty
//! while there is work, every row reads correct KV through its block table (so prefix-cache
//! hits and recomputes after preemption are exact) and writes only blocks it owns alone.
//! Every request finishes with the tokens it would have produced alone, and then every block
//! is free. With drafts on, a fake proposer guesses right, wrong or partly right; verify rows
//! write the KV of their draft tokens (wrong KV for rejected ones), so any rejected row the
//! scheduler kept as computed, or any cached block holding one, fails the KV check.

use crate::prefix_cache::{BlockHasher, hash_block};
use crate::*;
use proptest::prelude::*;
use std::collections::HashMap;

const VOCAB: u32 = 6;

/// Buckets everything into four hashes: most lookups meet a colliding candidate.
fn weak_hash(parent: Option<u64>, tokens: &[u32], salt: u64) -> u64 {
    (parent.unwrap_or(salt) + tokens.iter().map(|&t| u64::from(t)).sum::<u64>()) % 4
}

fn kv_of(prev: u64, token: u32) -> u64 {
    hash_block(Some(prev), &[token], 0)
}

/// The fake model's next token from the KV of the last position.
fn next_token(id: SeqId, kv: u64) -> u32 {
    (hash_block(Some(kv), &[id.0 as u32], 1) % u64::from(VOCAB)) as u32
}

#[derive(Clone, Debug)]
enum Op {
    Add { prefix_len: usize, extra: Vec<u32>, max_tokens: usize, stop: Option<u32>, salt: u64, follow_up: bool },
    Step { abort_between: Option<usize> },
    Abort { idx: usize },
}

/// Ops with prompts of up to `max_prefix` shared tokens plus a few random ones; adds weigh
/// `add_weight` against 4 for steps.
fn op(max_prefix: usize, add_weight: u32) -> impl Strategy<Value = Op> {
    prop_oneof![
        add_weight => (0..max_prefix, prop::collection::vec(0..VOCAB, 0..6), 0usize..10, prop::option::of(0..VOCAB), 0u64..2, any::<bool>())
            .prop_map(|(prefix_len, extra, max_tokens, stop, salt, follow_up)| Op::Add {
                prefix_len, extra, max_tokens, stop, salt, follow_up
            }),
        4 => prop::option::weighted(0.1, 0usize..16).prop_map(|abort_between| Op::Step { abort_between }),
        1 => (0usize..16).prop_map(|idx| Op::Abort { idx }),
    ]
}

fn config() -> impl Strategy<Value = (SchedulerConfig, bool)> {
    (1usize..5, 2usize..20, 1usize..9, 1usize..13, 4usize..48, 1usize..8, any::<bool>(), any::<bool>()).prop_map(
        |(block_size, num_blocks, max_lanes, max_batch_tokens, max_model_len, max_waiting, prefix, weak)| {
            let c = SchedulerConfig {
                block_size,
                num_blocks,
                max_lanes,
                max_batch_tokens,
                max_model_len,
                max_waiting,
                enable_prefix_cache: prefix,
            };
            (c, weak)
        },
    )
}

/// What a request produces alone: sampling from the KV chain of its own tokens.
fn solo(id: SeqId, prompt: &[u32], max_tokens: usize, stop: &[u32]) -> Vec<u32> {
    let mut kv = 0;
    for &t in prompt {
        kv = kv_of(kv, t);
    }
    let mut out = Vec::new();
    loop {
        let t = next_token(id, kv);
        out.push(t);
        if stop.contains(&t) || out.len() == max_tokens {
            return out;
        }
        kv = kv_of(kv, t);
    }
}

struct Harness {
    s: Scheduler,
    /// [num_blocks][block_size]: the KV written at each slot.
    kv: Vec<Vec<Option<u64>>>,
    next_id: u64,
    /// Live requests: id → expected generated tokens.
    expected: HashMap<SeqId, Vec<u32>>,
    generated: HashMap<SeqId, Vec<u32>>,
    prompts: HashMap<SeqId, Vec<u32>>,
    max_tokens: HashMap<SeqId, usize>,
    /// Prompt + output of finished requests, for follow-up turns.
    finished: Vec<Vec<u32>>,
    /// Propose drafts from this generator state (None: no drafts).
    drafts: Option<u64>,
}

/// Up to `max` drafts for `seq`: its true continuation, cut short at random and sometimes
/// wrong from a random index on.
fn propose(rng: &mut u64, seq: &Sequence, max: usize) -> Vec<u32> {
    let mut next = || {
        *rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (*rng >> 33) as usize
    };
    let len = next() % (max + 1);
    let wrong_from = if next() % 2 == 0 { next() % (len + 1) } else { len };
    let mut kv = 0;
    for &t in seq.tokens() {
        kv = kv_of(kv, t);
    }
    let mut drafts = Vec::new();
    for i in 0..len {
        let t = if i >= wrong_from { (next() % VOCAB as usize) as u32 } else { next_token(seq.id, kv) };
        drafts.push(t);
        kv = kv_of(kv, t);
    }
    drafts
}

impl Harness {
    fn new(config: SchedulerConfig, hasher: BlockHasher) -> Self {
        let kv = vec![vec![None; config.block_size]; config.num_blocks];
        let s = Scheduler::with_hasher(config, hasher);
        Harness {
            s,
            kv,
            next_id: 0,
            expected: HashMap::new(),
            generated: HashMap::new(),
            prompts: HashMap::new(),
            max_tokens: HashMap::new(),
            finished: Vec::new(),
            drafts: None,
        }
    }

    fn add(&mut self, prompt: Vec<u32>, max_tokens: usize, stop: Option<u32>, salt: u64) {
        let id = SeqId(self.next_id);
        self.next_id += 1;
        let stop_ids: Vec<u32> = stop.into_iter().collect();
        let want = solo(id, &prompt, max_tokens.max(1), &stop_ids);
        let (prompt_len, max_len) = (prompt.len(), self.s.max_len());
        let num_waiting = self.s.stats().num_waiting;
        match self.s.add(Sequence::new(id, prompt.clone(), max_tokens, stop_ids).with_cache_salt(salt)) {
            Ok(()) => {
                assert!(prompt_len > 0 && max_tokens > 0 && prompt_len + max_tokens <= max_len);
                self.expected.insert(id, want);
                self.generated.insert(id, Vec::new());
                self.prompts.insert(id, prompt);
                self.max_tokens.insert(id, max_tokens);
            }
            Err(RequestError::EmptyPrompt) => assert_eq!(prompt_len, 0),
            Err(RequestError::ZeroMaxTokens) => assert_eq!(max_tokens, 0),
            Err(RequestError::TooLong { .. }) => assert!(prompt_len + max_tokens > max_len),
            Err(RequestError::QueueFull { limit }) => assert!(num_waiting >= limit, "preempted ones may exceed it"),
            Err(e) => panic!("unexpected {e}"),
        }
    }

    fn abort(&mut self, idx: usize) {
        let mut live: Vec<SeqId> = self.expected.keys().copied().collect();
        live.sort();
        if let Some(&id) = live.get(idx % live.len().max(1)) {
            assert!(self.s.abort(id));
            self.expected.remove(&id);
            self.generated.remove(&id);
            self.prompts.remove(&id);
            self.max_tokens.remove(&id);
            self.s.check_integrity().unwrap();
        }
    }

    fn slot(&self, table: &[u32], pos: usize) -> (usize, usize) {
        let bs = self.s.config().block_size;
        (table[pos / bs] as usize, pos % bs)
    }

    fn step(&mut self, abort_between: Option<usize>) {
        let had_work = self.s.has_work();
        let plan = match &mut self.drafts {
            Some(rng) => self.s.schedule_with_drafts(|seq, max| propose(rng, seq, max)),
            None => self.s.schedule(),
        };
        self.s.check_integrity().unwrap();
        assert_eq!(plan.items.is_empty(), !had_work, "a step with work plans something");
        let config = self.s.config().clone();
        let rows: usize = plan.items.iter().map(PlanItem::num_rows).sum();
        assert!(rows <= config.max_batch_tokens && plan.items.len() <= config.max_lanes);
        let mut sampled = Vec::new();
        for item in &plan.items {
            assert_eq!(plan.items.iter().filter(|i| i.seq_id == item.seq_id).count(), 1);
            let seq = self.s.get(item.seq_id).unwrap();
            let (tokens, table) = (seq.tokens().to_vec(), seq.block_table().to_vec());
            assert_eq!(seq.num_computed_tokens(), item.start);
            assert!(item.start < item.end && item.end <= tokens.len());
            assert!(table.len() * config.block_size >= item.end, "blocks cover 0..end");
            assert_eq!(item.sample, item.end == tokens.len());
            // Every earlier position holds its prefix's KV: cache hits and recomputes are exact.
            let mut kv = 0;
            for (pos, &t) in tokens[..item.start].iter().enumerate() {
                kv = kv_of(kv, t);
                let (b, o) = self.slot(&table, pos);
                assert_eq!(self.kv[b][o], Some(kv), "{:?} reads wrong KV at {pos}", item.seq_id);
            }
            for (pos, &t) in tokens.iter().enumerate().take(item.end).skip(item.start) {
                kv = kv_of(kv, t);
                let (b, o) = self.slot(&table, pos);
                assert_eq!(self.s.blocks.pool.ref_count(b as u32), 1, "writes only blocks it owns alone");
                self.kv[b][o] = Some(kv);
            }
            if !item.sample {
                assert!(item.drafts.is_empty(), "drafts only where a token is sampled");
                continue;
            }
            let to_emit = self.max_tokens[&item.seq_id] - (tokens.len() - self.prompts[&item.seq_id].len());
            assert!(item.drafts.len() < to_emit, "drafts stop short of max_tokens");
            assert!(table.len() * config.block_size >= item.end + item.drafts.len(), "blocks cover the drafts");
            // Verify rows: every draft's KV is written (a rejected one's is wrong for the
            // sequence), and each row samples as a decode of its own prefix would.
            let mut row_kv = vec![kv];
            for (j, &d) in item.drafts.iter().enumerate() {
                kv = kv_of(kv, d);
                let (b, o) = self.slot(&table, item.end + j);
                assert_eq!(self.s.blocks.pool.ref_count(b as u32), 1, "writes only blocks it owns alone");
                self.kv[b][o] = Some(kv);
                row_kv.push(kv);
            }
            let mut kept = Vec::new();
            for (j, &row) in row_kv.iter().enumerate() {
                let t = next_token(item.seq_id, row);
                kept.push(t);
                if item.drafts.get(j) != Some(&t) {
                    break;
                }
            }
            sampled.push(kept);
        }
        if let Some(idx) = abort_between {
            self.abort(idx);
        }
        for u in self.s.update_verified(&plan, &sampled) {
            let Some(out) = self.generated.get_mut(&u.seq_id) else { panic!("update for aborted {:?}", u.seq_id) };
            out.push(u.token);
            if let Some(reason) = u.finished {
                let want = self.expected.remove(&u.seq_id).unwrap();
                assert_eq!(*out, want, "{:?} differs from its solo run", u.seq_id);
                assert!(self.s.get(u.seq_id).is_none());
                assert!(reason == FinishReason::Stop || out.len() == self.max_tokens[&u.seq_id]);
                let mut tokens = self.prompts.remove(&u.seq_id).unwrap();
                tokens.extend(self.generated.remove(&u.seq_id).unwrap());
                self.finished.push(tokens);
            }
        }
        self.s.check_integrity().unwrap();
    }
}

fn base_prompt() -> Vec<u32> {
    (0..24u32).map(|i| (i * 5 + i / 3) % VOCAB).collect()
}

fn run(config: SchedulerConfig, weak: bool, ops: Vec<Op>, drafts: Option<u64>) {
    let mut h = Harness::new(config, if weak { weak_hash } else { hash_block });
    h.drafts = drafts;
    let base = base_prompt();
    for op in ops {
        match op {
            Op::Add { prefix_len, extra, max_tokens, stop, salt, follow_up } => {
                let mut prompt = match h.finished.last() {
                    Some(turn) if follow_up => turn.clone(),
                    _ => base[..prefix_len].to_vec(),
                };
                prompt.extend(extra);
                // Sometimes "until the context is full".
                let max_tokens = if max_tokens == 9 { h.s.max_len().saturating_sub(prompt.len()) } else { max_tokens };
                h.add(prompt, max_tokens, stop, salt);
            }
            Op::Step { abort_between } => h.step(abort_between),
            Op::Abort { idx } => h.abort(idx),
        }
    }
    let mut steps = 0;
    while h.s.has_work() {
        h.step(None);
        steps += 1;
        assert!(steps < 10_000, "requests did not finish");
    }
    assert!(h.expected.is_empty(), "every request finished");
    let st = h.s.stats();
    assert_eq!(h.s.num_free_blocks(), st.num_blocks);
    assert_eq!((st.num_running, st.num_waiting, st.num_blocks_in_use), (0, 0, 0));
}

/// Many lanes, a pool a few requests fill, a long queue: preemption all the time.
fn tight_config() -> impl Strategy<Value = (SchedulerConfig, bool)> {
    (1usize..4, 3usize..10, 4usize..17, 2usize..17, any::<bool>(), any::<bool>()).prop_map(
        |(block_size, num_blocks, max_lanes, max_batch_tokens, prefix, weak)| {
            let c = SchedulerConfig {
                block_size,
                num_blocks,
                max_lanes,
                max_batch_tokens,
                max_model_len: 64,
                max_waiting: 32,
                enable_prefix_cache: prefix,
            };
            (c, weak)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn random_workloads_finish_exactly_and_leak_nothing(
        (config, weak) in config(),
        ops in prop::collection::vec(op(14, 2), 1..60),
    ) {
        run(config, weak, ops, None);
    }

    #[test]
    fn drafted_workloads_finish_exactly_and_leak_nothing(
        (config, weak) in config(),
        ops in prop::collection::vec(op(14, 2), 1..60),
        seed in any::<u64>(),
    ) {
        run(config, weak, ops, Some(seed));
    }

    #[test]
    fn tight_pools_with_drafts_preempt_and_still_finish_exactly(
        (config, weak) in tight_config(),
        ops in prop::collection::vec(op(6, 6), 1..60),
        seed in any::<u64>(),
    ) {
        run(config, weak, ops, Some(seed));
    }

    #[test]
    fn tight_pools_preempt_and_still_finish_exactly(
        (config, weak) in tight_config(),
        ops in prop::collection::vec(op(6, 6), 1..60),
    ) {
        run(config, weak, ops, None);
    }
}

#[test]
fn many_lanes_on_a_tiny_pool_do_not_livelock() {
    let config = SchedulerConfig {
        block_size: 2,
        num_blocks: 6,
        max_lanes: 32,
        max_batch_tokens: 64,
        max_model_len: 12,
        max_waiting: 64,
        enable_prefix_cache: true,
    };
    let mut h = Harness::new(config, hash_block);
    for i in 0..40u32 {
        h.add(vec![i % VOCAB, (i / 2) % VOCAB, 1], 9, None, 0);
    }
    let mut steps = 0;
    while h.s.has_work() {
        h.step(None);
        steps += 1;
        assert!(steps < 2_000, "no progress after {steps} steps");
    }
    assert!(h.s.stats().num_preemptions_total > 0, "the pool was meant to be short");
    assert_eq!(h.s.num_free_blocks(), 6);
}

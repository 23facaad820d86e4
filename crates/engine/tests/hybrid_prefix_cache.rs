//! The prefix cache on a hybrid linear-attention model (the tiny Qwen3.5 of fixtures/qwen3_5):
//! a hit resumes each Gated DeltaNet layer from a snapshot of the lane state at the hit's last
//! block boundary, and the result is the same bits as computing fresh — a conversation's next
//! turn, prompts sharing a prefix that ended mid-chunk, snapshots evicted under pressure,
//! preemption, 8 requests at once. "Fresh" is a new engine per request, so nothing is cached.

#[path = "support/hybrid.rs"]
mod hybrid;

use hybrid::{BASE, Setup, Trace, engine, prompt, run};
use plumb_backend_cpu::CpuBackend;
use plumb_engine::{Engine, Request, StateSnapshots};
use plumb_models::CausalLm;
use plumb_sampling::SamplingParams;

fn greedy(p: Vec<u32>, max_tokens: usize) -> Request {
    Request::new(p, SamplingParams::greedy(), max_tokens, vec![])
}

fn sampled(p: Vec<u32>, max_tokens: usize, seed: u64) -> Request {
    Request::new(
        p,
        SamplingParams { temperature: 0.9, top_k: 40, seed, ..SamplingParams::default() },
        max_tokens,
        vec![],
    )
}

/// Each request alone on a new engine of `setup`: nothing to hit.
fn fresh(setup: &Setup, reqs: &[Request]) -> Vec<Trace> {
    reqs.iter().map(|r| run(&mut engine(setup), std::slice::from_ref(r), &[0]).remove(0)).collect()
}

fn every_block(num_snapshots: usize) -> Option<StateSnapshots> {
    Some(StateSnapshots { num_snapshots, every_blocks: 1 })
}

#[test]
fn a_second_turn_resumed_from_the_cache_equals_a_fresh_one() {
    // The resumed boundary is the first turn's last full block: with blocks of 16 it is the
    // end of its first 64-token prefill chunk; with blocks of 5 and 7 a decode step's (the
    // 70-token prompt ran in chunks of 13, or whole).
    for (block_size, max_batch_tokens) in [(16, 64), (5, 13), (7, 512)] {
        let setup = Setup { block_size, max_batch_tokens, ..BASE };
        let mut e = engine(&setup);
        assert!(e.scheduler_config().enable_prefix_cache, "a snapshot-exact model keeps the prefix cache");
        let first = prompt(70, 5);
        let one = run(&mut e, &[greedy(first.clone(), 9)], &[0]).remove(0);
        let mut second = first;
        second.extend(&one.0);
        second.extend(prompt(11, 6));
        let before = e.stats().prefix_cache_hit_tokens;
        let resumed = run(&mut e, &[greedy(second.clone(), 8)], &[0]).remove(0);
        let hit = (e.stats().prefix_cache_hit_tokens - before) as usize;
        // The first turn computed 70 + 8 tokens (its last sample never ran): the second resumes
        // at the last block boundary its decode reached.
        assert_eq!(hit, 78 / block_size * block_size, "block size {block_size}: resumed at the wrong boundary");
        assert!(hit > 0);
        assert!(
            resumed == fresh(&setup, &[greedy(second, 8)])[0],
            "block size {block_size}: turn 2 differs from fresh"
        );
    }
}

#[test]
fn a_prompt_sharing_a_prefix_resumes_at_a_block_boundary_inside_a_chunk() {
    // A 45-token shared prefix, blocks of 8: the first request prefills 45 + 20 tokens in one
    // chunk, so the boundary at 40 the second resumes from was inside that chunk.
    let shared = prompt(45, 7);
    let with = |tail: usize| [shared.clone(), prompt(20, tail)].concat();
    for (every_blocks, want_hit) in [(1, 40), (2, 32), (16, 0)] {
        let setup = Setup {
            block_size: 8,
            max_batch_tokens: 512,
            snapshots: Some(StateSnapshots { num_snapshots: 16, every_blocks }),
            ..BASE
        };
        let mut e = engine(&setup);
        let reqs = [sampled(with(1), 6, 1), greedy(with(2), 6)];
        let a = run(&mut e, &reqs[..1], &[0]).remove(0);
        let b = run(&mut e, &reqs[1..], &[0]).remove(0);
        assert_eq!(
            e.stats().prefix_cache_hit_tokens,
            want_hit,
            "snapshots every {every_blocks} blocks: the hit ends at the last snapshot inside the shared prefix"
        );
        assert!([a, b] == *fresh(&setup, &reqs), "every {every_blocks}: a request resumed mid-prefix differs");
    }
}

#[test]
fn snapshots_evicted_under_pressure_still_give_exact_results() {
    // Three snapshot slots and 40 blocks of 8 for 12 requests, in pairs sharing one of 3
    // prefixes, 4 lanes: snapshots and blocks are evicted all along, and every hit must still
    // be exact.
    let setup =
        Setup { block_size: 8, max_batch_tokens: 48, max_lanes: 4, num_blocks: 40, snapshots: every_block(3), ..BASE };
    let reqs: Vec<Request> = (0..12)
        .map(|i| {
            let k = (i / 2) % 3;
            let p = [prompt(30 + 9 * k, 40 + k), prompt(5 + i, 50 + i)].concat();
            if i % 2 == 0 { greedy(p, 7) } else { sampled(p, 7, i as u64) }
        })
        .collect();
    let mut e = engine(&setup);
    let arrive: Vec<usize> = (0..12).map(|i| i * 5 + i % 2).collect();
    let got = run(&mut e, &reqs, &arrive);
    let stats = e.stats();
    assert!(stats.prefix_cache_hit_tokens > 0, "the test must hit: {stats:?}");
    assert!(stats.num_state_snapshots_taken > 3 * 4, "the test must evict snapshots: {stats:?}");
    assert!(got == fresh(&setup, &reqs), "a request resumed under eviction pressure differs from fresh");
    assert_eq!(stats.num_blocks_in_use, 0);
}

#[test]
fn preempted_and_resumed_from_its_snapshot_equals_never_preempted() {
    let reqs: Vec<Request> = (0..4).map(|i| sampled(prompt(30 + 7 * i, 20 + i), 24, i as u64)).collect();
    // 10 blocks of 16 positions for four requests of 54-75 positions each: preemption is
    // certain; a preempted request finds its own blocks and snapshots in the cache.
    let setup = Setup { num_blocks: 10, max_lanes: 4, snapshots: every_block(8), ..BASE };
    let mut small = engine(&setup);
    let got = run(&mut small, &reqs, &[0, 0, 1, 2]);
    let stats = small.stats();
    assert!(stats.num_preemptions_total > 0, "the test must preempt: {stats:?}");
    assert!(stats.prefix_cache_hit_tokens > 0, "a preempted request must resume from the cache: {stats:?}");
    assert!(got == fresh(&setup, &reqs), "a preempted and resumed request differs from never preempted");
}

#[test]
fn eight_requests_sharing_prefixes_together_equal_each_alone() {
    let system = prompt(37, 60);
    let reqs: Vec<Request> = (0..8)
        .map(|i| {
            let p = [system.clone(), prompt(3 + 11 * (i % 4), 61 + i % 4), prompt(1 + i, 70 + i)].concat();
            if i % 2 == 0 { greedy(p, 5 + i) } else { sampled(p, 5 + i, i as u64) }
        })
        .collect();
    let setup = Setup { block_size: 8, max_batch_tokens: 40, snapshots: every_block(32), ..BASE };
    let mut e = engine(&setup);
    let arrive: Vec<usize> = (0..8).map(|i| (i * 3) % 5).collect();
    let got = run(&mut e, &reqs, &arrive);
    assert!(e.stats().prefix_cache_hit_tokens > 0, "{:?}", e.stats());
    assert!(got == fresh(&setup, &reqs), "8 requests sharing prefixes differ from each alone");
}

/// The fixture's model, declaring that its lane state cannot be snapshotted.
struct NoSnapshots(Box<dyn CausalLm<CpuBackend>>);

impl CausalLm<CpuBackend> for NoSnapshots {
    fn config(&self) -> &plumb_checkpoint::ModelConfig {
        self.0.config()
    }
    fn kv_spec_for_lanes(&self, block_size: usize, num_blocks: usize, num_lanes: usize) -> plumb_core::KvSpec {
        self.0.kv_spec_for_lanes(block_size, num_blocks, num_lanes)
    }
    fn forward(
        &self,
        b: &CpuBackend,
        batch: &plumb_core::ForwardBatch,
        kv: &mut plumb_backend_cpu::CpuKvCache,
        trace: Option<plumb_models::Trace<'_, CpuBackend>>,
    ) -> plumb_backend_cpu::CpuTensor {
        self.0.forward(b, batch, kv, trace)
    }
}

#[test]
fn without_snapshots_the_cache_is_bypassed_and_a_second_turn_equals_a_fresh_one() {
    let backend = CpuBackend::new(2);
    let undeclared = Box::new(NoSnapshots(hybrid::model(&backend)));
    let no_slots = StateSnapshots { num_snapshots: 0, every_blocks: 1 };
    let engines: [Engine<CpuBackend>; 2] = [
        Engine::new(backend, undeclared, hybrid::config(&BASE)),
        Engine::with_snapshots(CpuBackend::new(2), hybrid::model(&CpuBackend::new(2)), hybrid::config(&BASE), no_slots)
            .unwrap(),
    ];
    for mut e in engines {
        assert!(e.has_lane_state());
        assert!(!e.scheduler_config().enable_prefix_cache, "no snapshots: the prefix cache must be off");
        let first = prompt(70, 5);
        let one = run(&mut e, &[greedy(first.clone(), 8)], &[0]).remove(0);
        let second = [first, one.0, prompt(9, 6)].concat();
        let resumed = run(&mut e, &[greedy(second.clone(), 8)], &[0]).remove(0);
        assert!(resumed == fresh(&BASE, &[greedy(second, 8)])[0], "a second turn differs from computing it fresh");
        assert_eq!(e.stats().prefix_cache_hit_tokens, 0);
    }
}

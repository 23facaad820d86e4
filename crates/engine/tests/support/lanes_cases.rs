//! The lanes engine's promise, as generic cases over a backend (lanes_parity.rs runs them on the
//! CPU, lanes_parity_cuda.rs on a GPU), asserted with exact equality of tokens and logits bits: a
//! request's result does not depend on what else runs (16 mixed requests together or staggered),
//! on whether its prefix came from the cache (a second turn; a partly shared block), on how its
//! prompt is chunked (1, 7, 64, whole), on preemption and recompute, or on the thread count.
#![allow(dead_code)]

use crate::smollm2::default_model;
use plumb_core::FullBackend;
use plumb_engine::{Engine, Request};
use plumb_sampling::SamplingParams;
use plumb_scheduler::{SchedulerConfig, SeqId};

/// A backend the cases run on, opened fresh per engine (`threads`: its CPU threads, where it has any).
pub trait LaneDevice: FullBackend + Sized + 'static {
    fn open(threads: usize) -> Self;
}

pub struct Setup {
    threads: usize,
    max_batch_tokens: usize,
    max_lanes: usize,
    num_blocks: usize,
    prefix_cache: bool,
}

pub const BASE: Setup = Setup { threads: 2, max_batch_tokens: 64, max_lanes: 16, num_blocks: 128, prefix_cache: true };

fn engine<B: LaneDevice>(s: &Setup) -> Engine<B> {
    let file = default_model();
    let backend = B::open(s.threads);
    let model = plumb_models::load_model(&file, &backend).unwrap();
    let config = SchedulerConfig {
        block_size: 16,
        num_blocks: s.num_blocks,
        max_lanes: s.max_lanes,
        max_batch_tokens: s.max_batch_tokens,
        max_model_len: 2048,
        max_waiting: 256,
        enable_prefix_cache: s.prefix_cache,
    };
    Engine::new(backend, model, config)
}

/// What a request produced: its tokens and the bits of every logits row they were sampled from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    tokens: Vec<u32>,
    logits: Vec<Vec<u32>>,
}

/// Runs every request, request i submitted before step `arrive[i]`; returns traces in order.
fn run<B: FullBackend>(engine: &mut Engine<B>, reqs: &[Request], arrive: &[usize]) -> Vec<Trace> {
    let mut ids: Vec<Option<SeqId>> = vec![None; reqs.len()];
    let mut out = vec![Trace { tokens: vec![], logits: vec![] }; reqs.len()];
    let mut step = 0;
    while ids.iter().any(Option::is_none) || engine.has_work() {
        for (i, r) in reqs.iter().enumerate() {
            if ids[i].is_none() && arrive[i] <= step {
                let mut r = r.clone();
                r.return_logits = true;
                ids[i] = Some(engine.add_request(r).unwrap());
            }
        }
        for o in engine.step() {
            let i = ids.iter().position(|&id| id == Some(o.seq_id)).unwrap();
            out[i].tokens.push(o.token);
            out[i].logits.push(o.logits.unwrap().iter().map(|v| v.to_bits()).collect());
        }
        step += 1;
    }
    out
}

fn solo<B: LaneDevice>(reqs: &[Request]) -> Vec<Trace> {
    let mut e = engine::<B>(&Setup { max_lanes: 1, ..BASE });
    reqs.iter().map(|r| run(&mut e, std::slice::from_ref(r), &[0]).remove(0)).collect()
}

fn prompt(len: usize, salt: usize) -> Vec<u32> {
    (0..len).map(|i| ((i * 7919 + salt * 104_729) % 49_000) as u32 + 100).collect()
}

fn sixteen() -> Vec<Request> {
    (0..16)
        .map(|i| {
            let params = match i % 4 {
                0 => SamplingParams::greedy(),
                1 => SamplingParams {
                    temperature: 0.9,
                    top_k: 50,
                    top_p: 0.95,
                    seed: i as u64,
                    ..SamplingParams::default()
                },
                2 => SamplingParams {
                    temperature: 1.2,
                    min_p: 0.05,
                    repetition_penalty: 1.1,
                    seed: 7,
                    ..SamplingParams::default()
                },
                _ => SamplingParams {
                    temperature: 0.7,
                    frequency_penalty: 0.5,
                    presence_penalty: 0.3,
                    seed: 99 + i as u64,
                    ..SamplingParams::default()
                },
            };
            Request::new(prompt(1 + i * 9, i), params, 3 + (i * 5) % 17, vec![])
        })
        .collect()
}

pub fn sixteen_requests_together_and_staggered_equal_each_run_alone<B: LaneDevice>() {
    let reqs = sixteen();
    let want = solo::<B>(&reqs);
    let together = run(&mut engine::<B>(&BASE), &reqs, &[0; 16]);
    assert!(together == want, "16 requests submitted together differ from solo runs");
    let arrive: Vec<usize> = (0..16).map(|i| (i * 3) % 11).collect();
    let staggered = run(&mut engine::<B>(&Setup { threads: 1, max_batch_tokens: 37, ..BASE }), &reqs, &arrive);
    assert!(staggered == want, "staggered arrivals on 1 thread with 37-row steps differ from solo runs");
}

pub fn prefill_chunk_sizes_give_identical_results<B: LaneDevice>() {
    let reqs = vec![
        Request::new(prompt(100, 1), SamplingParams::greedy(), 6, vec![]),
        Request::new(
            prompt(33, 2),
            SamplingParams { temperature: 1.0, seed: 3, ..SamplingParams::default() },
            6,
            vec![],
        ),
    ];
    let whole = run(&mut engine::<B>(&Setup { max_batch_tokens: 512, ..BASE }), &reqs, &[0, 0]);
    for chunk in [1, 7, 64] {
        let got = run(&mut engine::<B>(&Setup { max_batch_tokens: chunk, ..BASE }), &reqs, &[0, 0]);
        assert!(got == whole, "prefill in chunks of {chunk} differs from whole-prompt prefill");
    }
}

pub fn prefix_cache_hit_equals_fresh_computation<B: LaneDevice>() {
    let greedy = SamplingParams::greedy();
    let turn1 = prompt(40, 5);
    let mut cached = engine::<B>(&BASE);
    let reply = run(&mut cached, &[Request::new(turn1.clone(), greedy.clone(), 10, vec![])], &[0]).remove(0).tokens;
    // The second turn: the first turn, its reply and a new message (the reply's blocks are cached too).
    let mut turn2 = turn1.clone();
    turn2.extend(&reply);
    turn2.extend(prompt(13, 6));
    let second = Request::new(turn2.clone(), greedy.clone(), 8, vec![]);
    let hit = run(&mut cached, std::slice::from_ref(&second), &[0]).remove(0);
    assert!(cached.stats().prefix_cache_hit_tokens >= 48, "{:?}", cached.stats());
    let fresh =
        run(&mut engine::<B>(&Setup { prefix_cache: false, ..BASE }), std::slice::from_ref(&second), &[0]).remove(0);
    assert!(hit == fresh, "a second turn from the prefix cache differs from computing it fresh");
    // Sharing 21 tokens with a cached prompt: one whole block is reused, the partial one is not.
    let mut partial = turn1[..21].to_vec();
    partial.extend(prompt(20, 8));
    let req =
        Request::new(partial, SamplingParams { temperature: 0.8, seed: 1, ..SamplingParams::default() }, 6, vec![]);
    let before = cached.stats().prefix_cache_hit_tokens;
    let hit = run(&mut cached, std::slice::from_ref(&req), &[0]).remove(0);
    assert_eq!(cached.stats().prefix_cache_hit_tokens - before, 16, "exactly one full block is shared");
    let fresh = run(&mut engine::<B>(&Setup { prefix_cache: false, ..BASE }), &[req], &[0]).remove(0);
    assert!(hit == fresh, "a partly shared prefix differs from computing it fresh");
}

pub fn preempted_and_recomputed_equals_never_preempted<B: LaneDevice>() {
    let reqs: Vec<Request> = (0..4)
        .map(|i| {
            Request::new(
                prompt(30 + 7 * i, 20 + i),
                SamplingParams { temperature: 0.9, seed: i as u64, ..SamplingParams::default() },
                24,
                vec![],
            )
        })
        .collect();
    let want = solo::<B>(&reqs);
    // 10 blocks of 16 positions for four requests of 54-75 positions each: preemption is certain.
    let mut small = engine::<B>(&Setup { num_blocks: 10, max_lanes: 4, ..BASE });
    let got = run(&mut small, &reqs, &[0, 0, 1, 2]);
    assert!(small.stats().num_preemptions_total > 0, "the test must preempt: {:?}", small.stats());
    assert!(got == want, "a preempted and recomputed request differs from its solo run");
    assert_eq!(small.stats().num_blocks_in_use, 0);
}

pub fn one_thread_equals_two_and_decode_equals_prefill<B: LaneDevice>() {
    let tokens = prompt(70, 9);
    let whole = engine::<B>(&Setup { max_batch_tokens: 256, ..BASE }).logits_all(&tokens).unwrap();
    let single = engine::<B>(&Setup { max_batch_tokens: 1, ..BASE }).logits_all(&tokens).unwrap();
    let odd = engine::<B>(&Setup { threads: 1, max_batch_tokens: 7, ..BASE }).logits_all(&tokens).unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(bits(&whole) == bits(&single), "one-token steps differ from one 70-token step");
    assert!(bits(&whole) == bits(&odd), "7-token chunks on 1 thread differ from one step on 2 threads");
    // The decode logits at position i equal the prefill logits of the first i + 1 tokens.
    let mut e = engine::<B>(&BASE);
    let generated =
        run(&mut e, &[Request::new(tokens[..60].to_vec(), SamplingParams::greedy(), 5, vec![])], &[0]).remove(0);
    let mut seq = tokens[..60].to_vec();
    seq.extend(&generated.tokens[..4]);
    let all = engine::<B>(&BASE).logits_all(&seq).unwrap();
    for (i, row) in generated.logits.iter().enumerate() {
        let pos = 59 + i;
        assert_eq!(row, &bits(&all[pos * 49152..(pos + 1) * 49152]), "decode step {i} differs from prefill");
    }
}

pub fn scoring_shares_a_busy_engine_and_leaves_its_requests_untouched<B: LaneDevice>() {
    let reqs = vec![Request::new(prompt(50, 31), SamplingParams::greedy(), 12, vec![])];
    let want = solo::<B>(&reqs);
    let mut e = engine::<B>(&BASE);
    let mut r = reqs[0].clone();
    r.return_logits = true;
    let id = e.add_request(r).unwrap();
    let mut got = Trace { tokens: vec![], logits: vec![] };
    let mut scored = false;
    while e.has_work() {
        for o in e.step().into_iter().filter(|o| o.seq_id == id) {
            got.tokens.push(o.token);
            got.logits.push(o.logits.unwrap().iter().map(|v| v.to_bits()).collect());
        }
        if !scored && got.tokens.len() == 3 {
            // Scoring mid-request used to need an idle engine (an assert); it now takes its
            // blocks from the same pool and gives them back.
            let busy = e.logits_all(&prompt(40, 32)).unwrap();
            let idle = engine::<B>(&BASE).logits_all(&prompt(40, 32)).unwrap();
            assert!(busy.iter().zip(&idle).all(|(a, b)| a.to_bits() == b.to_bits()));
            scored = true;
        }
    }
    assert!(scored);
    assert!(got == want[0], "scoring beside a running request changed it");
    assert_eq!(e.stats().num_blocks_in_use, 0);
}

/// One `#[test]` per case above on backend `$b` (a test binary's `LaneDevice`).
#[macro_export]
macro_rules! lane_case_tests {
    ($b:ty) => {
        #[test]
        fn sixteen_requests_together_and_staggered_equal_each_run_alone() {
            cases::sixteen_requests_together_and_staggered_equal_each_run_alone::<$b>();
        }

        #[test]
        fn prefill_chunk_sizes_give_identical_results() {
            cases::prefill_chunk_sizes_give_identical_results::<$b>();
        }

        #[test]
        fn prefix_cache_hit_equals_fresh_computation() {
            cases::prefix_cache_hit_equals_fresh_computation::<$b>();
        }

        #[test]
        fn preempted_and_recomputed_equals_never_preempted() {
            cases::preempted_and_recomputed_equals_never_preempted::<$b>();
        }

        #[test]
        fn one_thread_equals_two_and_decode_equals_prefill() {
            cases::one_thread_equals_two_and_decode_equals_prefill::<$b>();
        }

        #[test]
        fn scoring_shares_a_busy_engine_and_leaves_its_requests_untouched() {
            cases::scoring_shares_a_busy_engine_and_leaves_its_requests_untouched::<$b>();
        }
    };
}

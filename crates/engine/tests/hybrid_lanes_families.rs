//! The lanes engine on the hybrid MoE linear-attention models (the tiny Qwen3.5-MoE and
//! Qwen3-Next of fixtures/qwen3_5_moe and qwen3_next; every test runs each of them; the dense
//! qwen3_5 has hybrid_lanes.rs and hybrid_prefix_cache.rs):
//! each lane's Gated DeltaNet state lives in the lane's state slot, so results do not depend on
//! what else runs (8 requests together == each alone), on chunking (1, 3, 64, whole), on
//! preemption and recompute, or on scoring running beside requests — exact equality of tokens
//! and logits bits. A second turn resumes from the prefix cache through a snapshot of the state
//! at a block boundary and equals a fresh computation.

use plumb_backend_cpu::CpuBackend;
use plumb_checkpoint::HfCheckpoint;
use plumb_engine::{Engine, Request};
use plumb_sampling::SamplingParams;
use plumb_scheduler::{SchedulerConfig, SeqId};
use std::path::PathBuf;

struct Setup {
    max_batch_tokens: usize,
    max_lanes: usize,
    num_blocks: usize,
}

const BASE: Setup = Setup { max_batch_tokens: 64, max_lanes: 8, num_blocks: 128 };

/// The fixture folders of the hybrid families.
const FIXTURES: [&str; 2] = ["qwen3_5_moe", "qwen3_next"];

fn engine(fixture: &str, s: &Setup) -> Engine<CpuBackend> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(fixture).join("hf");
    let backend = CpuBackend::new(2);
    let model = plumb_models::load_model_with(&HfCheckpoint::open(dir).unwrap(), &backend, None).unwrap();
    let config = SchedulerConfig {
        block_size: 16,
        num_blocks: s.num_blocks,
        max_lanes: s.max_lanes,
        max_batch_tokens: s.max_batch_tokens,
        max_model_len: 1024,
        max_waiting: 64,
        enable_prefix_cache: true,
    };
    Engine::new(backend, model, config)
}

/// Tokens and the bits of every logits row they were sampled from.
type Trace = (Vec<u32>, Vec<Vec<u32>>);

/// Runs every request, request i submitted before step `arrive[i]`.
fn run(engine: &mut Engine<CpuBackend>, reqs: &[Request], arrive: &[usize]) -> Vec<Trace> {
    let mut ids: Vec<Option<SeqId>> = vec![None; reqs.len()];
    let mut out = vec![(vec![], vec![]); reqs.len()];
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
            out[i].0.push(o.token);
            out[i].1.push(o.logits.unwrap().iter().map(|v| v.to_bits()).collect());
        }
        step += 1;
    }
    out
}

fn prompt(len: usize, salt: usize) -> Vec<u32> {
    (0..len).map(|i| ((i * 7919 + salt * 104_729) % 380) as u32 + 3).collect()
}

fn requests() -> Vec<Request> {
    (0..8)
        .map(|i| {
            let params = match i % 2 {
                0 => SamplingParams::greedy(),
                _ => SamplingParams { temperature: 0.9, top_k: 50, seed: i as u64, ..SamplingParams::default() },
            };
            Request::new(prompt(1 + i * 23, i), params, 4 + (i * 5) % 13, vec![])
        })
        .collect()
}

fn solo(fixture: &str, reqs: &[Request]) -> Vec<Trace> {
    let mut e = engine(fixture, &Setup { max_lanes: 1, ..BASE });
    reqs.iter().map(|r| run(&mut e, std::slice::from_ref(r), &[0]).remove(0)).collect()
}

#[test]
fn eight_requests_together_and_staggered_equal_each_alone() {
    for f in FIXTURES {
        let reqs = requests();
        let want = solo(f, &reqs);
        assert!(run(&mut engine(f, &BASE), &reqs, &[0; 8]) == want, "{f}: 8 requests together differ from solo runs");
        let arrive: Vec<usize> = (0..8).map(|i| (i * 3) % 7).collect();
        let got = run(&mut engine(f, &Setup { max_batch_tokens: 37, ..BASE }), &reqs, &arrive);
        assert!(got == want, "{f}: staggered arrivals with 37-row steps differ from solo runs");
    }
}

#[test]
fn prefill_chunk_sizes_give_identical_results() {
    let reqs = vec![
        Request::new(prompt(150, 1), SamplingParams::greedy(), 6, vec![]),
        Request::new(
            prompt(33, 2),
            SamplingParams { temperature: 1.0, seed: 3, ..SamplingParams::default() },
            6,
            vec![],
        ),
    ];
    for f in FIXTURES {
        let whole = run(&mut engine(f, &Setup { max_batch_tokens: 512, ..BASE }), &reqs, &[0, 0]);
        for chunk in [1, 3, 64] {
            let got = run(&mut engine(f, &Setup { max_batch_tokens: chunk, ..BASE }), &reqs, &[0, 0]);
            assert!(got == whole, "{f}: prefill in chunks of {chunk} differs from whole-prompt prefill");
        }
    }
}

#[test]
fn preempted_and_recomputed_equals_never_preempted() {
    let reqs: Vec<Request> = (0..4)
        .map(|i| {
            let params = SamplingParams { temperature: 0.9, seed: i as u64, ..SamplingParams::default() };
            Request::new(prompt(30 + 7 * i, 20 + i), params, 24, vec![])
        })
        .collect();
    for f in FIXTURES {
        let want = solo(f, &reqs);
        // 10 blocks of 16 positions for four requests of 54-75 positions each: preemption is certain.
        let mut small = engine(f, &Setup { num_blocks: 10, max_lanes: 4, ..BASE });
        let got = run(&mut small, &reqs, &[0, 0, 1, 2]);
        assert!(small.stats().num_preemptions_total > 0, "{f}: the test must preempt: {:?}", small.stats());
        assert!(got == want, "{f}: a preempted and recomputed request differs from its solo run");
        assert_eq!(small.stats().num_blocks_in_use, 0);
    }
}

#[test]
fn a_second_turn_from_the_prefix_cache_equals_a_fresh_one() {
    for f in FIXTURES {
        a_second_turn_from_the_prefix_cache_equals_a_fresh_one_for(f);
    }
}

fn a_second_turn_from_the_prefix_cache_equals_a_fresh_one_for(f: &str) {
    let mut e = engine(f, &BASE);
    assert!(e.has_lane_state());
    assert!(e.scheduler_config().enable_prefix_cache, "the family resumes from lane-state snapshots");
    let first = prompt(70, 5);
    let turn = |e: &mut Engine<CpuBackend>, p: &[u32]| {
        run(e, &[Request::new(p.to_vec(), SamplingParams::greedy(), 8, vec![])], &[0]).remove(0)
    };
    let one = turn(&mut e, &first);
    let mut second = first.clone();
    second.extend(&one.0);
    second.extend(prompt(9, 6));
    let resumed = turn(&mut e, &second);
    assert!(resumed == turn(&mut engine(f, &BASE), &second), "{f}: a second turn differs from computing it fresh");
    assert!(e.stats().prefix_cache_hit_tokens > 0, "{f}: the second turn must resume from the cache");
}

#[test]
fn scoring_beside_running_requests_and_decode_equal_prefill() {
    for f in FIXTURES {
        scoring_beside_running_requests_and_decode_equal_prefill_for(f);
    }
}

fn scoring_beside_running_requests_and_decode_equal_prefill_for(f: &str) {
    let tokens = prompt(90, 9);
    let alone = engine(f, &BASE).logits_all(&tokens).unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    // Scoring while requests hold lanes (their state slots) mid-generation.
    let mut e = engine(f, &BASE);
    for r in requests() {
        e.add_request(r).unwrap();
    }
    e.step();
    e.step();
    let beside = e.logits_all(&tokens).unwrap();
    assert!(bits(&beside) == bits(&alone), "{f}: scoring beside running requests differs from scoring alone");
    // Greedy decoding's logits equal the prefill logits at the same positions.
    let mut e = engine(f, &BASE);
    let out = run(&mut e, &[Request::new(tokens[..60].to_vec(), SamplingParams::greedy(), 20, vec![])], &[0]).remove(0);
    let mut seq = tokens[..60].to_vec();
    seq.extend(&out.0[..19]);
    let prefill = engine(f, &BASE).logits_all(&seq).unwrap();
    let vocab = prefill.len() / seq.len();
    for (j, row) in out.1.iter().enumerate() {
        let at = (59 + j) * vocab;
        assert!(*row == bits(&prefill[at..at + vocab]), "{f}: decode step {j} differs from prefill at {}", 59 + j);
    }
}

/// Proposes `k` copies of token 5 for every query: drafts a recurrent state would absorb.
struct AlwaysDraft(usize);

impl plumb_engine::Proposer<CpuBackend> for AlwaysDraft {
    fn propose(&mut self, _: &CpuBackend, queries: &[plumb_engine::DraftQuery<'_>]) -> Vec<Vec<u32>> {
        queries.iter().map(|q| vec![5; self.0.min(q.max_drafts)]).collect()
    }
}

#[test]
fn proposers_are_dropped_and_a_hybrid_draft_model_is_refused() {
    use plumb_engine::{DraftModelConfig, DraftModelError, ModelProposer};
    let mut e = engine("qwen3_5", &BASE);
    let reqs = requests();
    let want = solo("qwen3_5", &reqs);
    // Verify rows would advance each lane's state past drafts it may reject: the proposer is
    // dropped, and results equal the solo runs.
    e.set_proposer(Some(Box::new(AlwaysDraft(3))));
    assert!(run(&mut e, &reqs, &[0; 8]) == want, "with a proposer set, results must still equal solo runs");
    assert_eq!(e.draft_stats().num_draft_tokens, 0, "a lane-state model must not draft");
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/qwen3_5/hf");
    let draft = plumb_models::load_model_with(&HfCheckpoint::open(dir).unwrap(), e.backend(), None).unwrap();
    let config = DraftModelConfig { k: 4, block_size: 16, num_blocks: 8, max_batch_tokens: 32 };
    let err = ModelProposer::new(e.backend(), draft, 384, config).err();
    assert!(matches!(err, Some(DraftModelError::LaneState)), "{:?}", err.map(|e| e.to_string()));
}

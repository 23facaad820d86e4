//! The lanes engine on a hybrid linear-attention model (the tiny Qwen3.5 of fixtures/qwen3_5):
//! each lane's Gated DeltaNet state lives in the lane's state slot, so results do not depend on
//! what else runs (8 requests together == each alone), on chunking (1, 3, 64, whole), on
//! preemption and recompute, or on scoring running beside requests — exact equality of tokens
//! and logits bits. Prefix-cache resumption from state snapshots is hybrid_prefix_cache.rs.

#[path = "support/hybrid.rs"]
mod hybrid;

use hybrid::{BASE, Setup, Trace, engine, prompt, run};
use plumb_backend_cpu::CpuBackend;
use plumb_checkpoint::HfCheckpoint;
use plumb_engine::Request;
use plumb_sampling::SamplingParams;
use std::path::PathBuf;

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

fn solo(reqs: &[Request]) -> Vec<Trace> {
    let mut e = engine(&Setup { max_lanes: 1, ..BASE });
    reqs.iter().map(|r| run(&mut e, std::slice::from_ref(r), &[0]).remove(0)).collect()
}

#[test]
fn eight_requests_together_and_staggered_equal_each_alone() {
    let reqs = requests();
    let want = solo(&reqs);
    assert!(run(&mut engine(&BASE), &reqs, &[0; 8]) == want, "8 requests together differ from solo runs");
    let arrive: Vec<usize> = (0..8).map(|i| (i * 3) % 7).collect();
    let got = run(&mut engine(&Setup { max_batch_tokens: 37, ..BASE }), &reqs, &arrive);
    assert!(got == want, "staggered arrivals with 37-row steps differ from solo runs");
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
    let whole = run(&mut engine(&Setup { max_batch_tokens: 512, ..BASE }), &reqs, &[0, 0]);
    for chunk in [1, 3, 64] {
        let got = run(&mut engine(&Setup { max_batch_tokens: chunk, ..BASE }), &reqs, &[0, 0]);
        assert!(got == whole, "prefill in chunks of {chunk} differs from whole-prompt prefill");
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
    let want = solo(&reqs);
    // 10 blocks of 16 positions for four requests of 54-75 positions each: preemption is certain.
    let mut small = engine(&Setup { num_blocks: 10, max_lanes: 4, ..BASE });
    let got = run(&mut small, &reqs, &[0, 0, 1, 2]);
    assert!(small.stats().num_preemptions_total > 0, "the test must preempt: {:?}", small.stats());
    assert!(got == want, "a preempted and recomputed request differs from its solo run");
    assert_eq!(small.stats().num_blocks_in_use, 0);
}

#[test]
fn scoring_beside_running_requests_and_decode_equal_prefill() {
    let tokens = prompt(90, 9);
    let alone = engine(&BASE).logits_all(&tokens).unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    // Scoring while requests hold lanes (their state slots) mid-generation.
    let mut e = engine(&BASE);
    for r in requests() {
        e.add_request(r).unwrap();
    }
    e.step();
    e.step();
    let beside = e.logits_all(&tokens).unwrap();
    assert!(bits(&beside) == bits(&alone), "scoring beside running requests differs from scoring alone");
    // Greedy decoding's logits equal the prefill logits at the same positions.
    let mut e = engine(&BASE);
    let out = run(&mut e, &[Request::new(tokens[..60].to_vec(), SamplingParams::greedy(), 20, vec![])], &[0]).remove(0);
    let mut seq = tokens[..60].to_vec();
    seq.extend(&out.0[..19]);
    let prefill = engine(&BASE).logits_all(&seq).unwrap();
    let vocab = prefill.len() / seq.len();
    for (j, row) in out.1.iter().enumerate() {
        let at = (59 + j) * vocab;
        assert!(*row == bits(&prefill[at..at + vocab]), "decode step {j} differs from prefill at position {}", 59 + j);
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
    let mut e = engine(&BASE);
    let reqs = requests();
    let want = solo(&reqs);
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

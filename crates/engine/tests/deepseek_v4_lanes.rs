//! The lanes engine on DeepSeek V4 (the tiny model of fixtures/deepseek_v4: sliding, CSA of 4
//! and HCA of 8 layers, a sliding window of 8, the indexer keeping 2 entries). Its state —
//! raw K, compressor rows, compressed entries and indexer keys — is a row per position in the
//! paged KV cache, so results must not depend on what else runs (8 requests together ==
//! each alone), on chunking (1, 3, 5, 64, whole), on preemption, on the prefix cache (hits at
//! block boundaries that fall between windows and inside them), or on drafting — exact
//! equality of tokens and logits bits throughout.

#[path = "support/hybrid.rs"]
mod hybrid;

use hybrid::{BASE, Setup, Trace, config, prompt, run};
use plumb_backend_cpu::CpuBackend;
use plumb_checkpoint::HfCheckpoint;
use plumb_engine::{Engine, Request};
use plumb_sampling::SamplingParams;
use std::path::PathBuf;

fn engine(s: &Setup) -> Engine<CpuBackend> {
    engine_on(CpuBackend::new(2), s)
}

fn engine_on(backend: CpuBackend, s: &Setup) -> Engine<CpuBackend> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/deepseek_v4/hf");
    let model = plumb_models::load_model_with(&HfCheckpoint::open(dir).unwrap(), &backend, None).unwrap();
    Engine::new(backend, model, config(s))
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

fn solo(reqs: &[Request]) -> Vec<Trace> {
    let mut e = engine(&Setup { max_lanes: 1, ..BASE });
    reqs.iter().map(|r| run(&mut e, std::slice::from_ref(r), &[0]).remove(0)).collect()
}

#[test]
fn the_state_is_paged_kv_and_no_lane_state() {
    let e = engine(&BASE);
    assert!(!e.has_lane_state(), "V4 keeps its state in KV blocks");
    assert!(e.scheduler_config().enable_prefix_cache);
    let spec = e.kv_spec();
    // 4 layers at head_dim 32 in 16-wide planes: sliding 32 columns (1 KV layer), CSA 32 + 32
    // + 16 + 2·64 + 2·32 = 272 (9), HCA 32 + 32 + 2·32 = 128 (4).
    assert_eq!((spec.num_layers, spec.num_kv_heads, spec.head_dim), (1 + 9 + 4 + 9, 1, 16));
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
    for chunk in [1, 3, 5, 64] {
        let got = run(&mut engine(&Setup { max_batch_tokens: chunk, ..BASE }), &reqs, &[0, 0]);
        assert!(got == whole, "prefill in chunks of {chunk} differs from whole-prompt prefill");
    }
}

/// With a 16-bit KV store every stored value (raw K, compressor rows, entries, keys) is
/// rounded, and every step reads the rounded values back, its own rows included: chunking
/// still changes nothing, and the results differ from the f32 store's (the rounding is real).
#[test]
fn a_16_bit_kv_store_is_exact_across_chunkings_too() {
    let reqs = vec![Request::new(prompt(150, 1), SamplingParams::greedy(), 6, vec![])];
    let bf16 = |chunk| {
        let backend = CpuBackend::new(2).with_kv_store(plumb_core::KvStore::Bf16);
        run(&mut engine_on(backend, &Setup { max_batch_tokens: chunk, ..BASE }), &reqs, &[0])
    };
    let whole = bf16(512);
    for chunk in [1, 5, 64] {
        assert!(bf16(chunk) == whole, "bf16 KV: prefill in chunks of {chunk} differs from whole-prompt prefill");
    }
    let f32_store = run(&mut engine(&Setup { max_batch_tokens: 512, ..BASE }), &reqs, &[0]);
    assert!(f32_store[0].1 != whole[0].1, "a bf16 store must change the logits");
}

#[test]
fn decode_logits_equal_prefill_logits_and_scoring_beside_requests() {
    let tokens = prompt(90, 9);
    let alone = engine(&BASE).logits_all(&tokens).unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let mut e = engine(&BASE);
    for r in requests() {
        e.add_request(r).unwrap();
    }
    e.step();
    e.step();
    let beside = e.logits_all(&tokens).unwrap();
    assert!(bits(&beside) == bits(&alone), "scoring beside running requests differs from scoring alone");
    let mut e = engine(&BASE);
    let out = run(&mut e, &[Request::new(tokens[..60].to_vec(), SamplingParams::greedy(), 30, vec![])], &[0]).remove(0);
    let mut seq = tokens[..60].to_vec();
    seq.extend(&out.0[..29]);
    let prefill = engine(&BASE).logits_all(&seq).unwrap();
    let vocab = prefill.len() / seq.len();
    for (j, row) in out.1.iter().enumerate() {
        let at = (59 + j) * vocab;
        assert!(*row == bits(&prefill[at..at + vocab]), "decode step {j} differs from prefill at {}", 59 + j);
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

/// A second turn resumes from the first turn's blocks and equals computing it fresh, with
/// blocks of 16 (boundaries between windows of 4 and 8) and of 6 (boundaries inside them: a
/// hit at 66 resumes mid-window, from compressor rows stored in the cached blocks).
#[test]
fn a_second_turn_from_the_prefix_cache_equals_a_fresh_one() {
    for block_size in [16, 6] {
        let setup = Setup { block_size, num_blocks: 256, ..BASE };
        let mut e = engine(&setup);
        let first = prompt(64, 5);
        let turn = |e: &mut Engine<CpuBackend>, p: &[u32]| {
            run(e, &[Request::new(p.to_vec(), SamplingParams::greedy(), 8, vec![])], &[0]).remove(0)
        };
        let one = turn(&mut e, &first);
        let mut second = first.clone();
        second.extend(&one.0);
        second.extend(prompt(9, 6));
        let resumed = turn(&mut e, &second);
        assert!(resumed == turn(&mut engine(&setup), &second), "blocks of {block_size}: a second turn differs");
        let hit = e.stats().prefix_cache_hit_tokens as usize;
        assert!(hit > 0 && hit.is_multiple_of(block_size), "blocks of {block_size}: the second turn must hit ({hit})");
        if block_size == 6 {
            assert!(!hit.is_multiple_of(4) && !hit.is_multiple_of(8), "the hit must end inside a window ({hit})");
        }
    }
}

/// Proposes `k` copies of token 5 for every query: drafts that are mostly rejected, so rows
/// are written for positions that are then computed again with other tokens.
struct AlwaysDraft(usize);

impl plumb_engine::Proposer<CpuBackend> for AlwaysDraft {
    fn propose(&mut self, _: &CpuBackend, queries: &[plumb_engine::DraftQuery<'_>]) -> Vec<Vec<u32>> {
        queries.iter().map(|q| vec![5; self.0.min(q.max_drafts)]).collect()
    }
}

#[test]
fn drafted_equals_undrafted() {
    let reqs = requests();
    let want = solo(&reqs);
    let mut e = engine(&BASE);
    e.set_proposer(Some(Box::new(AlwaysDraft(3))));
    assert!(run(&mut e, &reqs, &[0; 8]) == want, "drafted results differ from undrafted solo runs");
    assert!(e.draft_stats().num_draft_tokens > 0, "the proposer must have drafted");
}

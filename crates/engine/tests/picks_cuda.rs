//! Sampling on the device (`Backend::pick`) draws the tokens reading whole rows draws, on an
//! NVIDIA GPU: greedy and top-k requests with logit bias and every penalty, top-k at the device
//! maximum, requests that still read rows (no top-k cut) in the same steps, eight lanes at once,
//! and n-gram drafts (whose verify rows are edited with the drafted history). Log-probabilities
//! computed on the device (for requests that pick there) match the host's from whole rows.
//! Start-up refuses a configuration whose largest step cannot fit beside its KV cache.
//! Skips cleanly without a GPU; PLUMB_REQUIRE_GPU=1 turns that into a failure.

#[path = "support/drafts.rs"]
mod drafts;
#[path = "support/random_draft.rs"]
mod random_draft;
#[path = "support/smollm2.rs"]
mod smollm2;

use drafts::*;
use plumb_backend_cuda::CudaBackend;
use plumb_core::logprobs::logprobs_match;
use plumb_engine::{Engine, Request, TokenLogprobs};
use plumb_sampling::SamplingParams;

impl TestDevice for CudaBackend {
    fn open() -> Self {
        let ordinal = std::env::var("PLUMB_CUDA_DEVICE").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
        CudaBackend::new(ordinal).expect("the GPU was found a moment ago")
    }
}

fn gpu(test: &str) -> bool {
    match CudaBackend::new(0) {
        Ok(_) => true,
        Err(e) if std::env::var("PLUMB_REQUIRE_GPU").is_ok_and(|v| v == "1") => panic!("{test}: no GPU: {e}"),
        Err(e) => {
            eprintln!("{test}: skipped, no GPU: {e}");
            false
        }
    }
}

fn kinds(i: usize) -> Request {
    let bias = vec![(198, 2.0), (1000, -100.0), (30_000, 4.5)];
    let params = match i % 6 {
        0 => SamplingParams::greedy(),
        1 => SamplingParams { repetition_penalty: 1.3, logit_bias: bias, ..SamplingParams::greedy() },
        2 => SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.9,
            min_p: 0.02,
            frequency_penalty: 0.6,
            presence_penalty: 0.4,
            repetition_penalty: 1.1,
            seed: 11 + i as u64,
            ..SamplingParams::default()
        },
        3 => SamplingParams { temperature: 1.3, top_k: 256, seed: 5, logit_bias: bias, ..SamplingParams::default() },
        // This one reads whole rows (no top-k cut).
        4 => SamplingParams { temperature: 0.9, top_p: 0.8, seed: 3, ..SamplingParams::default() },
        _ => SamplingParams { temperature: 0.7, top_k: 20, seed: 8, ..SamplingParams::default() },
    };
    let mut r = Request::new(copying_prompt(24 + 5 * i, i), params, 24, vec![]);
    // Log-probabilities with a device argmax, a device top-k and a whole row.
    r.logprobs = [0, 4, 5].contains(&(i % 6)).then_some(3 * (i % 6) / 2);
    r
}

/// Every request's tokens and log-probabilities, all submitted at once.
type Sampled = Vec<Vec<(u32, Option<TokenLogprobs>)>>;

fn tokens(e: &mut Engine<CudaBackend>, reqs: &[Request]) -> Sampled {
    let ids: Vec<_> = reqs.iter().map(|r| e.add_request(r.clone()).unwrap()).collect();
    let mut out = vec![Vec::new(); reqs.len()];
    let mut picked_steps = 0;
    while e.has_work() {
        for o in e.step() {
            out[ids.iter().position(|&id| id == o.seq_id).unwrap()].push((o.token, o.logprobs));
        }
        picked_steps += 1;
    }
    assert!(picked_steps > 20);
    out
}

/// Same tokens, and log-probabilities within the definition's tolerance.
fn assert_same(got: &Sampled, want: &Sampled, what: &str) {
    let ids = |s: &Sampled| s.iter().map(|r| r.iter().map(|t| t.0).collect::<Vec<_>>()).collect::<Vec<_>>();
    assert_eq!(ids(got), ids(want), "{what} changed a sampled token");
    let mut compared = 0;
    for (g, w) in got.iter().flatten().zip(want.iter().flatten()) {
        match (&g.1, &w.1) {
            (Some(g), Some(w)) => {
                assert!(logprobs_match(g, w), "{what}: log-probabilities {g:?} against {w:?}");
                compared += 1;
            }
            (None, None) => {}
            _ => panic!("{what}: log-probabilities present on one side only"),
        }
    }
    assert!(compared > 40, "{what}: {compared} log-probabilities compared");
}

#[test]
fn device_picks_sample_what_whole_rows_sample() {
    if !gpu("picks") {
        return;
    }
    let reqs: Vec<Request> = (0..8).map(kinds).collect();
    let mut rows = engine_on::<CudaBackend>(64, 8, None);
    rows.backend().set_picks(false);
    let want = tokens(&mut rows, &reqs);
    let mut picks = engine_on::<CudaBackend>(64, 8, None);
    assert!(plumb_core::Backend::picks_on_device(picks.backend()));
    assert_same(&tokens(&mut picks, &reqs), &want, "device picks");
    let mut drafted = engine_on::<CudaBackend>(64, 8, ngram(4, 3));
    assert_same(&tokens(&mut drafted, &reqs), &want, "device picks with drafts");
    assert!(drafted.draft_stats().num_verify_steps > 0);
}

#[test]
fn a_step_that_cannot_fit_beside_the_kv_cache_is_refused_at_start_up() {
    if !gpu("profile") {
        return;
    }
    let file = smollm2::default_model();
    let backend = <CudaBackend as TestDevice>::open();
    let model = plumb_models::load_model(&file, &backend).unwrap();
    let (free, _) = backend.memory_info().expect("the driver reports memory");
    let spec = model.kv_spec_for_lanes(16, 1, 9);
    let store = plumb_core::Backend::kv_store(&backend).bytes();
    let per_block = 16 * spec.num_layers * spec.num_kv_heads * spec.head_dim * 2 * store;
    // A KV cache that leaves 256 MiB, and a step whose logits alone need 805 MB.
    let num_blocks = (free - (256 << 20)) / per_block;
    let config = plumb_scheduler::SchedulerConfig {
        block_size: 16,
        num_blocks,
        max_lanes: 8,
        max_batch_tokens: 4096,
        max_model_len: 2048,
        max_waiting: 16,
        enable_prefix_cache: true,
    };
    match Engine::try_new(backend, model, config) {
        Ok(_) => panic!("a step of 4,096 logits rows ran in 256 MiB"),
        Err(e) => {
            let e = e.to_string();
            eprintln!("refused: {e}");
            assert!(e.contains("the largest step (4096 tokens over 8 lanes"), "{e}");
            assert!(e.contains("out of device memory"), "{e}");
        }
    }
    // The device is whole again: an engine of the usual size serves.
    let mut e = engine_on::<CudaBackend>(64, 8, None);
    let reqs: Vec<Request> = (0..8).map(kinds).collect();
    assert_eq!(tokens(&mut e, &reqs).len(), 8);
}

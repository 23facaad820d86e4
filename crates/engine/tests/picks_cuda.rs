//! Sampling on the device (`Backend::pick`) draws the tokens reading whole rows draws, on an
//! NVIDIA GPU: greedy and top-k requests with logit bias and every penalty, top-k at the device
//! maximum, requests that still read rows (no top-k cut, logprobs) in the same steps, eight lanes
//! at once, and n-gram drafts (whose verify rows are edited with the drafted history).
//! Skips cleanly without a GPU; PLUMB_REQUIRE_GPU=1 turns that into a failure.

#[path = "support/drafts.rs"]
mod drafts;
#[path = "support/random_draft.rs"]
mod random_draft;
#[path = "support/smollm2.rs"]
mod smollm2;

use drafts::*;
use plumb_backend_cuda::CudaBackend;
use plumb_engine::{Engine, Request};
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
        // These two read whole rows: no top-k cut, and logprobs.
        4 => SamplingParams { temperature: 0.9, top_p: 0.8, seed: 3, ..SamplingParams::default() },
        _ => SamplingParams { temperature: 0.7, top_k: 20, seed: 8, ..SamplingParams::default() },
    };
    let mut r = Request::new(copying_prompt(24 + 5 * i, i), params, 24, vec![]);
    r.logprobs = (i % 6 == 5).then_some(3);
    r
}

/// Every request's tokens, all submitted at once.
fn tokens(e: &mut Engine<CudaBackend>, reqs: &[Request]) -> Vec<Vec<u32>> {
    let ids: Vec<_> = reqs.iter().map(|r| e.add_request(r.clone()).unwrap()).collect();
    let mut out = vec![Vec::new(); reqs.len()];
    let mut picked_steps = 0;
    while e.has_work() {
        for o in e.step() {
            out[ids.iter().position(|&id| id == o.seq_id).unwrap()].push(o.token);
        }
        picked_steps += 1;
    }
    assert!(picked_steps > 20);
    out
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
    assert_eq!(tokens(&mut picks, &reqs), want, "device picks changed a sampled token");
    let mut drafted = engine_on::<CudaBackend>(64, 8, ngram(4, 3));
    assert_eq!(tokens(&mut drafted, &reqs), want, "device picks with drafts changed a sampled token");
    assert!(drafted.draft_stats().num_verify_steps > 0);
}

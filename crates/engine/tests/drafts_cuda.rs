//! Drafted == undrafted on an NVIDIA GPU, tokens and logits bits, as `drafts_parity` and
//! `draft_model_parity` show it on the CPU: n-gram drafts for every k, a draft model drafting for
//! itself (always accepted: its decode logits equal the target's verify logits bit for bit) and a
//! random one, eight mixed lanes with chunked prefill, and a second turn from the prefix cache.
//! Skips cleanly without a GPU; PLUMB_REQUIRE_GPU=1 turns that into a failure.

#[path = "support/drafts.rs"]
mod drafts;
#[path = "support/random_draft.rs"]
mod random_draft;
#[path = "support/smollm2.rs"]
mod smollm2;

use drafts::*;
use plumb_backend_cuda::CudaBackend;
use plumb_engine::Request;
use smollm2::default_model;

impl TestDevice for CudaBackend {
    fn open() -> Self {
        let ordinal = std::env::var("PLUMB_CUDA_DEVICE").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
        CudaBackend::new(ordinal).expect("the GPU was found a moment ago")
    }
}

/// Whether a GPU is here; without one the test is skipped, unless PLUMB_REQUIRE_GPU=1.
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

type Gpu = CudaBackend;

#[test]
fn ngram_drafts_with_every_k_equal_plain_decoding_on_the_gpu() {
    if !gpu("ngram") {
        return;
    }
    let reqs: Vec<Request> = (0..2).map(|i| Request::new(copying_prompt(40, i), params(i * 3), 20, vec![])).collect();
    let want = undrafted_on::<Gpu>(&reqs);
    for k in 1..=8 {
        let mut e = engine_on::<Gpu>(64, 4, ngram(k, 3));
        assert!(run(&mut e, &reqs, &[0, 0]) == want, "n-gram drafts with k = {k} differ on the GPU");
        assert!(e.draft_stats().num_accepted_tokens > 0, "k = {k}: {:?}", e.draft_stats());
    }
}

#[test]
fn draft_models_equal_plain_decoding_on_the_gpu() {
    if !gpu("draft models") {
        return;
    }
    let reqs: Vec<Request> = (0..3).map(|i| Request::new(prompt(30 + 9 * i, i), params(i), 18, vec![])).collect();
    let want = undrafted_on::<Gpu>(&reqs);
    let (target, random) = (default_model(), random_draft());
    for k in [1, 3, 8] {
        let mut e = engine_on::<Gpu>(64, 4, None);
        with_draft(&mut e, &target, k, 64);
        assert!(run(&mut e, &reqs, &[0, 0, 2]) == want, "self-drafting with k = {k} differs on the GPU");
        let s = e.draft_stats();
        assert!(s.num_draft_tokens > 0, "{s:?}");
        assert_eq!(s.num_accepted_tokens, s.num_draft_tokens, "k = {k}: a self-draft was rejected: {s:?}");
        let mut e = engine_on::<Gpu>(64, 4, None);
        with_draft(&mut e, &random, k, 64);
        assert!(run(&mut e, &reqs, &[0, 0, 2]) == want, "a random draft model with k = {k} differs on the GPU");
    }
}

#[test]
fn eight_mixed_lanes_with_drafts_equal_plain_decoding_on_the_gpu() {
    if !gpu("eight lanes") {
        return;
    }
    let first = undrafted_on::<Gpu>(&eight(None));
    let reqs = eight(Some(&first));
    let want = undrafted_on::<Gpu>(&reqs);
    let arrive = [0, 0, 1, 2, 3, 5, 8, 13];
    for name in ["ngram", "self", "random"] {
        let mut e = engine_on::<Gpu>(37, 8, if name == "ngram" { ngram(4, 3) } else { None });
        match name {
            "self" => with_draft(&mut e, &default_model(), 4, 12),
            "random" => with_draft(&mut e, &random_draft(), 4, 12),
            _ => {}
        }
        let got = run(&mut e, &reqs, &arrive);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g == w, "{name}: request {i} differs from plain decoding on the GPU");
        }
        assert!(e.draft_stats().num_draft_tokens > 0, "{name}: {:?}", e.draft_stats());
    }
}

#[test]
fn a_drafted_second_turn_from_the_prefix_cache_equals_plain_decoding_on_the_gpu() {
    if !gpu("second turn") {
        return;
    }
    let turn1 = prompt(40, 11);
    let first = Request::new(turn1.clone(), params(1), 20, vec![]);
    let mut e = engine_on::<Gpu>(64, 4, None);
    with_draft(&mut e, &default_model(), 3, 64);
    let drafted_first = run(&mut e, std::slice::from_ref(&first), &[0]).remove(0);
    assert_eq!(drafted_first, undrafted_on::<Gpu>(std::slice::from_ref(&first))[0]);
    let mut turn2 = turn1;
    turn2.extend(&drafted_first.tokens);
    turn2.extend(prompt(9, 12));
    let second = Request::new(turn2, params(2), 16, vec![]);
    let before = e.stats().prefix_cache_hit_tokens;
    let got = run(&mut e, std::slice::from_ref(&second), &[0]).remove(0);
    assert!(e.stats().prefix_cache_hit_tokens - before >= 48, "{:?}", e.stats());
    assert!(got == undrafted_on::<Gpu>(&[second])[0], "a drafted turn from the cache differs on the GPU");
}

//! A draft model's drafts change nothing, bit for bit: the default model drafting for itself (each
//! of its drafts is exactly the target's own sample, so every draft must be accepted: its KV stays
//! in step with the target's tokens) and a random-weight model with the same tokenizer (almost
//! every draft rejected), for every k in 1..=8, greedy and seeded sampling with penalties, eight
//! mixed lanes with chunked prefill, and a second turn from the prefix cache.

#[path = "support/drafts.rs"]
mod drafts;
#[path = "support/random_draft.rs"]
mod random_draft;
#[path = "support/smollm2.rs"]
mod smollm2;

use drafts::*;
use plumb_engine::{DraftModelConfig, DraftModelError, ModelProposer, Request};
use smollm2::default_model;

#[test]
fn a_self_draft_is_always_accepted_and_changes_nothing() {
    let reqs: Vec<Request> = (0..3).map(|i| Request::new(prompt(30 + 9 * i, i), params(i), 18, vec![])).collect();
    let want = undrafted(&reqs);
    let target = default_model();
    for k in 1..=8 {
        let mut e = engine(64, 4, None);
        with_draft(&mut e, &target, k, 64);
        let got = run(&mut e, &reqs, &[0, 0, 2]);
        assert!(got == want, "self-drafting with k = {k} differs from plain decoding");
        let s = e.draft_stats();
        assert!(s.num_draft_tokens > 0, "k = {k}: nothing drafted: {s:?}");
        assert_eq!(s.num_accepted_tokens, s.num_draft_tokens, "k = {k}: a self-draft was rejected: {s:?}");
        assert_eq!(e.stats().num_blocks_in_use, 0);
    }
}

#[test]
fn a_random_draft_model_changes_nothing() {
    let reqs: Vec<Request> = (0..2).map(|i| Request::new(prompt(25, 7 + i), params(i * 3), 16, vec![])).collect();
    let want = undrafted(&reqs);
    let draft = random_draft();
    for k in 1..=8 {
        let mut e = engine(64, 4, None);
        with_draft(&mut e, &draft, k, 64);
        let got = run(&mut e, &reqs, &[0, 1]);
        assert!(got == want, "a random draft model with k = {k} changes the output");
        let s = e.draft_stats();
        assert!(s.num_draft_tokens > 0 && s.acceptance_rate() < 0.5, "k = {k}: {s:?}");
    }
}

#[test]
fn eight_mixed_lanes_with_a_draft_model_equal_plain_decoding() {
    let first = undrafted(&eight(None));
    let reqs = eight(Some(&first));
    let want = undrafted(&reqs);
    let arrive = [0, 0, 1, 2, 3, 5, 8, 13];
    for (name, file) in [("self", default_model()), ("random", random_draft())] {
        // 37-row steps: prompts arrive in chunks beside drafting lanes; the draft cache is so
        // small that lanes take blocks from each other.
        let mut e = engine(37, 8, None);
        with_draft(&mut e, &file, 4, 12);
        let got = run(&mut e, &reqs, &arrive);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g == w, "{name} draft model: request {i} differs from plain decoding");
        }
        let s = e.draft_stats();
        assert!(s.num_draft_tokens > 0, "{name} drafted nothing: {s:?}");
        if name == "self" {
            assert_eq!(s.num_accepted_tokens, s.num_draft_tokens, "{s:?}");
        }
    }
}

#[test]
fn a_drafted_second_turn_from_the_prefix_cache_equals_plain_decoding() {
    let turn1 = prompt(40, 11);
    let first = Request::new(turn1.clone(), params(1), 20, vec![]);
    let target = default_model();
    let mut e = engine(64, 4, None);
    with_draft(&mut e, &target, 3, 64);
    let drafted_first = run(&mut e, std::slice::from_ref(&first), &[0]).remove(0);
    assert_eq!(drafted_first, undrafted(std::slice::from_ref(&first))[0]);
    let mut turn2 = turn1;
    turn2.extend(&drafted_first.tokens);
    turn2.extend(prompt(9, 12));
    let second = Request::new(turn2, params(2), 16, vec![]);
    let before = e.stats().prefix_cache_hit_tokens;
    let got = run(&mut e, std::slice::from_ref(&second), &[0]).remove(0);
    assert!(e.stats().prefix_cache_hit_tokens - before >= 48, "{:?}", e.stats());
    assert!(got == undrafted(&[second])[0], "a drafted turn from the cache differs from plain decoding");
    let s = e.draft_stats();
    assert_eq!(s.num_accepted_tokens, s.num_draft_tokens, "{s:?}");
}

#[test]
fn a_draft_model_with_another_vocabulary_or_no_room_is_refused() {
    let e = engine(64, 1, None);
    let load = || plumb_models::load_model(&default_model(), e.backend()).unwrap();
    let config = DraftModelConfig { k: 4, block_size: 16, num_blocks: 8, max_batch_tokens: 32 };
    let err = ModelProposer::new(e.backend(), load(), 1000, config).err();
    assert_eq!(err, Some(DraftModelError::VocabMismatch { draft: 49_152, target: 1000 }));
    let err = ModelProposer::new(e.backend(), load(), 49_152, DraftModelConfig { k: 0, ..config }).err();
    assert_eq!(err, Some(DraftModelError::BadK(0)));
    let err = ModelProposer::new(e.backend(), load(), 49_152, DraftModelConfig { num_blocks: 0, ..config }).err();
    assert_eq!(err, Some(DraftModelError::NoRoom));
}

//! The threaded engine: requests from many threads equal their solo runs, cancellation (explicit
//! or by dropping the stream) frees lanes and blocks, and a full engine refuses at once.

#[path = "support/smollm2.rs"]
mod smollm2;

use plumb_engine::{EngineHandle, Event, HandleError, Request};
use plumb_sampling::SamplingParams;
use smollm2::*;
use std::time::{Duration, Instant};

fn handle(max_in_flight: usize) -> EngineHandle {
    EngineHandle::spawn(engine(&default_model(), 2, 2048, 8), max_in_flight)
}

fn collect(mut s: plumb_engine::RequestStream) -> Vec<u32> {
    let mut out = Vec::new();
    while let Some(e) = s.blocking_next() {
        match e {
            Event::Token(t) => out.push(t.token),
            Event::Failed(e) => panic!("{e}"),
        }
    }
    out
}

fn req(i: usize, max_tokens: usize) -> Request {
    let prompt: Vec<u32> = (0..5 + i * 3).map(|j| ((j * 31 + i * 977) % 40_000) as u32 + 200).collect();
    Request::new(
        prompt,
        SamplingParams { temperature: 0.8, seed: i as u64, ..SamplingParams::default() },
        max_tokens,
        vec![],
    )
}

/// Waits until nothing is in flight and no block is held.
fn settled(h: &EngineHandle) -> plumb_engine::EngineStats {
    let start = Instant::now();
    loop {
        let s = h.stats();
        if s.requests_in_flight == 0 && s.scheduler.num_blocks_in_use == 0 && s.scheduler.num_running == 0 {
            return s;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the engine did not settle: {s:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn requests_from_many_threads_equal_their_solo_runs() {
    let h = handle(64);
    let solo: Vec<Vec<u32>> = (0..6).map(|i| collect(h.submit(req(i, 12)).unwrap())).collect();
    let threads: Vec<_> = (0..6)
        .map(|i| {
            let h = h.clone();
            std::thread::spawn(move || collect(h.submit(req(i, 12)).unwrap()))
        })
        .collect();
    let together: Vec<Vec<u32>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(together, solo);
    settled(&h);
}

#[test]
fn cancelling_a_hundred_requests_at_random_points_leaks_nothing() {
    let h = handle(256);
    let mut streams: Vec<_> = (0..100).map(|i| (i, h.submit(req(i % 13, 20)).unwrap())).collect();
    // Drop each stream after a pseudo-random number of events (0: before its first token).
    let mut rng = 12345u64;
    while let Some((i, mut s)) = streams.pop() {
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let keep = (rng >> 33) as usize % 6;
        for _ in 0..keep {
            if s.blocking_next().is_none() {
                break;
            }
        }
        if i % 2 == 0 {
            drop(s);
        } else {
            std::mem::drop(s);
        }
    }
    let s = settled(&h);
    assert!(s.requests_cancelled > 0, "{s:?}");
    assert_eq!(s.scheduler.num_waiting, 0);
}

#[test]
fn a_full_engine_refuses_at_once_and_bad_requests_are_named() {
    let h = handle(2);
    let a = h.submit(req(1, 50)).unwrap();
    let b = h.submit(req(2, 50)).unwrap();
    assert_eq!(h.submit(req(3, 5)).unwrap_err(), HandleError::QueueFull { limit: 2 });
    drop((a, b));
    settled(&h);
    assert!(h.submit(req(3, 2)).is_ok(), "room again once cancelled");
    let too_long = Request::new(vec![5; 2000], SamplingParams::greedy(), 100, vec![]);
    let err = h.submit(too_long).unwrap_err().to_string();
    assert!(err.contains("2000") && err.contains("2048"), "{err}");
    let bad = Request::new(vec![60_000], SamplingParams::greedy(), 1, vec![]);
    assert!(h.submit(bad).unwrap_err().to_string().contains("outside the vocabulary"));
}

#[test]
fn a_client_may_submit_again_as_soon_as_its_last_token_arrives() {
    // One slot: the next submission right after the final token must find it free (the engine
    // used to free the slot only after delivering the token, a race a busy client would lose).
    let h = handle(1);
    for i in 0..30 {
        let tokens = collect(h.submit(req(i % 5, 2)).expect("the slot is free once the last token is seen"));
        assert_eq!(tokens.len(), 2);
    }
}

#[test]
fn a_drafting_engine_streams_the_same_tokens_and_counts_its_drafts() {
    // A prompt that repeats itself, greedy: prompt lookup drafts and the model accepts them.
    let passage: Vec<u32> = (0..40).map(|j| ((j * 7919) % 40_000) as u32 + 200).collect();
    let prompt = [&passage[..], &passage[..20]].concat();
    let r = Request::new(prompt, SamplingParams::greedy(), 24, vec![]);
    let plain = collect(handle(4).submit(r.clone()).unwrap());
    let mut e = engine(&default_model(), 2, 2048, 8);
    e.set_proposer(Some(Box::new(plumb_engine::NgramProposer::new(plumb_engine::NgramConfig::default()))));
    let h = EngineHandle::spawn(e, 4);
    assert_eq!(collect(h.submit(r).unwrap()), plain, "drafted tokens through the handle differ");
    let s = settled(&h);
    assert_eq!(s.generated_tokens_total, 24, "one event per token, however many a step kept");
    assert!(s.drafts.num_accepted_tokens > 0 && s.drafts.tokens_per_verify_step() > 1.0, "{:?}", s.drafts);
}

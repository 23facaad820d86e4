//! Drafted == undrafted, asserted with exact equality of tokens and logits bits: a request's
//! result does not depend on whether a proposer drafted for it, with which k, how good its guesses
//! were (n-gram prompt lookup; an oracle that is right then wrong; random tokens), or what else
//! shares its steps (drafted and undrafted lanes together, chunked prefill, prefix-cache hits).

#[path = "support/drafts.rs"]
mod drafts;
#[path = "support/random_draft.rs"]
mod random_draft;
#[path = "support/smollm2.rs"]
mod smollm2;

use drafts::*;
use plumb_backend_cpu::CpuBackend;
use plumb_engine::{DraftQuery, NgramConfig, NgramProposer, Proposer, Request};

#[test]
fn ngram_drafts_with_every_k_equal_plain_decoding() {
    let reqs: Vec<Request> = (0..2).map(|i| Request::new(copying_prompt(40, i), params(i * 3), 20, vec![])).collect();
    let want = undrafted(&reqs);
    for k in 1..=8 {
        let mut e = engine(64, 4, ngram(k, 3));
        let got = run(&mut e, &reqs, &[0, 0]);
        assert!(got == want, "n-gram drafts with k = {k} differ from plain decoding");
        let s = e.draft_stats();
        assert!(s.num_accepted_tokens > 0, "k = {k}: the copying prompt should accept drafts: {s:?}");
    }
}

/// Knows each request's undrafted output; proposes it right up to a varying point, then wrong.
struct Oracle {
    /// Full token sequences (prompt + undrafted output) it can continue.
    known: Vec<Vec<u32>>,
    calls: usize,
}

impl Proposer<CpuBackend> for Oracle {
    fn propose(&mut self, _: &CpuBackend, queries: &[DraftQuery<'_>]) -> Vec<Vec<u32>> {
        queries.iter().map(|q| self.lane(q.tokens, q.max_drafts)).collect()
    }
}

impl Oracle {
    fn lane(&mut self, tokens: &[u32], max_drafts: usize) -> Vec<u32> {
        self.calls += 1;
        let Some(full) = self.known.iter().find(|f| f.len() > tokens.len() && f.starts_with(tokens)) else {
            return Vec::new();
        };
        let right = self.calls % (max_drafts + 1);
        let mut drafts: Vec<u32> = full[tokens.len()..].iter().take(max_drafts).copied().collect();
        for (j, d) in drafts.iter_mut().enumerate().skip(right) {
            *d = (*d + 1 + j as u32) % 49_152;
        }
        drafts
    }
}

/// Random tokens: every draft is (almost surely) rejected.
struct Random(u64);

impl Proposer<CpuBackend> for Random {
    fn propose(&mut self, _: &CpuBackend, queries: &[DraftQuery<'_>]) -> Vec<Vec<u32>> {
        let mut token = || {
            self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) as u32 % 49_152
        };
        queries.iter().map(|q| (0..q.max_drafts).map(|_| token()).collect()).collect()
    }
}

#[test]
fn eight_mixed_lanes_with_any_proposer_equal_plain_decoding() {
    let plain = eight(None);
    let first = undrafted(&plain);
    let reqs = eight(Some(&first));
    let want = undrafted(&reqs);
    assert!(want.iter().filter(|t| t.finished == Some(plumb_engine::FinishReason::Stop)).count() >= 2);
    let known: Vec<Vec<u32>> = reqs.iter().zip(&want).map(|(r, t)| [&r.prompt[..], &t.tokens[..]].concat()).collect();
    let arrive = [0, 0, 1, 2, 3, 5, 8, 13];
    let proposers: Vec<(&str, Box<dyn Proposer<CpuBackend>>)> = vec![
        ("ngram k=4", Box::new(NgramProposer::new(NgramConfig::default()))),
        ("oracle", Box::new(Oracle { known, calls: 0 })),
        ("random", Box::new(Random(1))),
    ];
    for (name, p) in proposers {
        // 37-row steps: prompts arrive in chunks beside drafting lanes.
        let mut e = engine(37, 8, Some(p));
        let got = run(&mut e, &reqs, &arrive);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g == w, "{name}: request {i} differs from plain decoding");
        }
        let s = e.draft_stats();
        assert!(s.num_draft_tokens > 0, "{name} drafted nothing: {s:?}");
        if name == "oracle" {
            assert!(s.tokens_per_verify_step() > 1.5, "the oracle should be accepted often: {s:?}");
        }
        assert_eq!(e.stats().num_blocks_in_use, 0);
    }
}

#[test]
fn drafted_second_turns_from_the_prefix_cache_equal_plain_decoding() {
    let turn1 = copying_prompt(48, 3);
    let first = Request::new(turn1.clone(), params(0), 24, vec![]);
    let mut e = engine(64, 4, ngram(6, 2));
    let drafted_first = run(&mut e, std::slice::from_ref(&first), &[0]).remove(0);
    assert_eq!(drafted_first, undrafted(std::slice::from_ref(&first))[0]);
    // The second turn starts from the cached first turn, whose blocks were filled by verify rows.
    let mut turn2 = turn1;
    turn2.extend(&drafted_first.tokens);
    turn2.extend(prompt(9, 4));
    let second = Request::new(turn2, params(3), 16, vec![]);
    let before = e.stats().prefix_cache_hit_tokens;
    let got = run(&mut e, std::slice::from_ref(&second), &[0]).remove(0);
    assert!(e.stats().prefix_cache_hit_tokens - before >= 64, "{:?}", e.stats());
    let mut fresh = engine(64, 1, None);
    let mut r = second.clone();
    r.cache_salt = 1;
    assert!(got == run(&mut fresh, &[r], &[0]).remove(0), "a drafted turn from the cache differs from fresh");
    assert!(e.draft_stats().num_accepted_tokens > 0, "{:?}", e.draft_stats());
}

//! plumb-sampling: turns one row of logits into the next token.
//! Pure and device-free. Invariant: the token drawn depends only on the logits, the parameters,
//! the sequence's own history and the (seed, position) pair — never on what else is batched.
#![forbid(unsafe_code)]

mod defaults;
mod params;
mod rng;

pub use defaults::SamplingDefaults;
pub use params::{SamplingError, SamplingParams};
pub use rng::uniform;

/// Picks the next token from `logits` given the sequence so far.
/// `prompt_len` splits `history` into prompt and generated tokens (frequency and presence
/// penalties count generated tokens only, as OpenAI defines them; the repetition penalty counts all).
pub fn sample(logits: &[f32], p: &SamplingParams, history: &[u32], prompt_len: usize, position: u64) -> u32 {
    let penalized;
    let logits = if p.has_penalties() {
        let mut v = logits.to_vec();
        apply_penalties(&mut v, p, history, prompt_len);
        penalized = v;
        &penalized[..]
    } else {
        logits
    };
    if p.is_greedy() {
        return argmax(logits);
    }
    let inv_t = 1.0 / p.temperature as f64;
    let mut cand: Vec<(u32, f64)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l as f64 * inv_t)).collect();
    // Highest logit first; ties by lower id, so the order is a pure function of the logits.
    cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    if p.top_k > 0 {
        cand.truncate(p.top_k);
    }
    let max = cand[0].1;
    let mut probs: Vec<f64> = cand.iter().map(|&(_, l)| (l - max).exp()).collect();
    let total: f64 = probs.iter().sum();
    probs.iter_mut().for_each(|x| *x /= total);
    let mut keep = probs.len();
    if p.top_p < 1.0 {
        let mut cum = 0.0;
        for (i, &q) in probs.iter().enumerate() {
            cum += q;
            if cum >= p.top_p as f64 {
                keep = i + 1;
                break;
            }
        }
    }
    if p.min_p > 0.0 {
        let floor = probs[0] * p.min_p as f64;
        keep = keep.min(probs.iter().take_while(|&&q| q >= floor).count().max(1));
    }
    let kept: f64 = probs[..keep].iter().sum();
    let u = uniform(p.seed, position) * kept;
    let mut cum = 0.0;
    for i in 0..keep {
        cum += probs[i];
        if u < cum {
            return cand[i].0;
        }
    }
    cand[keep - 1].0
}

/// Verifies drafts: `rows[j]` is the logits row of the sequence's position `history.len() + j`,
/// computed with `drafts[..j]` appended to `history`. Samples row after row exactly as `sample`
/// would with that history and position, and stops at the first sample that differs from its
/// draft. Returns the kept tokens: the accepted drafts, then that first differing sample (or the
/// sample after the last draft) — so a drafted sequence keeps exactly the tokens it would have
/// sampled one by one. `rows` needs `drafts.len() + 1` rows.
pub fn sample_drafted<'r>(
    rows: impl IntoIterator<Item = &'r [f32]>,
    drafts: &[u32],
    p: &SamplingParams,
    history: &[u32],
    prompt_len: usize,
) -> Vec<u32> {
    let mut rows = rows.into_iter();
    let first = rows.next().expect("a verify step has at least one row");
    let token = sample(first, p, history, prompt_len, history.len() as u64);
    let mut kept = vec![token];
    if drafts.first() != Some(&token) {
        return kept;
    }
    let mut extended = history.to_vec();
    for (j, row) in rows.enumerate().take(drafts.len()) {
        extended.push(drafts[j]);
        let token = sample(row, p, &extended, prompt_len, extended.len() as u64);
        kept.push(token);
        if drafts.get(j + 1) != Some(&token) {
            break;
        }
    }
    kept
}

/// Index of the largest logit; the lowest index among equals.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

fn apply_penalties(logits: &mut [f32], p: &SamplingParams, history: &[u32], prompt_len: usize) {
    for &(t, bias) in &p.logit_bias {
        if let Some(l) = logits.get_mut(t as usize) {
            *l += bias;
        }
    }
    if p.repetition_penalty != 1.0 {
        let mut seen = vec![false; logits.len()];
        for &t in history {
            if let Some(s) = seen.get_mut(t as usize) {
                *s = true;
            }
        }
        for (l, _) in logits.iter_mut().zip(&seen).filter(|(_, s)| **s) {
            *l = if *l > 0.0 { *l / p.repetition_penalty } else { *l * p.repetition_penalty };
        }
    }
    if p.frequency_penalty != 0.0 || p.presence_penalty != 0.0 {
        let mut counts = std::collections::HashMap::<u32, u32>::new();
        for &t in &history[prompt_len.min(history.len())..] {
            *counts.entry(t).or_default() += 1;
        }
        for (t, c) in counts {
            if let Some(l) = logits.get_mut(t as usize) {
                *l -= c as f32 * p.frequency_penalty + p.presence_penalty;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> SamplingParams {
        SamplingParams { temperature: 1.0, seed: 7, ..SamplingParams::default() }
    }

    #[test]
    fn greedy_takes_the_first_maximum() {
        assert_eq!(sample(&[1.0, 3.0, 3.0, 2.0], &SamplingParams::greedy(), &[], 0, 0), 1);
    }

    #[test]
    fn same_seed_and_position_same_token() {
        let logits: Vec<f32> = (0..100).map(|i| (i as f32 * 0.37).sin()).collect();
        let a: Vec<u32> = (0..50).map(|pos| sample(&logits, &params(), &[], 0, pos)).collect();
        let b: Vec<u32> = (0..50).map(|pos| sample(&logits, &params(), &[], 0, pos)).collect();
        assert_eq!(a, b);
        let c: Vec<u32> =
            (0..50).map(|pos| sample(&logits, &SamplingParams { seed: 8, ..params() }, &[], 0, pos)).collect();
        assert_ne!(a, c);
    }

    #[test]
    fn top_k_one_is_greedy() {
        let logits = [0.5, 2.0, 1.0];
        for pos in 0..20 {
            assert_eq!(sample(&logits, &SamplingParams { top_k: 1, ..params() }, &[], 0, pos), 1);
        }
    }

    #[test]
    fn top_p_and_min_p_cut_the_tail() {
        // Probabilities ≈ [0.665, 0.245, 0.090]: top_p 0.6 keeps only the first.
        let logits = [2.0, 1.0, 0.0];
        for pos in 0..50 {
            assert_eq!(sample(&logits, &SamplingParams { top_p: 0.6, ..params() }, &[], 0, pos), 0);
            assert_ne!(sample(&logits, &SamplingParams { min_p: 0.2, ..params() }, &[], 0, pos), 2);
        }
    }

    #[test]
    fn sampling_follows_the_distribution() {
        let logits = [0.0f32, (3.0f32).ln()]; // p = [0.25, 0.75]
        let ones = (0..4000).filter(|&pos| sample(&logits, &params(), &[], 0, pos) == 1).count();
        assert!((2850..3150).contains(&ones), "{ones} of 4000");
    }

    #[test]
    fn penalties_push_repeats_down() {
        let logits = [1.0, 1.1];
        let greedy = SamplingParams::greedy();
        assert_eq!(sample(&logits, &SamplingParams { repetition_penalty: 1.5, ..greedy.clone() }, &[1], 1, 0), 0);
        assert_eq!(sample(&logits, &SamplingParams { presence_penalty: 0.5, ..greedy.clone() }, &[1], 0, 0), 0);
        // The frequency penalty ignores prompt tokens.
        assert_eq!(sample(&logits, &SamplingParams { frequency_penalty: 0.5, ..greedy }, &[1], 1, 0), 1);
    }

    #[test]
    fn logit_bias_moves_and_bans_tokens() {
        let logits = [1.0, 1.1, 0.5];
        let greedy = SamplingParams::greedy();
        assert_eq!(sample(&logits, &SamplingParams { logit_bias: vec![(2, 1.0)], ..greedy.clone() }, &[], 0, 0), 2);
        let ban = SamplingParams { logit_bias: vec![(0, -100.0), (1, -100.0)], ..params() };
        assert!((0..50).all(|pos| sample(&logits, &ban, &[], 0, pos) == 2));
        assert!(SamplingParams { logit_bias: vec![(0, 101.0)], ..greedy.clone() }.validate().is_err());
        assert!(SamplingParams { logit_bias: vec![(1, 1.0), (1, 2.0)], ..greedy.clone() }.validate().is_err());
        assert!(SamplingParams { logit_bias: vec![(f32::NAN.to_bits(), f32::NAN)], ..greedy }.validate().is_err());
    }

    #[test]
    fn drafted_sampling_keeps_what_one_by_one_sampling_draws() {
        let p = SamplingParams { temperature: 0.8, repetition_penalty: 1.3, seed: 5, ..SamplingParams::default() };
        let rows: Vec<Vec<f32>> =
            (0..6).map(|r| (0..8).map(|i| ((i * 7 + r * 3) % 5) as f32 * 0.4).collect()).collect();
        let history = [1u32, 2, 3];
        let mut solo = history.to_vec();
        for row in &rows {
            let t = sample(row, &p, &solo, 2, solo.len() as u64);
            solo.push(t);
        }
        let want = &solo[3..];
        let all = sample_drafted(rows.iter().map(|r| &r[..]), &want[..5], &p, &history, 2);
        assert_eq!(all, want, "right drafts are all kept, plus the sample after them");
        let mut wrong = want[..5].to_vec();
        wrong[2] = (wrong[2] + 1) % 8;
        let cut = sample_drafted(rows.iter().map(|r| &r[..]), &wrong, &p, &history, 2);
        assert_eq!(cut, want[..3], "kept up to and including the first differing sample");
    }
}

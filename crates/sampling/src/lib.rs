//! plumb-sampling: turns one row of logits into the next token.
//! Pure and device-free. Invariant: the token drawn depends only on the logits, the parameters,
//! the sequence's own history and the (seed, position) pair — never on what else is batched.
#![forbid(unsafe_code)]

mod defaults;
mod params;
mod rng;

pub use defaults::SamplingDefaults;
pub use params::{SamplingError, SamplingParams};
pub use plumb_core::pick::{argmax, top_k};
pub use rng::uniform;

use plumb_core::pick::{LogitEdit, MAX_DEVICE_TOP_K, Penalties, Pick, Picked};

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
    let k = if p.top_k > 0 { p.top_k } else { logits.len() };
    draw(&top_k(logits, k), p, position)
}

/// What a backend must compute from a row of logits for this request to be sampled from it
/// alone ([`sample_picked`]), or None when the sampler needs the whole row (no top-k cut, or a
/// top-k larger than a device reduction returns).
pub fn device_pick(p: &SamplingParams) -> Option<Pick> {
    if p.is_greedy() {
        Some(Pick::Argmax)
    } else if (1..=MAX_DEVICE_TOP_K).contains(&p.top_k) {
        Some(Pick::TopK(p.top_k))
    } else {
        None
    }
}

/// The token `sample` draws, from the row's reduction by `device_pick(p)` after the request's
/// [`edits`] — the same token, since the sampler reads nothing else of the row.
pub fn sample_picked(picked: &Picked, p: &SamplingParams, position: u64) -> u32 {
    match picked {
        Picked::Argmax(t) => *t,
        Picked::TopK(cand) => draw(cand, p, position),
    }
}

/// The per-token logit edits of the request's bias and penalties for this history (tokens at
/// or beyond `vocab_size` are skipped, as `sample` skips them).
pub fn edits(p: &SamplingParams, history: &[u32], prompt_len: usize, vocab_size: usize) -> Vec<LogitEdit> {
    let mut by_token = std::collections::BTreeMap::<u32, LogitEdit>::new();
    let blank = |token| LogitEdit { token, has_bias: false, bias: 0.0, repeated: false, count: 0 };
    for &(t, bias) in &p.logit_bias {
        let e = by_token.entry(t).or_insert_with(|| blank(t));
        (e.has_bias, e.bias) = (true, bias);
    }
    if p.repetition_penalty != 1.0 {
        for &t in history {
            by_token.entry(t).or_insert_with(|| blank(t)).repeated = true;
        }
    }
    if p.frequency_penalty != 0.0 || p.presence_penalty != 0.0 {
        for &t in &history[prompt_len.min(history.len())..] {
            by_token.entry(t).or_insert_with(|| blank(t)).count += 1;
        }
    }
    by_token.into_values().filter(|e| (e.token as usize) < vocab_size).collect()
}

/// The penalty strengths [`edits`] are applied with.
pub fn penalties(p: &SamplingParams) -> Penalties {
    Penalties { repetition: p.repetition_penalty, frequency: p.frequency_penalty, presence: p.presence_penalty }
}

/// Draws from candidates in sampling order (best first): temperature, softmax over them in
/// float64, then the top-p and min-p cuts, then the position's uniform draw.
fn draw(cand: &[(u32, f32)], p: &SamplingParams, position: u64) -> u32 {
    let inv_t = 1.0 / p.temperature as f64;
    let max = cand[0].1 as f64 * inv_t;
    let mut probs: Vec<f64> = cand.iter().map(|&(_, l)| (l as f64 * inv_t - max).exp()).collect();
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
    let rows: Vec<&[f32]> = rows.into_iter().collect();
    verify_drafts(drafts, history, |j, h| sample(rows[j], p, h, prompt_len, h.len() as u64))
}

/// The verification of [`sample_drafted`] with the sampling of row `j` (given the history with
/// `drafts[..j]` appended) left to `sample_row`, for rows reduced on a device.
pub fn verify_drafts(drafts: &[u32], history: &[u32], mut sample_row: impl FnMut(usize, &[u32]) -> u32) -> Vec<u32> {
    let mut extended = history.to_vec();
    let mut kept = Vec::new();
    for j in 0..=drafts.len() {
        let token = sample_row(j, &extended);
        kept.push(token);
        if drafts.get(j) != Some(&token) {
            break;
        }
        extended.push(token);
    }
    kept
}

fn apply_penalties(logits: &mut [f32], p: &SamplingParams, history: &[u32], prompt_len: usize) {
    let pen = penalties(p);
    for e in edits(p, history, prompt_len, logits.len()) {
        logits[e.token as usize] = e.apply(logits[e.token as usize], &pen);
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

    /// The device path's contract: a row reduced by `device_pick` after `edits` samples the token
    /// `sample` draws from the whole row — across temperatures, cuts, penalties, ties and signed
    /// zeros (rows from a small value set, so ties are common).
    #[test]
    fn a_picked_row_samples_what_the_whole_row_samples() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let values = [-2.0f32, -0.5, -0.0, 0.0, 0.25, 1.0, 1.5, 3.0];
        let mut checked = 0;
        for case in 0..3000u64 {
            let vocab = 1 + (next() % 40) as usize;
            let row: Vec<f32> = (0..vocab).map(|_| values[(next() % 8) as usize]).collect();
            let history: Vec<u32> = (0..next() % 12).map(|_| (next() % 45) as u32).collect();
            let prompt_len = (next() as usize) % (history.len() + 1);
            let p = SamplingParams {
                temperature: [0.0, 0.3, 1.0, 1.7][(next() % 4) as usize],
                top_k: (next() % 6) as usize,
                top_p: [1.0, 0.9, 0.5][(next() % 3) as usize],
                min_p: [0.0, 0.1][(next() % 2) as usize],
                repetition_penalty: [1.0, 1.3][(next() % 2) as usize],
                frequency_penalty: [0.0, 0.4][(next() % 2) as usize],
                presence_penalty: [0.0, -0.3][(next() % 2) as usize],
                seed: next(),
                logit_bias: if next() % 3 == 0 { vec![(1, 2.5), (7, -1.0), (60, 3.0)] } else { Vec::new() },
            };
            let Some(pick) = device_pick(&p) else { continue };
            let r = plumb_core::PickRow {
                row: 0,
                pick,
                penalties: penalties(&p),
                edits: edits(&p, &history, prompt_len, vocab),
            };
            let picked = plumb_core::pick::pick_host(&row, &r);
            let position = history.len() as u64 + case;
            let want = sample(&row, &p, &history, prompt_len, position);
            assert_eq!(sample_picked(&picked, &p, position), want, "case {case}: {p:?}");
            checked += 1;
        }
        assert!(checked > 1500, "{checked} picked cases");
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

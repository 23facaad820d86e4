//! Log-probabilities of sampled tokens: the model's own distribution (the raw logits row, before
//! any sampling parameter), in float64. [`logprobs_host`] is the definition; a backend may compute
//! them where the logits live ([`crate::Backend::logprobs`]) so that only these few numbers cross
//! to the host. A device's log-sum-exp sums in its own fixed order and with its own `exp`, so its
//! values equal the definition's within [`LOGPROB_TOLERANCE`], and its alternatives are the same
//! tokens in the same order; being a function of the row alone, they never depend on the batch.

/// How far a backend's log-probabilities may be from [`logprobs_host`] (absolute, in nats).
pub const LOGPROB_TOLERANCE: f64 = 1e-9;

/// The most alternatives a request may ask for (OpenAI's `top_logprobs` limit).
pub const MAX_LOGPROBS: usize = 20;

/// A token's log-probability and the most likely alternatives at its position.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    pub token: u32,
    pub logprob: f64,
    /// (token, logprob), most likely first, ties by lower id.
    pub top: Vec<(u32, f64)>,
}

/// One log-probability to compute: `token` of logits row `row`, with `top` alternatives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogprobRow {
    pub row: usize,
    pub token: u32,
    /// At most [`MAX_LOGPROBS`].
    pub top: usize,
}

/// The definition: log-softmax of `row` at `token` (the log-sum-exp in float64, summed in index
/// order after subtracting the row's maximum), with the `n` most likely tokens by the order of
/// their logits (`>`; NaN never ahead of a number; ties by lower id).
pub fn logprobs_host(row: &[f32], token: u32, n: usize) -> TokenLogprobs {
    let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
    let lse = max + row.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln();
    let mut top: Vec<(u32, f64)> = Vec::with_capacity(n + 1);
    if n > 0 {
        for (i, &v) in row.iter().enumerate() {
            let better = |t: &(u32, f64)| (v as f64) > t.1 || ((v as f64) == t.1 && (i as u32) < t.0);
            if top.len() < n || better(top.last().expect("non-empty")) {
                let at = top.partition_point(|t| !better(t));
                top.insert(at, (i as u32, v as f64));
                top.truncate(n);
            }
        }
    }
    TokenLogprobs {
        token,
        logprob: row[token as usize] as f64 - lse,
        top: top.into_iter().map(|(t, v)| (t, v - lse)).collect(),
    }
}

/// Whether `got` is `want` as a backend may compute it: the same token and alternatives in the
/// same order, every value within [`LOGPROB_TOLERANCE`] (a NaN anywhere is a mismatch).
pub fn logprobs_match(got: &TokenLogprobs, want: &TokenLogprobs) -> bool {
    let close = |a: f64, b: f64| (a - b).abs() <= LOGPROB_TOLERANCE || (a == b && a.is_infinite());
    got.token == want.token
        && close(got.logprob, want.logprob)
        && got.top.len() == want.top.len()
        && got.top.iter().zip(&want.top).all(|(g, w)| g.0 == w.0 && close(g.1, w.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_a_log_softmax_with_ordered_alternatives() {
        let row = [1.0f32, 3.0, 3.0, -2.0, 0.5];
        let lp = logprobs_host(&row, 4, 3);
        let total: f64 = row.iter().map(|&v| (v as f64).exp()).sum();
        assert!((lp.logprob - (0.5f64.exp() / total).ln()).abs() < 1e-12);
        assert_eq!(lp.top.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 2, 0], "ties by lower id");
        assert!((lp.top[0].1 - (3f64.exp() / total).ln()).abs() < 1e-12);
        assert!(logprobs_host(&row, 0, 0).top.is_empty());
    }

    #[test]
    fn a_match_allows_rounding_and_nothing_else() {
        let row = [0.25f32, -1.0, 2.0, 2.0];
        let want = logprobs_host(&row, 1, 2);
        let mut got = want.clone();
        got.logprob += 1e-12;
        assert!(logprobs_match(&got, &want));
        got.logprob = f64::NAN;
        assert!(!logprobs_match(&got, &want), "NaN must fail");
        let mut swapped = want.clone();
        swapped.top.swap(0, 1);
        assert!(!logprobs_match(&swapped, &want), "tied alternatives keep id order");
        let mut far = want.clone();
        far.top[1].1 += 1e-6;
        assert!(!logprobs_match(&far, &want));
    }
}

//! What a step reports per sampled token: the token, whether it finished its request, and the
//! log-probabilities or raw logits the request asked for. Log-probabilities are of the model's
//! own distribution (before sampling parameters), computed in float64.

use crate::RequestState;
use plumb_scheduler::{FinishReason, SeqId, SeqUpdate};
use std::collections::HashMap;

/// A token's log-probability and the most likely alternatives at its position.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    pub token: u32,
    pub logprob: f64,
    /// (token, logprob), most likely first, ties by lower id.
    pub top: Vec<(u32, f64)>,
}

/// One token of one request (a step may yield several per request when drafts are accepted).
#[derive(Clone, Debug, PartialEq)]
pub struct StepOutput {
    pub seq_id: SeqId,
    pub token: u32,
    /// Set when this token ended the request (its lane and blocks are free again).
    pub finished: Option<FinishReason>,
    pub logprobs: Option<TokenLogprobs>,
    /// The raw logits row this token was sampled from, if the request asked for it.
    pub logits: Option<Vec<f32>>,
}

/// Per sampled token, what its request asked for besides the token.
#[derive(Debug, Default)]
pub(crate) struct Extras {
    pub logprobs: Option<TokenLogprobs>,
    pub logits: Option<Vec<f32>>,
}

/// A sampling item's extras: its sequence, one entry per kept token.
pub(crate) type ItemExtras = (SeqId, Vec<Extras>);

/// log-softmax of `row` at `token`, with the `n` most likely tokens.
pub(crate) fn logprobs(row: &[f32], token: u32, n: usize) -> TokenLogprobs {
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

/// Pairs the scheduler's updates with their extras and forgets finished requests. `extras`
/// holds one list per sampling item, one entry per kept token; the updates of an item are a
/// prefix of its kept tokens (a finishing token drops the rest), in item order.
pub(crate) fn emit(
    updates: Vec<SeqUpdate>,
    extras: Vec<ItemExtras>,
    requests: &mut HashMap<SeqId, RequestState>,
) -> Vec<StepOutput> {
    let mut extras = extras.into_iter().map(|(id, e)| (id, e.into_iter()));
    let mut current: Option<(SeqId, std::vec::IntoIter<Extras>)> = None;
    updates
        .into_iter()
        .map(|u| {
            if current.as_ref().is_none_or(|(id, _)| *id != u.seq_id) {
                // Items without updates (none in a normal step) are skipped.
                current = extras.find(|(id, _)| *id == u.seq_id);
            }
            let e = current.as_mut().and_then(|(_, it)| it.next()).expect("one extras entry per kept token");
            if u.finished.is_some() {
                requests.remove(&u.seq_id);
            }
            StepOutput {
                seq_id: u.seq_id,
                token: u.token,
                finished: u.finished,
                logprobs: e.logprobs,
                logits: e.logits,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_a_log_softmax_with_ordered_alternatives() {
        let row = [1.0f32, 3.0, 3.0, -2.0, 0.5];
        let lp = logprobs(&row, 4, 3);
        let total: f64 = row.iter().map(|&v| (v as f64).exp()).sum();
        assert!((lp.logprob - (0.5f64.exp() / total).ln()).abs() < 1e-12);
        assert_eq!(lp.top.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 2, 0], "ties by lower id");
        let sum: f64 = row.iter().map(|&v| (v as f64 - lp.top[0].1 - 3.0).exp()).sum::<f64>();
        assert!(sum.is_finite());
        assert!(logprobs(&row, 0, 0).top.is_empty());
    }
}

//! What a step reports per sampled token: the token, whether it finished its request, and the
//! log-probabilities or raw logits the request asked for. Log-probabilities are of the model's
//! own distribution (before sampling parameters), computed in float64.

use crate::RequestState;
pub use plumb_core::TokenLogprobs;
use plumb_scheduler::{FinishReason, SeqId, SeqUpdate};
use std::collections::HashMap;

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

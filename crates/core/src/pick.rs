//! Sampling on the device: what a backend computes from a logits row so that the host can draw
//! the token by `plumb-sampling`'s rule without the row leaving the device.
//!
//! A row is first edited (logit bias and penalties, [`LogitEdit`]), then reduced to what its
//! sampler reads: its argmax for a greedy request ([`Pick::Argmax`]), its `k` best candidates in
//! sampling order for a top-k request ([`Pick::TopK`]). Both reductions are functions of the
//! row alone with a total order on ties, so a backend that computes them in any order, any
//! number of rows at once, returns the same ids and bits as [`pick_host`], the definition.
//!
//! Everything here is exact: the edits are the sampler's own float32 operations, and the
//! reductions compare and copy values. The host rule stays the only rule.

/// How a request's penalties change one token's logit: `l + bias` (when `has_bias`), then the
/// repetition penalty (when `repeated`: `l / r` if positive, else `l · r`), then
/// `l − (count · frequency + presence)` (when `count > 0`); a NaN result is `f32::NAN`. One entry
/// per touched token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogitEdit {
    pub token: u32,
    pub has_bias: bool,
    pub bias: f32,
    pub repeated: bool,
    /// Occurrences among the generated tokens (0: no frequency/presence term).
    pub count: u32,
}

/// The penalty strengths a row's edits use.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Penalties {
    pub repetition: f32,
    pub frequency: f32,
    pub presence: f32,
}

impl LogitEdit {
    /// The edited logit, in the sampler's float32 operations and order.
    pub fn apply(&self, l: f32, p: &Penalties) -> f32 {
        let mut l = l;
        if self.has_bias {
            l += self.bias;
        }
        if self.repeated {
            l = if l > 0.0 { l / p.repetition } else { l * p.repetition };
        }
        if self.count > 0 {
            l -= self.count as f32 * p.frequency + p.presence;
        }
        // Which NaN an operation on a NaN returns differs between processors (x86 keeps the
        // operand's sign and payload, a GPU returns its canonical NaN), and the top-k order
        // tells NaNs apart: an edited NaN is this one NaN everywhere.
        if l.is_nan() { f32::NAN } else { l }
    }
}

/// What the host needs from one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// The index of the largest logit (IEEE `>`, so +0 and −0 tie; NaN never wins unless it is at
    /// index 0, which then wins), lowest index among equals.
    Argmax,
    /// The `k` best (token, logit) pairs, best first: by the total order of the float32 logit
    /// (`f32::total_cmp`), ties by lower token id.
    TopK(usize),
}

/// One row of a step's logits to reduce on the device.
#[derive(Clone, Debug, PartialEq)]
pub struct PickRow {
    /// Its row in the logits tensor.
    pub row: usize,
    pub pick: Pick,
    pub penalties: Penalties,
    /// Sorted by token, one per token, every token below the vocabulary size.
    pub edits: Vec<LogitEdit>,
}

/// A row reduced by its [`Pick`].
#[derive(Clone, Debug, PartialEq)]
pub enum Picked {
    Argmax(u32),
    TopK(Vec<(u32, f32)>),
}

/// The most candidates a device top-k returns; larger `k` reads the row on the host.
pub const MAX_DEVICE_TOP_K: usize = 256;

/// The definition: `row` edited by `r.edits`, then reduced by `r.pick`.
pub fn pick_host(row: &[f32], r: &PickRow) -> Picked {
    let mut edited;
    let row = if r.edits.is_empty() {
        row
    } else {
        edited = row.to_vec();
        for e in &r.edits {
            edited[e.token as usize] = e.apply(edited[e.token as usize], &r.penalties);
        }
        &edited[..]
    };
    match r.pick {
        Pick::Argmax => Picked::Argmax(argmax(row)),
        Pick::TopK(k) => Picked::TopK(top_k(row, k)),
    }
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

/// The `k` best (token, logit) pairs of `logits` in sampling order (total order, best first;
/// ties by lower token id).
pub fn top_k(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut cand: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect();
    let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if k < cand.len() {
        cand.select_nth_unstable_by(k, order);
        cand.truncate(k);
    }
    cand.sort_by(order);
    cand
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_follows_ieee_greater_than() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0]), 1);
        assert_eq!(argmax(&[-0.0, 0.0]), 0, "+0 and -0 tie");
        assert_eq!(argmax(&[1.0, f32::NAN, 2.0]), 2, "NaN never wins");
        assert_eq!(argmax(&[f32::NAN, 5.0]), 0, "a NaN at index 0 is never beaten");
        assert_eq!(argmax(&[f32::NEG_INFINITY; 3]), 0);
    }

    #[test]
    fn top_k_is_the_sorted_prefix_in_total_order() {
        let row = [0.5, 2.0, -0.0, 0.0, 2.0, f32::NEG_INFINITY];
        assert_eq!(top_k(&row, 4), vec![(1, 2.0), (4, 2.0), (0, 0.5), (3, 0.0)]);
        assert_eq!(top_k(&row, 10).len(), 6);
        let all = top_k(&row, 6);
        assert_eq!(all[4], (2, -0.0), "-0 sorts below +0 in the total order");
    }

    #[test]
    fn edits_apply_in_the_samplers_order() {
        let p = Penalties { repetition: 2.0, frequency: 0.5, presence: 0.25 };
        let e = LogitEdit { token: 0, has_bias: true, bias: -3.0, repeated: true, count: 2 };
        // (1 - 3) · 2 - (2 · 0.5 + 0.25)
        assert_eq!(e.apply(1.0, &p), -5.25);
        let r = PickRow { row: 0, pick: Pick::Argmax, penalties: p, edits: vec![e] };
        assert_eq!(pick_host(&[1.0, -1.0], &r), Picked::Argmax(1));
        // Whatever NaN goes in, the one NaN comes out (so a device's canonical NaN sorts alike).
        let negative_nan = f32::from_bits(0xFFC0_0001);
        assert_eq!(e.apply(negative_nan, &p).to_bits(), f32::NAN.to_bits());
    }
}

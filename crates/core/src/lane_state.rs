//! Host storage of per-lane state (`KvSpec::lane_state`) for backends that keep it in host
//! memory (the reference and CPU backends). It owns the slots and the one rule that keeps them
//! honest: a slot remembers how many tokens its state has absorbed, a lane starting at position 0
//! starts from zeros, and any other step must continue exactly there — so a runner bug (a slot
//! reused without a reset, a resumed request whose state was never computed) panics instead of
//! silently computing from the wrong state.

use crate::batch::{ForwardBatch, LaneStateSpec};

/// Which of a state layer's two buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatePart {
    /// The last K − 1 inputs of the causal convolution: [K − 1, C].
    Conv,
    /// The delta rule's matrices: [num_v_heads, dk, dv].
    Recurrent,
}

/// Per state layer and slot: the state and how many tokens it has absorbed.
#[derive(Debug)]
pub struct LaneStateStore<T> {
    pub spec: LaneStateSpec,
    conv: Vec<Vec<T>>,
    recurrent: Vec<Vec<T>>,
    /// [part][layer][slot] tokens absorbed.
    len: [Vec<Vec<u32>>; 2],
}

impl<T: Copy + Default> LaneStateStore<T> {
    pub fn new(spec: &LaneStateSpec) -> Self {
        let buf = |floats: usize| (0..spec.num_layers).map(|_| vec![T::default(); spec.num_slots * floats]).collect();
        let lens = || (0..spec.num_layers).map(|_| vec![0u32; spec.num_slots]).collect();
        LaneStateStore {
            spec: *spec,
            conv: buf(spec.conv_floats),
            recurrent: buf(spec.recurrent_floats),
            len: [lens(), lens()],
        }
    }

    /// The state of `slot` in `layer` that a run of `num_rows` tokens from `first_pos` is about to
    /// update: zeroed when `first_pos` is 0, otherwise it must hold exactly `first_pos` tokens.
    /// Records the run as absorbed.
    pub fn take(&mut self, part: StatePart, layer: usize, slot: usize, first_pos: usize, num_rows: usize) -> &mut [T] {
        let spec = self.spec;
        assert!(layer < spec.num_layers && slot < spec.num_slots, "lane state {layer}/{slot} outside {spec:?}");
        let (bufs, floats, p) = match part {
            StatePart::Conv => (&mut self.conv, spec.conv_floats, 0),
            StatePart::Recurrent => (&mut self.recurrent, spec.recurrent_floats, 1),
        };
        let len = &mut self.len[p][layer][slot];
        let state = &mut bufs[layer][slot * floats..(slot + 1) * floats];
        if first_pos == 0 {
            state.fill(T::default());
        } else {
            assert_eq!(
                *len as usize, first_pos,
                "{part:?} state of layer {layer}, slot {slot} holds {len} tokens, but the batch continues at \
                 position {first_pos} (a runner bug: the state was reset, reused or never computed)"
            );
        }
        *len = (first_pos + num_rows) as u32;
        state
    }
}

/// One lane's rows of a batch: its state slot, its first position and its rows in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneRun {
    pub slot: usize,
    pub first_pos: usize,
    pub rows: Vec<usize>,
}

/// The batch's rows grouped by lane, each lane's rows at consecutive positions (panics
/// otherwise, and when the batch names no state slots: a runner bug).
pub fn lane_runs(batch: &ForwardBatch) -> Vec<LaneRun> {
    assert_eq!(batch.state_slots.len(), batch.lanes.len(), "a model with lane state needs a state slot per lane");
    let mut runs: Vec<LaneRun> =
        batch.state_slots.iter().map(|&s| LaneRun { slot: s as usize, first_pos: 0, rows: Vec::new() }).collect();
    for r in 0..batch.num_rows() {
        let run = &mut runs[batch.row_lane[r] as usize];
        let pos = batch.positions[r] as usize;
        match run.rows.last() {
            None => run.first_pos = pos,
            Some(_) => assert_eq!(
                pos,
                run.first_pos + run.rows.len(),
                "row {r}: a lane's rows must be at consecutive positions for its recurrent state"
            ),
        }
        run.rows.push(r);
    }
    runs.retain(|run| !run.rows.is_empty());
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_continues_only_where_it_left_off() {
        let spec = LaneStateSpec { num_layers: 1, num_slots: 2, conv_floats: 3, recurrent_floats: 2 };
        let mut s = LaneStateStore::<f32>::new(&spec);
        s.take(StatePart::Conv, 0, 1, 0, 5).fill(7.0);
        assert_eq!(s.take(StatePart::Conv, 0, 1, 5, 1), &[7.0; 3]);
        assert_eq!(s.take(StatePart::Conv, 0, 1, 0, 2), &[0.0; 3], "position 0 starts from zeros");
        let resumed = std::panic::catch_unwind(move || {
            s.take(StatePart::Recurrent, 0, 0, 4, 1);
        });
        assert!(resumed.is_err(), "a slot that never saw positions 0..4 cannot continue at 4");
    }
}

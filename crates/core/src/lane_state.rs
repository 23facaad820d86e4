//! Host storage of per-lane state (`KvSpec::lane_state`) for backends that keep it in host
//! memory (the reference and CPU backends). It owns the slots and the one rule that keeps them
//! honest: a slot remembers how many tokens its state has absorbed, a lane starting at position 0
//! starts from zeros, and any other step must continue exactly there — so a runner bug (a slot
//! reused without a reset, a resumed request whose state was never computed) panics instead of
//! silently computing from the wrong state.
//! Snapshot slots (`LaneStateSpec::num_snapshots`) follow the lane slots in the same buffers; a
//! snapshot keeps the token count it was taken at, so a lane restored from it continues exactly
//! there and nowhere else.

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
        let num = spec.num_slots + spec.num_snapshots;
        let buf = |floats: usize| (0..spec.num_layers).map(|_| vec![T::default(); num * floats]).collect();
        let lens = || (0..spec.num_layers).map(|_| vec![0u32; num]).collect();
        LaneStateStore {
            spec: *spec,
            conv: buf(spec.conv_floats),
            recurrent: buf(spec.recurrent_floats),
            len: [lens(), lens()],
        }
    }

    /// Bytes its buffers hold (capacity, as allocated): lane and snapshot slots of every layer.
    pub fn allocated_bytes(&self) -> usize {
        let floats: usize = self.conv.iter().chain(&self.recurrent).map(Vec::capacity).sum();
        floats * std::mem::size_of::<T>()
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

    /// Ends a kernel's pass over `run` in `layer`: saves the part's state into the run's
    /// snapshot slot, if it has one (`lane_runs` ends a run at each snapshot point).
    pub fn finish_run(&mut self, part: StatePart, layer: usize, run: &LaneRun) {
        if let Some(snapshot) = run.snapshot {
            self.copy(part, layer, run.slot, self.spec.num_slots + snapshot);
        }
    }

    /// Copies lane slot `slot`'s whole state (every layer, both parts, token counts) into
    /// snapshot slot `snapshot`.
    pub fn save(&mut self, slot: usize, snapshot: usize) {
        assert!(slot < self.spec.num_slots && snapshot < self.spec.num_snapshots, "save {slot} → {snapshot}");
        self.copy_all(slot, self.spec.num_slots + snapshot);
    }

    /// Copies snapshot slot `snapshot` into lane slot `slot`, which then continues at the
    /// snapshot's token count.
    pub fn restore(&mut self, snapshot: usize, slot: usize) {
        assert!(slot < self.spec.num_slots && snapshot < self.spec.num_snapshots, "restore {snapshot} → {slot}");
        self.copy_all(self.spec.num_slots + snapshot, slot);
    }

    fn copy_all(&mut self, from: usize, to: usize) {
        for layer in 0..self.spec.num_layers {
            for part in [StatePart::Conv, StatePart::Recurrent] {
                self.copy(part, layer, from, to);
            }
        }
    }

    /// Copies one part of one layer between any two slots (lane or snapshot, by buffer index).
    fn copy(&mut self, part: StatePart, layer: usize, from: usize, to: usize) {
        let (bufs, floats, p) = match part {
            StatePart::Conv => (&mut self.conv, self.spec.conv_floats, 0),
            StatePart::Recurrent => (&mut self.recurrent, self.spec.recurrent_floats, 1),
        };
        bufs[layer].copy_within(from * floats..(from + 1) * floats, to * floats);
        self.len[p][layer][to] = self.len[p][layer][from];
    }
}

/// A run of one lane's rows of a batch: its state slot, its first position, its rows in order,
/// and the snapshot slot to save its state into once the run has been absorbed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneRun {
    pub slot: usize,
    pub first_pos: usize,
    pub rows: Vec<usize>,
    pub snapshot: Option<usize>,
}

/// The batch's rows grouped by lane, each lane's rows at consecutive positions (panics
/// otherwise, and when the batch names no state slots: a runner bug), a lane's rows split into
/// several runs in order where `batch.state_snapshots` asks for a snapshot inside them. A
/// stateful kernel processes the runs in order and calls `LaneStateStore::finish_run` after each.
pub fn lane_runs(batch: &ForwardBatch) -> Vec<LaneRun> {
    let mut out = Vec::new();
    for run in whole_lane_runs(batch) {
        let lane = batch.row_lane[run.rows[0]];
        let mut cuts: Vec<(usize, usize)> = batch
            .state_snapshots
            .iter()
            .filter(|s| s.lane == lane)
            .map(|s| (s.num_tokens as usize - run.first_pos, s.snapshot as usize))
            .collect();
        cuts.sort_unstable();
        let mut done = 0;
        for (end, snapshot) in cuts {
            assert!(done < end && end <= run.rows.len(), "snapshot outside lane {lane}'s rows (a runner bug)");
            let rows = run.rows[done..end].to_vec();
            out.push(LaneRun { slot: run.slot, first_pos: run.first_pos + done, rows, snapshot: Some(snapshot) });
            done = end;
        }
        if done < run.rows.len() {
            let rows = run.rows[done..].to_vec();
            out.push(LaneRun { slot: run.slot, first_pos: run.first_pos + done, rows, snapshot: None });
        }
    }
    out
}

fn whole_lane_runs(batch: &ForwardBatch) -> Vec<LaneRun> {
    assert_eq!(batch.state_slots.len(), batch.lanes.len(), "a model with lane state needs a state slot per lane");
    let mut runs: Vec<LaneRun> = batch
        .state_slots
        .iter()
        .map(|&s| LaneRun { slot: s as usize, first_pos: 0, rows: Vec::new(), snapshot: None })
        .collect();
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
        let spec = LaneStateSpec { num_layers: 1, num_slots: 2, conv_floats: 3, recurrent_floats: 2, num_snapshots: 0 };
        let mut s = LaneStateStore::<f32>::new(&spec);
        s.take(StatePart::Conv, 0, 1, 0, 5).fill(7.0);
        assert_eq!(s.take(StatePart::Conv, 0, 1, 5, 1), &[7.0; 3]);
        assert_eq!(s.take(StatePart::Conv, 0, 1, 0, 2), &[0.0; 3], "position 0 starts from zeros");
        let resumed = std::panic::catch_unwind(move || {
            s.take(StatePart::Recurrent, 0, 0, 4, 1);
        });
        assert!(resumed.is_err(), "a slot that never saw positions 0..4 cannot continue at 4");
    }

    #[test]
    fn a_restored_slot_continues_at_the_snapshot_and_nowhere_else() {
        let spec = LaneStateSpec { num_layers: 2, num_slots: 2, conv_floats: 2, recurrent_floats: 3, num_snapshots: 1 };
        let mut s = LaneStateStore::<f32>::new(&spec);
        for layer in 0..2 {
            s.take(StatePart::Conv, layer, 0, 0, 4).fill(layer as f32 + 1.0);
            s.take(StatePart::Recurrent, layer, 0, 0, 4).fill(layer as f32 + 5.0);
        }
        s.save(0, 0);
        s.take(StatePart::Conv, 1, 1, 0, 9).fill(-1.0);
        s.restore(0, 1);
        assert_eq!(s.take(StatePart::Conv, 1, 1, 4, 1), &[2.0; 2], "restored state, continuing at 4");
        assert_eq!(s.take(StatePart::Recurrent, 0, 1, 4, 1), &[5.0; 3]);
        s.restore(0, 1);
        let elsewhere = std::panic::catch_unwind(move || {
            s.take(StatePart::Conv, 0, 1, 9, 1);
        });
        assert!(elsewhere.is_err(), "a state restored at 4 tokens cannot continue at 9");
    }

    #[test]
    fn snapshots_split_a_lanes_rows_into_runs() {
        let mut batch = ForwardBatch::single_lane(&[1, 2, 3, 4, 5, 6], 10, 4, vec![0, 1, 2, 3]);
        batch.state_slots = vec![1];
        batch.state_snapshots = vec![
            crate::StateSnapshot { lane: 0, num_tokens: 16, snapshot: 2 },
            crate::StateSnapshot { lane: 0, num_tokens: 12, snapshot: 0 },
        ];
        batch.validate().unwrap();
        let runs = lane_runs(&batch);
        let want = [(10, vec![0, 1], Some(0)), (12, vec![2, 3, 4, 5], Some(2))];
        assert_eq!(runs.len(), 2);
        for (run, (first_pos, rows, snapshot)) in runs.iter().zip(want) {
            assert_eq!((run.slot, run.first_pos, &run.rows, run.snapshot), (1, first_pos, &rows, snapshot));
        }
        batch.state_snapshots[0].num_tokens = 17;
        assert!(batch.validate().is_err(), "a snapshot past the lane's rows is refused");
    }
}

//! `ForwardBatch`: everything a model needs to know about one engine step, and nothing more.
//! A row is one token of one sequence; rows of different lanes (and prefill chunks and decode
//! tokens) share a batch. Invariant: each row's K/V slot is inside its lane's block table, and
//! every position a row attends to (0..=position) is in the cache once the row's layer has
//! written its own K/V — so attention never depends on which other rows are in the batch.

/// KV cache geometry shared by the scheduler (which hands out blocks) and backends (which store them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvSpec {
    /// Layers with paged K/V (a hybrid model's full-attention layers only).
    pub num_layers: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    /// Positions per block.
    pub block_size: usize,
    pub num_blocks: usize,
    /// Fixed-size per-lane state beside the blocks (linear-attention layers); `NONE` for others.
    pub lane_state: LaneStateSpec,
}

/// Per-lane state of the layers whose memory is a fixed-size summary of the whole prefix (Gated
/// DeltaNet): for each of `num_layers` state layers and each of `num_slots` slots, a convolution
/// state of `conv_floats` and a recurrent state of `recurrent_floats`. A slot belongs to one lane
/// at a time (`ForwardBatch::state_slots`); it cannot be split into blocks or shared.
/// Beside the lane slots, `num_snapshots` snapshot slots of the same layout hold copies of a
/// lane's state at a block boundary for the prefix cache (`ForwardBatch::state_snapshots`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaneStateSpec {
    pub num_layers: usize,
    pub num_slots: usize,
    pub conv_floats: usize,
    pub recurrent_floats: usize,
    /// Prefix-cache snapshot slots (0: the state is never snapshotted).
    pub num_snapshots: usize,
}

impl LaneStateSpec {
    /// No lane state (attention-only models).
    pub const NONE: LaneStateSpec =
        LaneStateSpec { num_layers: 0, num_slots: 0, conv_floats: 0, recurrent_floats: 0, num_snapshots: 0 };

    /// Bytes one slot takes across all state layers, in f32: constant in the sequence length.
    pub fn bytes_per_slot(&self) -> usize {
        self.num_layers * (self.conv_floats + self.recurrent_floats) * 4
    }

    /// Bytes of every lane slot and snapshot slot together: what a backend allocates for it.
    pub fn total_bytes(&self) -> usize {
        (self.num_slots + self.num_snapshots) * self.bytes_per_slot()
    }
}

/// Save lane `lane`'s state into snapshot slot `snapshot` at the moment it has absorbed exactly
/// `num_tokens` tokens (a block boundary inside or at the end of the lane's rows of this step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateSnapshot {
    pub lane: u32,
    pub num_tokens: u32,
    pub snapshot: u32,
}

impl KvSpec {
    /// Bytes one position takes across all layers, K and V, in f32.
    pub fn bytes_per_position(&self) -> usize {
        self.bytes_per_position_as(crate::KvStore::F32)
    }

    /// Bytes one position takes across all layers, K and V, stored as `store`.
    pub fn bytes_per_position_as(&self, store: crate::KvStore) -> usize {
        self.num_layers * self.num_kv_heads * self.head_dim * 2 * store.bytes()
    }
}

/// One lane's view for this step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaneView {
    /// Physical block ids, in position order.
    pub block_table: Vec<u32>,
}

/// The rows of one forward pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ForwardBatch {
    /// [num_rows] token ids.
    pub token_ids: Vec<u32>,
    /// [num_rows] position of each token in its sequence.
    pub positions: Vec<u32>,
    /// [num_rows] index into `lanes`.
    pub row_lane: Vec<u32>,
    /// [num_rows] KV slot (`block_id * block_size + offset`) each row writes.
    pub slot_mapping: Vec<u32>,
    pub lanes: Vec<LaneView>,
    /// [num_lanes] the lane-state slot of each lane, for models with lane state (empty otherwise).
    /// A lane whose first row here is at position 0 starts from zero state; any other first row
    /// must continue exactly where its slot's state left off (the backend checks).
    pub state_slots: Vec<u32>,
    /// Snapshots of lane state to take during the step, at most one per (lane, `num_tokens`);
    /// empty unless the model's lane state is snapshotted (the prefix cache of state models).
    pub state_snapshots: Vec<StateSnapshot>,
    /// Rows whose logits are wanted, in output order.
    pub logits_rows: Vec<u32>,
    pub block_size: usize,
}

impl ForwardBatch {
    /// One lane whose block table is `block_table`, with rows for `tokens` at positions
    /// `start..`, logits for every row (callers that want fewer trim `logits_rows`).
    pub fn single_lane(tokens: &[u32], start: usize, block_size: usize, block_table: Vec<u32>) -> Self {
        let mut batch = ForwardBatch {
            block_size,
            lanes: vec![LaneView { block_table }],
            state_slots: vec![0],
            ..Default::default()
        };
        for (i, &t) in tokens.iter().enumerate() {
            batch.push_row(0, t, start + i);
        }
        batch.logits_rows = (0..tokens.len() as u32).collect();
        batch
    }

    /// Appends a row for `token` at `position` of lane `lane` (whose block table must cover it).
    pub fn push_row(&mut self, lane: usize, token: u32, position: usize) {
        self.token_ids.push(token);
        self.positions.push(position as u32);
        self.row_lane.push(lane as u32);
        self.slot_mapping.push(self.slot(lane, position) as u32);
    }

    pub fn num_rows(&self) -> usize {
        self.token_ids.len()
    }

    /// Slot of `position` in lane `lane`.
    pub fn slot(&self, lane: usize, position: usize) -> usize {
        let table = &self.lanes[lane].block_table;
        table[position / self.block_size] as usize * self.block_size + position % self.block_size
    }

    /// Checks the invariant above; a runner bug, never a user error.
    pub fn validate(&self) -> Result<(), String> {
        let n = self.num_rows();
        if self.positions.len() != n || self.row_lane.len() != n || self.slot_mapping.len() != n {
            return Err("per-row vectors differ in length".into());
        }
        for r in 0..n {
            let lane = self.row_lane[r] as usize;
            let Some(view) = self.lanes.get(lane) else {
                return Err(format!("row {r} names lane {lane}, which is not in the batch"));
            };
            let pos = self.positions[r] as usize;
            if pos / self.block_size >= view.block_table.len() {
                return Err(format!("row {r} at position {pos} is past lane {lane}'s block table"));
            }
            if self.slot(lane, pos) != self.slot_mapping[r] as usize {
                return Err(format!("row {r}: slot mapping disagrees with the block table"));
            }
        }
        if !self.state_slots.is_empty() && self.state_slots.len() != self.lanes.len() {
            return Err(format!("{} state slots for {} lanes", self.state_slots.len(), self.lanes.len()));
        }
        if let Some((i, s)) = self.state_slots.iter().enumerate().find(|(i, s)| self.state_slots[..*i].contains(s)) {
            return Err(format!("lanes {i} and another share state slot {s}"));
        }
        for s in &self.state_snapshots {
            let lane = s.lane as usize;
            let positions = (0..n).filter(|&r| self.row_lane[r] as usize == lane).map(|r| self.positions[r]);
            let (first, last) = (positions.clone().min(), positions.max());
            let inside = first.zip(last).is_some_and(|(f, l)| f < s.num_tokens && s.num_tokens <= l + 1);
            if lane >= self.state_slots.len() || !inside {
                return Err(format!("state snapshot {s:?} is not inside its lane's rows"));
            }
        }
        if let Some(&r) = self.logits_rows.iter().find(|&&r| r as usize >= n) {
            return Err(format!("logits row {r} is out of range"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{KvSpec, LaneStateSpec};
    use crate::KvStore;

    #[test]
    fn a_positions_bytes_follow_the_store() {
        // The 8B shape: 32 layers of 8 KV heads of 128.
        let kv = KvSpec {
            num_layers: 32,
            num_kv_heads: 8,
            head_dim: 128,
            block_size: 16,
            num_blocks: 0,
            lane_state: LaneStateSpec::NONE,
        };
        assert_eq!(kv.bytes_per_position(), 262_144);
        assert_eq!(kv.bytes_per_position_as(KvStore::F32), kv.bytes_per_position());
        assert_eq!(kv.bytes_per_position_as(KvStore::F16), 131_072);
        assert_eq!(kv.bytes_per_position_as(KvStore::Bf16), 131_072);
    }
}

//! The runner: turns a step plan into the `ForwardBatch` the model consumes, and restores the
//! lane state of lanes that resume from a prefix-cache snapshot.

use plumb_core::{Backend, ForwardBatch, LaneView, StateSnapshot};
use plumb_scheduler::{Scheduler, StepPlan};

/// Rows for every planned token and draft, one lane per plan item, logits for each sampling
/// item's last row and its verify rows.
pub fn build_batch(plan: &StepPlan, scheduler: &Scheduler) -> ForwardBatch {
    let block_size = scheduler.config().block_size;
    let mut batch = ForwardBatch { block_size, ..ForwardBatch::default() };
    for (lane, item) in plan.items.iter().enumerate() {
        let seq = scheduler.get(item.seq_id).expect("planned sequences are known");
        batch.lanes.push(LaneView { block_table: seq.block_table().to_vec() });
        batch.state_slots.push(seq.lane_slot().expect("planned sequences are running"));
        for &(num_tokens, snapshot) in &item.snapshots {
            batch.state_snapshots.push(StateSnapshot { lane: lane as u32, num_tokens: num_tokens as u32, snapshot });
        }
        for pos in item.start..item.end {
            batch.push_row(lane, seq.tokens()[pos], pos);
        }
        if item.sample {
            batch.logits_rows.push(batch.token_ids.len() as u32 - 1);
            // Verify rows: each draft at its own position, attending to its own prefix (earlier
            // drafts included) like any prefill row; each gives the logits its draft is checked by.
            for (j, &draft) in item.drafts.iter().enumerate() {
                batch.push_row(lane, draft, item.end + j);
                batch.logits_rows.push(batch.token_ids.len() as u32 - 1);
            }
        }
    }
    // Cheap next to the step it guards, so it runs in release builds too: a batch that breaks
    // the invariant would make attention read another request's K/V.
    if let Err(e) = batch.validate() {
        panic!("the runner built an invalid batch (a scheduler bug): {e}");
    }
    batch
}

/// Copies each resuming lane's snapshot into its lane slot, before the step runs (so a snapshot
/// slot that the same step overwrites is read first). `batch` is the plan's batch: lane i is
/// plan item i.
pub fn restore_lane_states<B: Backend>(backend: &B, kv: &mut B::KvCache, plan: &StepPlan, batch: &ForwardBatch) {
    for (item, &slot) in plan.items.iter().zip(&batch.state_slots) {
        if let Some(snapshot) = item.restore {
            let ops = backend.lane_state_ops().expect("the engine snapshots lane state only with LaneStateOps");
            ops.restore_lane_state(kv, snapshot as usize, slot as usize);
        }
    }
}

//! The start-up memory profile of a device backend (`Backend::profiles_memory`): the largest step
//! the scheduler can plan — its whole token budget over as many lanes as it may run, a logits row
//! for every row (draft verification's worst case) — runs once before the engine serves. If its
//! activations do not fit beside the weights and the KV cache, the engine is refused with that
//! error; if they do, the backend's allocator keeps the buffers, and no later step needs more
//! memory than this one did (activations grow with rows, and no op allocates by context length).
//! The step reads and writes only blocks that no request holds yet, so it leaves nothing behind
//! that a request could read.

use crate::EngineError;
use plumb_core::{ForwardBatch, FullBackend, LaneView};
use plumb_models::CausalLm;
use plumb_scheduler::SchedulerConfig;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The worst-case step of `config`: `max_batch_tokens` rows over `max_lanes` lanes (fewer when
/// the budget or the context is smaller), each lane from position 0 with its own blocks (reused
/// round-robin when the pool is smaller than the step), every row a logits row.
pub fn worst_case_batch(config: &SchedulerConfig) -> ForwardBatch {
    let lanes = config.max_lanes.min(config.max_batch_tokens).max(1);
    let bs = config.block_size;
    let mut batch = ForwardBatch { block_size: bs, ..ForwardBatch::default() };
    let mut next_block = 0;
    for lane in 0..lanes {
        let share = config.max_batch_tokens / lanes + usize::from(lane < config.max_batch_tokens % lanes);
        let rows = share.min(config.max_model_len);
        let table = (0..rows.div_ceil(bs))
            .map(|_| {
                let b = next_block % config.num_blocks;
                next_block += 1;
                b as u32
            })
            .collect();
        batch.lanes.push(LaneView { block_table: table });
        batch.state_slots.push(lane as u32);
        for pos in 0..rows {
            batch.push_row(lane, 0, pos);
        }
    }
    batch.logits_rows = (0..batch.num_rows() as u32).collect();
    batch
}

/// Runs `worst_case_batch(config)` through `model` and waits for it; an allocation the device
/// cannot make is the error.
pub fn profile<B: FullBackend>(
    backend: &B,
    model: &dyn CausalLm<B>,
    kv: &mut B::KvCache,
    config: &SchedulerConfig,
) -> Result<(), EngineError> {
    let batch = worst_case_batch(config);
    let run = || {
        let logits = model.forward(backend, &batch, kv, None);
        // A read back waits for the step (a device may queue or record it until then).
        let mut one = backend.tensor(1, plumb_core::Shape::cols(&logits));
        backend.gather_rows(&logits, &[0], &mut one);
        backend.download(&one)
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(_) => Ok(()),
        Err(panic) => {
            let why = crate::handle::panic_message(panic.as_ref()).unwrap_or_else(|| "the step failed".into());
            let step = format!(
                "the largest step ({} tokens over {} lanes, a logits row each)",
                batch.num_rows(),
                batch.lanes.len()
            );
            // Only a failed allocation means the budget is too large; any other failure is a
            // fault of the backend and must not be reported as a matter of size.
            let out_of_memory = why.contains("OUT_OF_MEMORY") || why.to_lowercase().contains("out of memory");
            Err(EngineError::Backend(if out_of_memory {
                format!(
                    "{step} does not fit on {} beside the weights and the KV cache: {why}; ask for fewer KV \
                     tokens, a smaller step token budget or fewer lanes",
                    backend.name()
                )
            } else {
                format!("{step} failed on {}: {why}", backend.name())
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(max_lanes: usize, max_batch_tokens: usize, num_blocks: usize) -> SchedulerConfig {
        SchedulerConfig {
            block_size: 16,
            num_blocks,
            max_lanes,
            max_batch_tokens,
            max_model_len: 100,
            max_waiting: 4,
            enable_prefix_cache: true,
        }
    }

    #[test]
    fn the_worst_case_spends_the_whole_budget_over_every_lane() {
        let b = worst_case_batch(&config(8, 300, 64));
        assert_eq!(b.num_rows(), 300);
        assert_eq!(b.lanes.len(), 8);
        assert_eq!(b.logits_rows.len(), 300);
        // 300 = 4 × 38 + 4 × 37, each from position 0.
        let per_lane: Vec<usize> = (0..8).map(|l| b.row_lane.iter().filter(|&&r| r == l).count()).collect();
        assert_eq!(per_lane, [38, 38, 38, 38, 37, 37, 37, 37]);
        assert_eq!(b.state_slots, (0..8).collect::<Vec<u32>>());
        b.validate().unwrap();
    }

    #[test]
    fn the_worst_case_fits_the_context_and_a_small_pool() {
        // One lane: the context (100) caps its rows; 3 blocks of pool are reused round-robin.
        let b = worst_case_batch(&config(1, 512, 3));
        assert_eq!(b.num_rows(), 100);
        assert_eq!(b.lanes[0].block_table, [0, 1, 2, 0, 1, 2, 0]);
        b.validate().unwrap();
        // More lanes than tokens: one row each.
        let b = worst_case_batch(&config(16, 4, 64));
        assert_eq!((b.num_rows(), b.lanes.len()), (4, 4));
        b.validate().unwrap();
    }
}

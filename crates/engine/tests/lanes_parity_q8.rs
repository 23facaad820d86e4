//! The lanes engine's promise on the CPU with Q8 activations (`--act-dtype q8`, VNNI kernels where
//! the CPU has them): the cases of support/lanes_cases.rs (16 mixed requests together or staggered
//! == solo, chunk sizes, prefix-cache hit == fresh, preempted == never, 1 thread == 2 and decode
//! == prefill, scoring beside a running request), bit for bit. Each input row is quantized on its
//! own, so the declared precision changes the numbers, never their independence of the batch.

#[path = "support/lanes_cases.rs"]
mod cases;
#[path = "support/smollm2.rs"]
mod smollm2;

use cases::LaneDevice;
use plumb_backend_cpu::CpuBackend;

impl LaneDevice for CpuBackend {
    fn open(threads: usize) -> Self {
        CpuBackend::new(threads).with_q8_inputs(true)
    }
}

#[test]
fn sixteen_requests_together_and_staggered_equal_each_run_alone() {
    cases::sixteen_requests_together_and_staggered_equal_each_run_alone::<CpuBackend>();
}

#[test]
fn prefill_chunk_sizes_give_identical_results() {
    cases::prefill_chunk_sizes_give_identical_results::<CpuBackend>();
}

#[test]
fn prefix_cache_hit_equals_fresh_computation() {
    cases::prefix_cache_hit_equals_fresh_computation::<CpuBackend>();
}

#[test]
fn preempted_and_recomputed_equals_never_preempted() {
    cases::preempted_and_recomputed_equals_never_preempted::<CpuBackend>();
}

#[test]
fn one_thread_equals_two_and_decode_equals_prefill() {
    cases::one_thread_equals_two_and_decode_equals_prefill::<CpuBackend>();
}

#[test]
fn scoring_shares_a_busy_engine_and_leaves_its_requests_untouched() {
    cases::scoring_shares_a_busy_engine_and_leaves_its_requests_untouched::<CpuBackend>();
}

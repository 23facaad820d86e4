//! The lanes engine's promise on an NVIDIA GPU: the cases of support/lanes_cases.rs (16 mixed
//! requests together or staggered == solo, chunk sizes 1/7/64/whole, prefix-cache hit == fresh,
//! preempted == never, decode logits at i == prefill of the first i + 1 tokens, scoring beside a
//! running request), bit for bit, as lanes_parity.rs shows them on the CPU.
//! Skips cleanly without a GPU; PLUMB_REQUIRE_GPU=1 turns that into a failure.

#[path = "support/lanes_cases.rs"]
mod cases;
#[path = "support/smollm2.rs"]
mod smollm2;

use cases::LaneDevice;
use plumb_backend_cuda::CudaBackend;

impl LaneDevice for CudaBackend {
    fn open(_threads: usize) -> Self {
        let ordinal = std::env::var("PLUMB_CUDA_DEVICE").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
        CudaBackend::new(ordinal).expect("the GPU was found a moment ago")
    }
}

/// Whether a GPU is here; without one the test is skipped, unless PLUMB_REQUIRE_GPU=1.
fn gpu(test: &str) -> bool {
    match CudaBackend::new(0) {
        Ok(_) => true,
        Err(e) if std::env::var("PLUMB_REQUIRE_GPU").is_ok_and(|v| v == "1") => panic!("{test}: no GPU: {e}"),
        Err(e) => {
            eprintln!("{test}: skipped, no GPU: {e}");
            false
        }
    }
}

#[test]
fn sixteen_requests_together_and_staggered_equal_each_run_alone_on_the_gpu() {
    if gpu("sixteen_requests_together_and_staggered_equal_each_run_alone") {
        cases::sixteen_requests_together_and_staggered_equal_each_run_alone::<CudaBackend>();
    }
}

#[test]
fn prefill_chunk_sizes_give_identical_results_on_the_gpu() {
    if gpu("prefill_chunk_sizes_give_identical_results") {
        cases::prefill_chunk_sizes_give_identical_results::<CudaBackend>();
    }
}

#[test]
fn prefix_cache_hit_equals_fresh_computation_on_the_gpu() {
    if gpu("prefix_cache_hit_equals_fresh_computation") {
        cases::prefix_cache_hit_equals_fresh_computation::<CudaBackend>();
    }
}

#[test]
fn preempted_and_recomputed_equals_never_preempted_on_the_gpu() {
    if gpu("preempted_and_recomputed_equals_never_preempted") {
        cases::preempted_and_recomputed_equals_never_preempted::<CudaBackend>();
    }
}

#[test]
fn one_thread_equals_two_and_decode_equals_prefill_on_the_gpu() {
    if gpu("one_thread_equals_two_and_decode_equals_prefill") {
        cases::one_thread_equals_two_and_decode_equals_prefill::<CudaBackend>();
    }
}

#[test]
fn scoring_shares_a_busy_engine_and_leaves_its_requests_untouched_on_the_gpu() {
    if gpu("scoring_shares_a_busy_engine_and_leaves_its_requests_untouched") {
        cases::scoring_shares_a_busy_engine_and_leaves_its_requests_untouched::<CudaBackend>();
    }
}

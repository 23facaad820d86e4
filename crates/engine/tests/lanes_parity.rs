//! The lanes engine's promise on the CPU: the cases of support/lanes_cases.rs (16 mixed requests
//! together or staggered == solo, chunk sizes, prefix-cache hit == fresh, preempted == never,
//! 1 thread == 2 and decode == prefill, scoring beside a running request), bit for bit.

#[path = "support/lanes_cases.rs"]
mod cases;
#[path = "support/smollm2.rs"]
mod smollm2;

use cases::LaneDevice;
use plumb_backend_cpu::CpuBackend;

impl LaneDevice for CpuBackend {
    fn open(threads: usize) -> Self {
        CpuBackend::new(threads)
    }
}

lane_case_tests!(CpuBackend);

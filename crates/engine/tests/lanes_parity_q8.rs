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

lane_case_tests!(CpuBackend);

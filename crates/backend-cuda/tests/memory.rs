//! Running out of device memory is an error, not a panic: a KV cache larger than the GPU is
//! refused with its size and the device's free memory, and the backend keeps working after.
//! Skips cleanly without a GPU; PLUMB_REQUIRE_GPU=1 turns that into a failure.

#[path = "support/device.rs"]
mod device;

use plumb_core::{Backend, BackendError, ElementwiseOps, KvSpec, LaneStateSpec};

#[test]
fn a_kv_cache_beyond_device_memory_is_an_error() {
    let Some(b) = device::backend("memory") else { return };
    // 32 layers × 2 × 8 heads × 128 × 4 bytes = 256 KiB per token: 4 M tokens is 1 TiB.
    let spec = |num_blocks| KvSpec {
        num_layers: 32,
        num_kv_heads: 8,
        head_dim: 128,
        block_size: 16,
        num_blocks,
        lane_state: LaneStateSpec::NONE,
    };
    match b.try_new_kv_cache(&spec(1 << 18)) {
        Err(e @ BackendError::OutOfMemory { .. }) => eprintln!("refused: {e}"),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("a 1 TiB KV cache was allocated"),
    }
    // The device still works: a small cache, an op, a read back.
    let kv = b.try_new_kv_cache(&spec(4)).expect("a small KV cache fits");
    drop(kv);
    let mut acc = b.upload(&[1.0, 2.0], 1, 2);
    let x = b.upload(&[0.5, 0.25], 1, 2);
    b.add(&mut acc, &x);
    assert_eq!(b.download(&acc), vec![1.5, 2.25]);
}

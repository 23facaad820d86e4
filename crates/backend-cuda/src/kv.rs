//! The paged KV cache on the device (f32, the `KvSpec` layout: per layer, K and V each
//! [num_slots, num_kv_heads · head_dim]) and the per-batch metadata attention reads.
//! Invariant: a slot is written only by `write_kv` of the row that owns it, before attention of
//! that layer reads it; attention always reads back the stored form.

use crate::CudaBackend;
use cudarc::driver::CudaSlice;
use plumb_core::{ForwardBatch, KvSpec};

/// K and V for every layer, on the device.
#[derive(Debug)]
pub struct CudaKvCache {
    pub spec: KvSpec,
    pub(crate) k: Vec<CudaSlice<f32>>,
    pub(crate) v: Vec<CudaSlice<f32>>,
}

impl CudaKvCache {
    /// Zeroed storage for `spec`.
    pub fn new(backend: &CudaBackend, spec: &KvSpec) -> Self {
        let per_layer = (spec.num_blocks * spec.block_size * spec.num_kv_heads * spec.head_dim).max(1);
        let alloc = || {
            backend
                .stream
                .alloc_zeros::<f32>(per_layer)
                .expect("CUDA allocation of the KV cache failed (out of device memory?)")
        };
        CudaKvCache {
            spec: *spec,
            k: (0..spec.num_layers).map(|_| alloc()).collect(),
            v: (0..spec.num_layers).map(|_| alloc()).collect(),
        }
    }

    /// Bytes of device memory the cache holds.
    pub fn num_bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(|s| s.len() * 4).sum()
    }
}

/// The attention kernel's metadata, packed into one buffer so each call uploads once:
/// positions [num_rows], row_lane [num_rows], table_start [num_lanes + 1], then every lane's
/// block table back to back.
pub fn attention_meta(batch: &ForwardBatch) -> Vec<u32> {
    let (rows, lanes) = (batch.num_rows(), batch.lanes.len());
    let mut meta = Vec::with_capacity(2 * rows + lanes + 1 + lanes * 8);
    meta.extend_from_slice(&batch.positions);
    meta.extend_from_slice(&batch.row_lane);
    let mut start = 0u32;
    for lane in &batch.lanes {
        meta.push(start);
        start += lane.block_table.len() as u32;
    }
    meta.push(start);
    for lane in &batch.lanes {
        meta.extend_from_slice(&lane.block_table);
    }
    meta
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_core::LaneView;

    #[test]
    fn meta_packs_positions_lanes_and_tables() {
        let mut b = ForwardBatch {
            block_size: 4,
            lanes: vec![LaneView { block_table: vec![7] }, LaneView { block_table: vec![2, 5] }],
            ..Default::default()
        };
        b.push_row(1, 0, 5);
        b.push_row(0, 0, 1);
        assert_eq!(attention_meta(&b), vec![5, 1, 1, 0, 0, 1, 3, 7, 2, 5]);
    }
}

//! The paged KV cache on the device (in the backend's declared `KvStore`: f32, f16 or bf16; the
//! `KvSpec` layout: per layer, K and V each [num_slots, num_kv_heads · head_dim]) plus one spare
//! *pad block* past the last block, which
//! the padded rows of a graph step write and read; and the per-batch metadata attention reads.
//! Invariant: a slot is written only by `write_kv` of the row that owns it, before attention of
//! that layer reads it; attention always reads back the stored form; no real row's block table
//! names the pad block.

use crate::CudaBackend;
use cudarc::driver::{CudaSlice, DevicePtr};
use plumb_core::{BackendError, ForwardBatch, KvSpec, KvStore};

/// K and V for every layer, on the device.
#[derive(Debug)]
pub struct CudaKvCache {
    pub spec: KvSpec,
    /// The element type of every stored value.
    pub store: KvStore,
    pub(crate) k: Vec<CudaSlice<u8>>,
    pub(crate) v: Vec<CudaSlice<u8>>,
    /// Device addresses of `k` and `v`, per layer.
    pub(crate) k_ptrs: Vec<u64>,
    pub(crate) v_ptrs: Vec<u64>,
}

impl CudaKvCache {
    /// Zeroed storage for `spec`, plus the pad block; running out of device memory is an error
    /// naming the cache's size and what the device has free.
    pub fn new(backend: &CudaBackend, spec: &KvSpec) -> Result<Self, BackendError> {
        let store = plumb_core::Backend::kv_store(backend);
        let per_layer = (spec.num_blocks + 1) * spec.block_size * spec.num_kv_heads * spec.head_dim * store.bytes();
        let need = 2 * spec.num_layers * per_layer;
        let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
        let oom = |why: String| BackendError::OutOfMemory {
            backend: plumb_core::Backend::name(backend),
            what: format!("a KV cache of {} blocks of {} tokens", spec.num_blocks, spec.block_size),
            mib: need as f64 / (1u64 << 20) as f64,
            why: format!("{why}; ask for fewer KV tokens"),
        };
        backend.ctx.bind_to_thread().map_err(|e| oom(e.to_string()))?;
        // Refused before any allocation when it cannot fit; an allocation that fails anyway
        // (fragmentation, another process) is the same error.
        if let Ok((free, total)) = cudarc::driver::result::mem_get_info()
            && need > free
        {
            return Err(oom(format!("{:.1} of {:.1} GiB are free", gib(free), gib(total))));
        }
        let oom = |e: cudarc::driver::DriverError| oom(e.to_string());
        let alloc = || backend.stream.alloc_zeros::<u8>(per_layer).map_err(oom);
        let k = (0..spec.num_layers).map(|_| alloc()).collect::<Result<Vec<CudaSlice<u8>>, _>>()?;
        let v = (0..spec.num_layers).map(|_| alloc()).collect::<Result<Vec<CudaSlice<u8>>, _>>()?;
        let ptrs = |s: &[CudaSlice<u8>]| s.iter().map(|s| s.device_ptr(&backend.stream).0).collect();
        Ok(CudaKvCache { spec: *spec, store, k_ptrs: ptrs(&k), v_ptrs: ptrs(&v), k, v })
    }

    /// The spare block padded rows use (never in a block table).
    pub fn pad_block(&self) -> u32 {
        self.spec.num_blocks as u32
    }

    /// Bytes of device memory the cache holds.
    pub fn num_bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(|s| s.len()).sum()
    }
}

/// The attention kernel's metadata for `padded` rows (`padded >= batch.num_rows()`), packed into
/// one buffer: positions [padded], each row's block-table offset [padded] into the tables that
/// follow: every lane's block table back to back, then the pad table `[pad_block]`. Padded rows
/// sit at position 0 of the pad table.
pub fn attention_meta(batch: &ForwardBatch, padded: usize, pad_block: u32) -> Vec<u32> {
    let (rows, lanes) = (batch.num_rows(), batch.lanes.len());
    assert!(padded >= rows, "attention metadata: fewer padded rows than rows");
    let mut starts = Vec::with_capacity(lanes);
    let mut start = 0u32;
    for lane in &batch.lanes {
        starts.push(start);
        start += lane.block_table.len() as u32;
    }
    let pad_table = start;
    let mut meta = Vec::with_capacity(2 * padded + start as usize + 1);
    meta.extend_from_slice(&batch.positions);
    meta.resize(padded, 0);
    meta.extend(batch.row_lane.iter().map(|&l| starts[l as usize]));
    meta.resize(2 * padded, pad_table);
    for lane in &batch.lanes {
        meta.extend_from_slice(&lane.block_table);
    }
    meta.push(pad_block);
    meta
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_core::LaneView;

    #[test]
    fn meta_packs_positions_table_offsets_and_tables() {
        let mut b = ForwardBatch {
            block_size: 4,
            lanes: vec![LaneView { block_table: vec![7] }, LaneView { block_table: vec![2, 5] }],
            ..Default::default()
        };
        b.push_row(1, 0, 5);
        b.push_row(0, 0, 1);
        assert_eq!(attention_meta(&b, 2, 9), vec![5, 1, 1, 0, 7, 2, 5, 9]);
        assert_eq!(attention_meta(&b, 3, 9), vec![5, 1, 0, 1, 0, 3, 7, 2, 5, 9]);
    }
}

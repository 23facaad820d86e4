//! The warp-specialised tensor-core `linear` (`linear_tma_bf16_n{8,16,32,64,128}` in
//! kernels/linear_tma.cu): which instance takes a call, its shared memory and resident blocks,
//! and the TMA tensor maps it reads its operands through — a 2-d bf16 matrix read in boxes of 64
//! elements of K by 128 (weights) or N (activation) rows, 128-byte swizzled, with zeros past its
//! last row and column, encoded on the host per launch (a driver call that touches no device
//! state) and passed to the kernel by value.

use crate::{CudaError, driver};
use cudarc::driver::{CudaContext, CudaFunction, sys};
use std::collections::HashMap;

/// Activation rows per block of each instance (the wgmma N); a call takes the smallest that holds
/// its rows, or tiles its rows by the last.
pub(crate) const TMA_ROWS: [usize; 5] = [8, 16, 32, 64, 128];
/// Threads of a block: two consumer warpgroups and one producer warp.
pub(crate) const TMA_THREADS: u32 = 288;

/// The instance for `rows` rows: (index into `TMA_ROWS`, kernel name).
pub(crate) fn tma_kernel(rows: usize) -> (usize, String) {
    let i = TMA_ROWS.iter().position(|&n| rows <= n).unwrap_or(TMA_ROWS.len() - 1);
    (i, format!("linear_tma_bf16_n{}", TMA_ROWS[i]))
}

/// Dynamic shared memory of the instance of `n` rows: its stages (`tma_stages` in the kernel) of
/// a 128 × 64 weight tile and an n × 64 activation tile, plus the slack that lets the kernel
/// align them to 1,024 bytes (the 128-byte swizzle's period).
pub(crate) fn tma_smem(n: usize) -> usize {
    let stages = match n {
        128 | 8 => 6,
        64 => 4,
        _ => 5,
    };
    stages * (128 * 128 + n * 128) + 1024
}

/// How tensor-core `linear` runs on this device: whether on the TMA kernels (default; off with
/// `PLUMB_CUDA_TMA=0`: mma.sync for few rows, cp.async-fed wgmma for many, the kernels they
/// replaced, kept for measuring against), each instance's resident blocks on the whole device
/// (SMs × blocks per SM at its shared memory and registers: what `ops_linear::decode_split` plans the
/// split of K with, and the persistent grid), and whether blocks walk several tasks (default;
/// `PLUMB_CUDA_TMA_PERSIST=0` launches one block per task). All compute the same bits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TmaPlan {
    pub(crate) enabled: bool,
    pub(crate) slots: [usize; 5],
    pub(crate) persistent: bool,
}

impl TmaPlan {
    pub(crate) fn new(ctx: &CudaContext, kernels: &HashMap<String, CudaFunction>) -> Result<TmaPlan, CudaError> {
        use cudarc::driver::sys::CUdevice_attribute_enum::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT as SMS;
        let sms = ctx.attribute(SMS).map_err(driver("reading the number of SMs"))? as usize;
        let mut slots = [0; 5];
        for (s, &n) in slots.iter_mut().zip(&TMA_ROWS) {
            let per_sm = kernels[&format!("linear_tma_bf16_n{n}")]
                .occupancy_max_active_blocks_per_multiprocessor(TMA_THREADS, tma_smem(n), None)
                .map_err(driver("reading the TMA kernel's occupancy"))?;
            *s = sms * per_sm.max(1) as usize;
        }
        let off = |name| std::env::var(name).is_ok_and(|v| v == "0");
        Ok(TmaPlan { enabled: !off("PLUMB_CUDA_TMA"), slots, persistent: !off("PLUMB_CUDA_TMA_PERSIST") })
    }

    /// Blocks to launch for `tasks` tasks of instance `i`.
    pub(crate) fn grid(&self, i: usize, tasks: usize) -> usize {
        if self.persistent { tasks.min(self.slots[i]) } else { tasks }
    }
}

/// The tensor map of a row-major bf16 matrix of `rows` rows of `k` elements, `row_bytes` apart,
/// at device address `ptr`, read in boxes of 64 × `box_rows`.
///
/// # Panics
/// If the driver refuses the map (an address or stride TMA cannot take: they are 16-byte
/// multiples for every tensor-core weight and rounded activation), like any in-op device failure.
pub(crate) fn bf16_tile_map(ptr: u64, k: usize, rows: usize, row_bytes: usize, box_rows: usize) -> sys::CUtensorMap {
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    let dims = [k as u64, rows as u64];
    let strides = [row_bytes as u64];
    let boxes = [64u32, box_rows as u32];
    let elem_strides = [1u32, 1];
    // SAFETY: every pointer argument points at a live local array of the length the rank (2)
    // asks for; `ptr` is a device address the driver only records in the map.
    let r = unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            2,
            ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            elem_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    assert_eq!(
        r,
        sys::CUresult::CUDA_SUCCESS,
        "encoding a TMA map of {rows} x {k} bf16 at {ptr:#x}, rows {row_bytes} bytes apart"
    );
    map
}

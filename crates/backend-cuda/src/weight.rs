//! Weights on the CUDA device: `CudaWeight` and how a checkpoint tensor becomes one (checked
//! against its shape, k-permuted for the tensor-core kernels, vectors also kept as f32, and its
//! kernels looked up once).

use crate::kernel_set::type_suffix;
use crate::{CudaBackend, ops_linear};
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, DriverError};
use plumb_core::{Backend, BackendError, GgmlType, LinearInputs, Shape, WeightSource};
use std::sync::atomic::Ordering;

/// A weight on the device in its checkpoint format; vectors (norm weights, biases) are also kept
/// dequantized to f32.
#[derive(Debug)]
pub struct CudaWeight {
    pub name: String,
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub(crate) row_bytes: usize,
    /// Device addresses of `_bytes` and `_dense`.
    pub(crate) ptr: u64,
    pub(crate) dense_ptr: Option<u64>,
    /// This weight's `linear` kernels for many and for few rows, and its `embed` (looked up once,
    /// not per op).
    pub(crate) kernels: [CudaFunction; 3],
    /// The CUDA-core `linear` for many features and few rows (`linear_wide`; none for a weight on
    /// the tensor cores).
    pub(crate) wide_kernel: Option<CudaFunction>,
    /// The CUDA-core `linear` for many rows on register tiles of 64 and 32 rows (`linear_tile`,
    /// `linear_tile32`; none for a weight on the tensor cores).
    pub(crate) tile_kernels: Option<[CudaFunction; 2]>,
    /// Whether `linear` runs on the tensor cores (`kernels/linear_mma.cu`, `linear_wgmma.cu`, `linear_tma.cu`: bf16
    /// weights with K a multiple of 32, stored k-permuted, activations rounded to bf16; see
    /// [`CudaBackend::linear_inputs`]).
    pub(crate) mma: bool,
    _bytes: CudaSlice<u8>,
    _dense: Option<CudaSlice<f32>>,
}

impl Shape for CudaWeight {
    fn rows(&self) -> usize {
        self.rows
    }
    fn cols(&self) -> usize {
        self.cols
    }
}

impl CudaBackend {
    pub(crate) fn load_weight_on(&self, src: WeightSource) -> Result<CudaWeight, BackendError> {
        if !self.supports(src.ty) {
            return Err(BackendError::UnsupportedType { backend: self.name(), ty: src.ty, name: src.name });
        }
        let bad = |why: String| BackendError::BadWeight { name: src.name.clone(), why };
        let row_bytes =
            src.ty
                .bytes_for(src.cols as u64)
                .ok_or_else(|| bad(format!("{} columns do not fill whole blocks", src.cols)))? as usize;
        if row_bytes * src.rows != src.bytes.len() {
            return Err(bad(format!("{} bytes for {} × {} {}", src.bytes.len(), src.rows, src.cols, src.ty)));
        }
        let oom = |e: DriverError| BackendError::OutOfMemory {
            backend: self.name(),
            what: format!("weight `{}`", src.name),
            mib: src.bytes.len() as f64 / (1u64 << 20) as f64,
            why: e.to_string(),
        };
        let dense = if src.rows == 1 {
            let mut v = vec![0f32; src.cols];
            plumb_core::quant::dequantize(src.ty, &src.bytes, &mut v).map_err(|e| bad(e.to_string()))?;
            Some(self.stream.clone_htod(&v).map_err(oom)?)
        } else {
            None
        };
        let mma = self.linear_inputs(src.ty, src.cols) == LinearInputs::Bf16;
        if mma && self.norm_round {
            self.mma_weights.store(true, Ordering::Relaxed);
        }
        // The tensor-core kernels read their weights k-permuted (kernels/linear_mma.cu).
        let permuted = mma.then(|| ops_linear::kperm_bytes(&src.bytes));
        let host: &[u8] = permuted.as_deref().unwrap_or(&src.bytes);
        let bytes = self.stream.clone_htod(if host.is_empty() { &[0u8][..] } else { host }).map_err(oom)?;
        let ptr = bytes.device_ptr(&self.stream).0;
        let suffix = type_suffix(src.ty).expect("checked by supports");
        let kernels = if mma {
            ["linear_wgmma_bf16", "linear_mma_decode_bf16", "embed_bf16_kperm"].map(|k| self.kernel(k).clone())
        } else {
            ["linear", "linear_split", "embed"].map(|k| self.kernel(&format!("{k}_{suffix}")).clone())
        };
        let wide_kernel = (!mma).then(|| self.kernel(&format!("linear_wide_{suffix}")).clone());
        let tile_kernels =
            (!mma).then(|| ["linear_tile", "linear_tile32"].map(|k| self.kernel(&format!("{k}_{suffix}")).clone()));
        let dense_ptr = dense.as_ref().map(|d| d.device_ptr(&self.stream).0);
        Ok(CudaWeight {
            name: src.name,
            ty: src.ty,
            rows: src.rows,
            cols: src.cols,
            row_bytes,
            ptr,
            dense_ptr,
            kernels,
            wide_kernel,
            tile_kernels,
            mma,
            _bytes: bytes,
            _dense: dense,
        })
    }
}

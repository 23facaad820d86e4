//! The drafts tests' harness: an engine on the default model with a proposer, a runner that
//! records every token and the bits of every logits row, and prompts and sampling kinds.
#![allow(dead_code)]

use crate::smollm2::default_model;
use plumb_backend_cpu::CpuBackend;
use plumb_engine::{Engine, NgramConfig, NgramProposer, Proposer, Request};
use plumb_sampling::SamplingParams;
use plumb_scheduler::{SchedulerConfig, SeqId};

pub type Drafter = Option<Box<dyn Proposer<CpuBackend>>>;

pub fn engine(max_batch_tokens: usize, max_lanes: usize, proposer: Drafter) -> Engine<CpuBackend> {
    let file = default_model();
    let backend = CpuBackend::new(2);
    let model = plumb_models::load_model(&file, &backend).unwrap();
    let config = SchedulerConfig {
        block_size: 16,
        num_blocks: 160,
        max_lanes,
        max_batch_tokens,
        max_model_len: 2048,
        max_waiting: 256,
        enable_prefix_cache: true,
    };
    let mut e = Engine::new(backend, model, config);
    e.set_proposer(proposer);
    e
}

pub fn ngram(k: usize, n: usize) -> Drafter {
    Some(Box::new(NgramProposer::new(NgramConfig { k, n })))
}

/// What a request produced: its tokens, finish reason, and the bits of every logits row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub tokens: Vec<u32>,
    pub logits: Vec<Vec<u32>>,
    pub finished: Option<plumb_engine::FinishReason>,
}

/// Runs every request, request i submitted before step `arrive[i]`; traces in order.
pub fn run(engine: &mut Engine<CpuBackend>, reqs: &[Request], arrive: &[usize]) -> Vec<Trace> {
    let mut ids: Vec<Option<SeqId>> = vec![None; reqs.len()];
    let mut out = vec![Trace { tokens: vec![], logits: vec![], finished: None }; reqs.len()];
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
            assert!(out[i].finished.is_none(), "a token after the finishing one");
            out[i].tokens.push(o.token);
            out[i].logits.push(o.logits.unwrap().iter().map(|v| v.to_bits()).collect());
            out[i].finished = o.finished;
        }
        step += 1;
    }
    out
}

pub fn undrafted(reqs: &[Request]) -> Vec<Trace> {
    let mut e = engine(64, 1, None);
    reqs.iter().map(|r| run(&mut e, std::slice::from_ref(r), &[0]).remove(0)).collect()
}

pub fn prompt(len: usize, salt: usize) -> Vec<u32> {
    (0..len).map(|i| ((i * 7919 + salt * 104_729) % 49_000) as u32 + 100).collect()
}

/// A passage, then its start again: the model goes on copying, so prompt lookup finds drafts.
pub fn copying_prompt(len: usize, salt: usize) -> Vec<u32> {
    let passage = prompt(len, salt);
    let mut p = passage.clone();
    p.extend_from_slice(&passage[..len / 2]);
    p
}

pub fn params(i: usize) -> SamplingParams {
    match i % 4 {
        0 => SamplingParams::greedy(),
        1 => SamplingParams { temperature: 0.9, top_k: 50, top_p: 0.95, seed: i as u64, ..SamplingParams::default() },
        2 => SamplingParams {
            temperature: 1.2,
            min_p: 0.05,
            repetition_penalty: 1.1,
            seed: 7,
            ..SamplingParams::default()
        },
        _ => SamplingParams {
            temperature: 0.7,
            frequency_penalty: 0.5,
            presence_penalty: 0.3,
            seed: 99 + i as u64,
            ..SamplingParams::default()
        },
    }
}


/// Eight lanes, drafted and undrafted, all sampling kinds; two stop on a token their undrafted
/// run produces mid-way, so a draft run must end inside an accepted run of drafts.
pub fn eight(want_tokens: Option<&[Trace]>) -> Vec<Request> {
    (0..8)
        .map(|i| {
            let mut r = Request::new(copying_prompt(24 + 6 * i, 10 + i), params(i), 6 + (i * 5) % 17, vec![]);
            r.draft = i % 3 != 2;
            if let Some(t) = want_tokens.filter(|_| i % 4 == 1) {
                r.stop_ids = vec![t[i].tokens[t[i].tokens.len() / 2]];
            }
            r
        })
        .collect()
}

//! The drafts tests' harness: an engine on the default model with a proposer, a runner that
//! records every token and the bits of every logits row, and prompts and sampling kinds.
#![allow(dead_code)]

use crate::smollm2::default_model;
use plumb_backend_cpu::CpuBackend;
use plumb_checkpoint::GgufFile;
use plumb_core::FullBackend;
use plumb_engine::{DraftModelConfig, Engine, ModelProposer, NgramConfig, NgramProposer, Proposer, Request};
use plumb_sampling::SamplingParams;
use plumb_scheduler::{SchedulerConfig, SeqId};

pub type Drafter = Option<Box<dyn Proposer<CpuBackend>>>;

/// A backend the drafts tests run on.
pub trait TestDevice: FullBackend + Sized + 'static {
    fn open() -> Self;
}

impl TestDevice for CpuBackend {
    fn open() -> Self {
        CpuBackend::new(2)
    }
}

pub fn engine(max_batch_tokens: usize, max_lanes: usize, proposer: Drafter) -> Engine<CpuBackend> {
    engine_on(max_batch_tokens, max_lanes, proposer)
}

/// The default model on a fresh `B`, drafting with `proposer`.
pub fn engine_on<B: TestDevice>(
    max_batch_tokens: usize,
    max_lanes: usize,
    proposer: Option<Box<dyn Proposer<B>>>,
) -> Engine<B> {
    let file = default_model();
    let backend = B::open();
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

pub fn ngram<B: FullBackend>(k: usize, n: usize) -> Option<Box<dyn Proposer<B>>> {
    Some(Box::new(NgramProposer::new(NgramConfig { k, n })))
}

/// `e` drafting with `file`'s model, k drafts per step, in a cache of `num_blocks` blocks.
pub fn with_draft<B: FullBackend + 'static>(e: &mut Engine<B>, file: &GgufFile, k: usize, num_blocks: usize) {
    let draft = plumb_models::load_model(file, e.backend()).unwrap();
    let config = DraftModelConfig { k, block_size: 16, num_blocks, max_batch_tokens: 48 };
    let vocab = e.model().config().vocab_size;
    let p = ModelProposer::new(e.backend(), draft, vocab, config).unwrap();
    e.set_proposer(Some(Box::new(p)));
}

/// A random-weight draft model with the default model's tokenizer.
pub fn random_draft() -> GgufFile {
    GgufFile::open(crate::random_draft::write(&default_model(), 5)).unwrap()
}

/// What a request produced: its tokens, finish reason, and the bits of every logits row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub tokens: Vec<u32>,
    pub logits: Vec<Vec<u32>>,
    pub finished: Option<plumb_engine::FinishReason>,
}

/// Runs every request, request i submitted before step `arrive[i]`; traces in order.
pub fn run<B: FullBackend>(engine: &mut Engine<B>, reqs: &[Request], arrive: &[usize]) -> Vec<Trace> {
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
    undrafted_on::<CpuBackend>(reqs)
}

/// Each request alone, without drafts.
pub fn undrafted_on<B: TestDevice>(reqs: &[Request]) -> Vec<Trace> {
    let mut e = engine_on::<B>(64, 1, None);
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

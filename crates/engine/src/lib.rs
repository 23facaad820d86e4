//! plumb-engine: the loop that serves requests — schedule → execute → sample → update → emit.
//! Every feature lives in one of those collaborators (scheduler, runner + model, sampler); the
//! loop itself stays on one screen.

pub mod load;
mod runner;
mod score;

use plumb_core::{FullBackend, Shape};
use plumb_models::CausalLm;
use plumb_sampling::{SamplingError, SamplingParams};
use plumb_scheduler::{RequestError, Scheduler, SchedulerConfig, SeqId, SeqUpdate, Sequence};
use std::collections::HashMap;

pub use plumb_scheduler::FinishReason;

/// A generation request, in tokens.
#[derive(Clone, Debug)]
pub struct Request {
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    pub max_tokens: usize,
    pub stop_ids: Vec<u32>,
}

/// Why a request was refused. The engine itself is unaffected.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EngineError {
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    #[error("token id {id} is outside the vocabulary of {vocab_size} tokens")]
    BadToken { id: u32, vocab_size: usize },
}

/// The engine: a model on a backend with its KV cache and scheduler.
#[allow(missing_debug_implementations)]
pub struct Engine<B: FullBackend> {
    backend: B,
    model: Box<dyn CausalLm<B>>,
    kv: B::KvCache,
    scheduler: Scheduler,
    params: HashMap<SeqId, SamplingParams>,
    next_id: u64,
}

impl<B: FullBackend> Engine<B> {
    pub fn new(backend: B, model: Box<dyn CausalLm<B>>, config: SchedulerConfig) -> Self {
        let kv = backend.new_kv_cache(&model.kv_spec(config.block_size, config.num_blocks));
        Engine { backend, model, kv, scheduler: Scheduler::new(config), params: HashMap::new(), next_id: 0 }
    }

    pub fn model(&self) -> &dyn CausalLm<B> {
        self.model.as_ref()
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub fn scheduler_config(&self) -> &SchedulerConfig {
        self.scheduler.config()
    }

    /// Queues a request; a bad one is refused here with nothing else touched.
    pub fn add_request(&mut self, req: Request) -> Result<SeqId, EngineError> {
        req.params.validate()?;
        let vocab_size = self.model.config().vocab_size;
        if let Some(&id) = req.prompt.iter().find(|&&t| t as usize >= vocab_size) {
            return Err(EngineError::BadToken { id, vocab_size });
        }
        let id = SeqId(self.next_id);
        self.scheduler.add(Sequence::new(id, req.prompt, req.max_tokens, req.stop_ids))?;
        self.next_id += 1;
        self.params.insert(id, req.params);
        Ok(id)
    }

    pub fn has_work(&self) -> bool {
        self.scheduler.has_work()
    }

    /// Stops a request and frees its blocks.
    pub fn abort(&mut self, id: SeqId) {
        self.scheduler.finish(id);
        self.params.remove(&id);
    }

    /// One step of the loop; returns each sampled token.
    pub fn step(&mut self) -> Vec<SeqUpdate> {
        let plan = self.scheduler.schedule();
        if plan.items.is_empty() {
            return Vec::new();
        }
        let batch = runner::build_batch(&plan, &self.scheduler);
        let logits = self.model.forward(&self.backend, &batch, &mut self.kv, None);
        let sampled = self.sample(&plan, &logits);
        let updates = self.scheduler.update(&plan, &sampled);
        for u in updates.iter().filter(|u| u.finished.is_some()) {
            self.params.remove(&u.seq_id);
        }
        updates
    }

    fn sample(&self, plan: &plumb_scheduler::StepPlan, logits: &B::Tensor) -> Vec<u32> {
        let host = self.backend.download(logits);
        let vocab = logits.cols();
        plan.items
            .iter()
            .filter(|item| item.sample)
            .zip(host.chunks_exact(vocab))
            .map(|(item, row)| {
                let seq = self.scheduler.get(item.seq_id).expect("planned sequences are running");
                let params = &self.params[&item.seq_id];
                plumb_sampling::sample(row, params, &seq.tokens, seq.prompt_len, seq.tokens.len() as u64)
            })
            .collect()
    }
}

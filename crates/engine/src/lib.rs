//! plumb-engine: the loop that serves requests — schedule → execute → sample → update → emit.
//! Every feature lives in one of those collaborators (the scheduler; the runner and the model;
//! the sampler; `output` for what a step reports); the loop itself stays on one screen.
//! `Engine` is the loop driven step by step from one thread (tests, benchmarks, the gate);
//! `EngineHandle` runs it on a thread of its own for any number of client threads.

mod handle;
pub mod load;
mod output;
mod runner;
mod score;

use plumb_core::{FullBackend, Shape};
use plumb_models::CausalLm;
use plumb_sampling::{SamplingError, SamplingParams};
use plumb_scheduler::{RequestError, Scheduler, SchedulerConfig, SchedulerStats, SeqId, Sequence, StepPlan};
use std::collections::HashMap;

pub use handle::{EngineHandle, EngineStats, Event, HandleError, RequestStream};
pub use output::{StepOutput, TokenLogprobs};
pub use plumb_scheduler::FinishReason;

/// A generation request, in tokens.
#[derive(Clone, Debug)]
pub struct Request {
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    /// Tokens to generate at most.
    pub max_tokens: usize,
    /// Tokens that end generation (end of turn).
    pub stop_ids: Vec<u32>,
    /// Report each token's log-probability with this many top alternatives (None: no logprobs).
    pub logprobs: Option<usize>,
    /// Report each step's raw logits row (parity tests compare their bits).
    pub return_logits: bool,
    /// Requests with different salts never share prefix-cache blocks.
    pub cache_salt: u64,
}

impl Request {
    pub fn new(prompt: Vec<u32>, params: SamplingParams, max_tokens: usize, stop_ids: Vec<u32>) -> Self {
        Request { prompt, params, max_tokens, stop_ids, logprobs: None, return_logits: false, cache_salt: 0 }
    }
}

/// Why a request was refused or failed. The engine itself is unaffected.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EngineError {
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    #[error("token id {id} is outside the vocabulary of {vocab_size} tokens")]
    BadToken { id: u32, vocab_size: usize },
    #[error("logprobs asks for {asked} alternatives; at most {max} are available")]
    TooManyLogprobs { asked: usize, max: usize },
    #[error("the engine failed while computing this request: {0}")]
    Internal(String),
}

/// Most top alternatives a request may ask for with its log-probabilities (OpenAI allows 20).
pub const MAX_LOGPROBS: usize = 20;

/// What the engine keeps per request besides the scheduler's sequence.
#[derive(Clone, Debug)]
struct RequestState {
    params: SamplingParams,
    logprobs: Option<usize>,
    return_logits: bool,
}

/// The engine: a model on a backend with its KV cache and scheduler.
#[allow(missing_debug_implementations)]
pub struct Engine<B: FullBackend> {
    backend: B,
    model: Box<dyn CausalLm<B>>,
    kv: B::KvCache,
    scheduler: Scheduler,
    requests: HashMap<SeqId, RequestState>,
    next_id: u64,
}

impl<B: FullBackend> Engine<B> {
    pub fn new(backend: B, model: Box<dyn CausalLm<B>>, config: SchedulerConfig) -> Self {
        let kv = backend.new_kv_cache(&model.kv_spec(config.block_size, config.num_blocks));
        Engine { backend, model, kv, scheduler: Scheduler::new(config), requests: HashMap::new(), next_id: 0 }
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

    /// The longest prompt + max_tokens a request may ask for.
    pub fn max_len(&self) -> usize {
        self.scheduler.max_len()
    }

    /// The scheduler's counters (lanes, queue, blocks, prefix-cache hits).
    pub fn stats(&self) -> SchedulerStats {
        self.scheduler.stats()
    }

    /// Checks a request without queueing it.
    pub fn validate(&self, req: &Request) -> Result<(), EngineError> {
        validate(req, self.model.config().vocab_size, self.max_len())
    }

    /// Queues a request; a bad one is refused here with nothing else touched.
    pub fn add_request(&mut self, req: Request) -> Result<SeqId, EngineError> {
        let id = SeqId(self.next_id);
        self.add_request_as(id, req)?;
        self.next_id += 1;
        Ok(id)
    }

    /// `add_request` under an id the caller chose (unique among requests in flight).
    pub fn add_request_as(&mut self, id: SeqId, req: Request) -> Result<(), EngineError> {
        self.validate(&req)?;
        let seq = Sequence::new(id, req.prompt, req.max_tokens, req.stop_ids).with_cache_salt(req.cache_salt);
        self.scheduler.add(seq)?;
        let state = RequestState { params: req.params, logprobs: req.logprobs, return_logits: req.return_logits };
        self.requests.insert(id, state);
        Ok(())
    }

    pub fn has_work(&self) -> bool {
        self.scheduler.has_work()
    }

    /// How many of a request's tokens have their K/V computed (prefill progress).
    pub fn num_computed_tokens(&self, id: SeqId) -> Option<usize> {
        self.scheduler.get(id).map(Sequence::num_computed_tokens)
    }

    /// Stops a request and frees its lane and blocks; false if it was not in flight.
    pub fn abort(&mut self, id: SeqId) -> bool {
        self.requests.remove(&id);
        self.scheduler.abort(id)
    }

    /// One step of the loop; returns each sampled token.
    pub fn step(&mut self) -> Vec<StepOutput> {
        let plan = self.scheduler.schedule();
        if plan.items.is_empty() {
            return Vec::new();
        }
        let batch = runner::build_batch(&plan, &self.scheduler);
        let logits = self.model.forward(&self.backend, &batch, &mut self.kv, None);
        let (sampled, extras) = self.sample(&plan, &logits);
        let updates = self.scheduler.update(&plan, &sampled);
        output::emit(updates, extras, &mut self.requests)
    }

    /// One token per sampling item, with the logprobs and logits rows the requests asked for.
    fn sample(&self, plan: &StepPlan, logits: &B::Tensor) -> (Vec<u32>, Vec<output::Extras>) {
        let host = self.backend.download(logits);
        let vocab = logits.cols();
        let mut tokens = Vec::new();
        let mut extras = Vec::new();
        for (item, row) in plan.items.iter().filter(|item| item.sample).zip(host.chunks_exact(vocab)) {
            let seq = self.scheduler.get(item.seq_id).expect("planned sequences are known");
            let state = &self.requests[&item.seq_id];
            let (history, prompt_len) = (seq.tokens(), seq.prompt_len());
            let token = plumb_sampling::sample(row, &state.params, history, prompt_len, history.len() as u64);
            extras.push(output::Extras {
                logprobs: state.logprobs.map(|n| output::logprobs(row, token, n)),
                logits: state.return_logits.then(|| row.to_vec()),
            });
            tokens.push(token);
        }
        (tokens, extras)
    }
}

/// The checks `add_request` makes before touching anything.
fn validate(req: &Request, vocab_size: usize, max_len: usize) -> Result<(), EngineError> {
    req.params.validate()?;
    let biased = req.params.logit_bias.iter().map(|b| &b.0);
    if let Some(&id) = req.prompt.iter().chain(biased).find(|&&t| t as usize >= vocab_size) {
        return Err(EngineError::BadToken { id, vocab_size });
    }
    if let Some(asked) = req.logprobs.filter(|&n| n > MAX_LOGPROBS) {
        return Err(EngineError::TooManyLogprobs { asked, max: MAX_LOGPROBS });
    }
    if req.prompt.is_empty() {
        return Err(RequestError::EmptyPrompt.into());
    }
    if req.max_tokens == 0 {
        return Err(RequestError::ZeroMaxTokens.into());
    }
    if req.prompt.len().checked_add(req.max_tokens).is_none_or(|n| n > max_len) {
        return Err(RequestError::TooLong { prompt_len: req.prompt.len(), max_tokens: req.max_tokens, max_len }.into());
    }
    Ok(())
}

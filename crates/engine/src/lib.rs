//! plumb-engine: the loop that serves requests — schedule → execute → sample → update → emit.
//! Every feature lives in one of those collaborators (the scheduler; the runner and the model;
//! the sampler; `output` for what a step reports); the loop itself stays on one screen.
//! `Engine` is the loop driven step by step from one thread (tests, benchmarks, the gate);
//! `EngineHandle` runs it on a thread of its own for any number of client threads.

mod draft;
mod draft_model;
pub mod generation_config;
mod handle;
pub mod load;
mod output;
pub mod profile;
mod runner;
mod score;

use plumb_core::{FullBackend, KvSpec, LogprobRow, PickRow, Picked, Shape};
use plumb_models::CausalLm;
use plumb_sampling::{SamplingError, SamplingParams};
use plumb_scheduler::{RequestError, Scheduler, SchedulerConfig, SchedulerStats, SeqId, Sequence, StepPlan};
use std::collections::HashMap;

pub use draft::{DraftQuery, DraftStats, NgramConfig, NgramProposer, Proposer};
pub use draft_model::{DraftModelConfig, DraftModelError, ModelProposer};
pub use handle::{EngineHandle, EngineStats, Event, HandleError, RequestStream};
pub use output::{StepOutput, TokenLogprobs};
pub use plumb_scheduler::{FinishReason, StateSnapshots};

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
    /// Let the engine's proposer (if it has one) draft for this request. Never changes the
    /// result, only the speed.
    pub draft: bool,
}

impl Request {
    pub fn new(prompt: Vec<u32>, params: SamplingParams, max_tokens: usize, stop_ids: Vec<u32>) -> Self {
        Request {
            prompt,
            params,
            max_tokens,
            stop_ids,
            logprobs: None,
            return_logits: false,
            cache_salt: 0,
            draft: true,
        }
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
    /// The backend could not hold the engine's state (a KV cache beyond device memory).
    #[error("{0}")]
    Backend(String),
}

/// Most top alternatives a request may ask for with its log-probabilities (OpenAI allows 20).
pub use plumb_core::MAX_LOGPROBS;

/// What the engine keeps per request besides the scheduler's sequence.
#[derive(Clone, Debug)]
struct RequestState {
    params: SamplingParams,
    logprobs: Option<usize>,
    return_logits: bool,
    draft: bool,
}

/// The engine: a model on a backend with its KV cache and scheduler.
#[allow(missing_debug_implementations)]
pub struct Engine<B: FullBackend> {
    backend: B,
    model: Box<dyn CausalLm<B>>,
    kv: B::KvCache,
    /// The geometry `kv` was allocated with.
    kv_spec: KvSpec,
    scheduler: Scheduler,
    requests: HashMap<SeqId, RequestState>,
    next_id: u64,
    proposer: Option<Box<dyn Proposer<B>>>,
    draft_stats: DraftStats,
}

impl<B: FullBackend> Engine<B> {
    /// An engine over `model`. A model with per-lane state (linear attention) gets a state slot
    /// per lane (the scheduler's lane slots) plus one for scoring (`logits_all`), and the
    /// default snapshot pool of [`StateSnapshots::for_lanes`]; see [`Engine::with_snapshots`].
    pub fn new(backend: B, model: Box<dyn CausalLm<B>>, config: SchedulerConfig) -> Self {
        Self::try_new(backend, model, config).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `new`, with a KV cache the backend cannot hold (out of device memory) as an error.
    pub fn try_new(backend: B, model: Box<dyn CausalLm<B>>, config: SchedulerConfig) -> Result<Self, EngineError> {
        let snapshots = StateSnapshots::for_lanes(config.max_lanes);
        Self::with_snapshots(backend, model, config, snapshots)
    }

    /// `try_new` with the prefix cache's lane-state snapshots as `snapshots` says. A model with
    /// per-lane state resumes from a prefix-cache hit only through a snapshot of its state at
    /// the hit's last block (allocated beside the KV cache, through the backend). Where the
    /// model does not declare its state snapshot-exact (`CausalLm::lane_state_snapshots`), the
    /// backend has no `LaneStateOps`, or `snapshots` has no slots, the prefix cache is turned
    /// off for it instead — check `scheduler_config()` — never a resume from a wrong state.
    pub fn with_snapshots(
        backend: B,
        model: Box<dyn CausalLm<B>>,
        mut config: SchedulerConfig,
        snapshots: StateSnapshots,
    ) -> Result<Self, EngineError> {
        let mut spec = model.kv_spec_for_lanes(config.block_size, config.num_blocks, config.max_lanes + 1);
        let has_state = spec.lane_state.num_layers > 0;
        let can_snapshot = model.lane_state_snapshots() && backend.lane_state_ops().is_some();
        let snapshotted = has_state && config.enable_prefix_cache && can_snapshot && snapshots.num_snapshots > 0;
        if has_state && !snapshotted {
            config.enable_prefix_cache = false;
        }
        let mut scheduler = Scheduler::new(config);
        if snapshotted {
            spec.lane_state.num_snapshots = snapshots.num_snapshots;
            scheduler = scheduler.with_state_snapshots(snapshots);
        }
        let mut kv = backend.try_new_kv_cache(&spec).map_err(|e| EngineError::Backend(e.to_string()))?;
        if backend.profiles_memory() {
            profile::profile(&backend, &*model, &mut kv, scheduler.config())?;
        }
        let (requests, draft_stats) = (HashMap::new(), DraftStats::default());
        Ok(Engine { backend, model, kv, kv_spec: spec, scheduler, requests, next_id: 0, proposer: None, draft_stats })
    }

    /// Drafts tokens with `proposer` from now on (None: plain decoding). Results are the same
    /// either way, bit for bit.
    /// A model with per-lane state cannot take back rejected drafts (its state has absorbed
    /// them), so it never drafts: the proposer is dropped, which changes speed only.
    pub fn set_proposer(&mut self, proposer: Option<Box<dyn Proposer<B>>>) {
        self.proposer = proposer.filter(|_| !self.has_lane_state());
    }

    /// Whether the model keeps per-lane state beside its KV blocks (linear attention).
    pub fn has_lane_state(&self) -> bool {
        let c = self.scheduler.config();
        self.model.kv_spec_for_lanes(c.block_size, 1, 1).lane_state.num_layers > 0
    }

    /// Draft counters since start (all zero without a proposer).
    pub fn draft_stats(&self) -> DraftStats {
        self.draft_stats.clone()
    }

    /// The KV cache's geometry as allocated: paged K/V for the attention layers only, and the
    /// lane-state slots (one per lane, one for scoring) and snapshot slots of a state model.
    pub fn kv_spec(&self) -> &KvSpec {
        &self.kv_spec
    }

    /// The KV cache (a backend's own type: tests measure what it allocated).
    pub fn kv_cache(&self) -> &B::KvCache {
        &self.kv
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
        let state = RequestState {
            params: req.params,
            logprobs: req.logprobs,
            return_logits: req.return_logits,
            draft: req.draft,
        };
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
        if let Some(p) = &mut self.proposer {
            p.release(id);
        }
        self.scheduler.abort(id)
    }

    /// One step of the loop; returns each kept token (several for a lane whose drafts were
    /// accepted, in order).
    pub fn step(&mut self) -> Vec<StepOutput> {
        let plan = self.schedule();
        if plan.items.is_empty() {
            return Vec::new();
        }
        let batch = runner::build_batch(&plan, &self.scheduler);
        runner::restore_lane_states(&self.backend, &mut self.kv, &plan, &batch);
        let logits = self.model.forward(&self.backend, &batch, &mut self.kv, None);
        let (kept, extras) = self.sample(&plan, logits);
        self.observe_drafts(&plan, &kept);
        let updates = self.scheduler.update_verified(&plan, &kept);
        let outputs = output::emit(updates, extras, &mut self.requests);
        if let Some(p) = &mut self.proposer {
            outputs.iter().filter(|o| o.finished.is_some()).for_each(|o| p.release(o.seq_id));
        }
        outputs
    }

    /// The scheduler's plan, with drafts from the proposer for the decoding lanes whose requests
    /// allow them (asked for all at once, so a draft model batches its lanes).
    fn schedule(&mut self) -> StepPlan {
        let Some(proposer) = self.proposer.as_mut() else { return self.scheduler.schedule() };
        let requests = &self.requests;
        let queries: Vec<DraftQuery<'_>> = self
            .scheduler
            .decoding()
            .filter_map(|seq| {
                let state = requests.get(&seq.id).filter(|s| s.draft)?;
                let max_drafts = (seq.max_tokens - seq.num_generated()).saturating_sub(1);
                (max_drafts > 0).then_some(DraftQuery {
                    seq_id: seq.id,
                    tokens: seq.tokens(),
                    prompt_len: seq.prompt_len(),
                    params: &state.params,
                    max_drafts,
                })
            })
            .collect();
        let proposed = if queries.is_empty() { Vec::new() } else { proposer.propose(&self.backend, &queries) };
        let mut drafts: HashMap<SeqId, Vec<u32>> = queries.iter().map(|q| q.seq_id).zip(proposed).collect();
        // Proposers are pluggable: a token the model cannot embed ends the drafts there.
        let vocab_size = self.model.config().vocab_size;
        self.scheduler.schedule_with_drafts(|seq, _| {
            let mut d = drafts.remove(&seq.id).unwrap_or_default();
            if let Some(bad) = d.iter().position(|&t| t as usize >= vocab_size) {
                d.truncate(bad);
            }
            d
        })
    }

    /// Per sampling item, the tokens it keeps (its accepted drafts, then one sample), with the
    /// logprobs and logits rows the request asked for, one per kept token.
    /// On a backend that picks on the device, a request whose sampler reads only a row's argmax
    /// or top-k gets that reduction instead of the row (the same token: `sample_picked`), and its
    /// log-probabilities from `Backend::logprobs` over a copy of its raw rows taken before the
    /// picks edit them; the others' rows are gathered and read back.
    fn sample(&self, plan: &StepPlan, mut logits: B::Tensor) -> (Vec<Vec<u32>>, Vec<output::ItemExtras>) {
        let vocab = logits.cols();
        let items: Vec<_> = plan.items.iter().filter(|item| item.sample).collect();
        let on_device = self.backend.picks_on_device();
        let (mut pick_rows, mut host_rows, mut raw_rows, mut first) = (Vec::new(), Vec::new(), Vec::new(), 0);
        let mut picks = Vec::with_capacity(items.len());
        for item in &items {
            let state = &self.requests[&item.seq_id];
            let pick = plumb_sampling::device_pick(&state.params).filter(|_| on_device && !state.return_logits);
            let rows = first..first + item.num_samples();
            first = rows.end;
            picks.push(pick);
            let Some(pick) = pick else {
                host_rows.extend(rows.map(|r| r as u32));
                continue;
            };
            if state.logprobs.is_some() {
                raw_rows.extend(rows.clone().map(|r| r as u32));
            }
            let seq = self.scheduler.get(item.seq_id).expect("planned sequences are known");
            let mut history = seq.tokens().to_vec();
            for (j, row) in rows.enumerate() {
                let edits = plumb_sampling::edits(&state.params, &history, seq.prompt_len(), vocab);
                let penalties = plumb_sampling::penalties(&state.params);
                pick_rows.push(PickRow { row, pick, penalties, edits });
                history.extend(item.drafts.get(j));
            }
        }
        // Whole rows and raw copies first: picking may leave its edits in the rows it reduces.
        let gather = |rows: &[u32]| {
            let mut gathered = self.backend.tensor(rows.len(), vocab);
            self.backend.gather_rows(&logits, rows, &mut gathered);
            gathered
        };
        let host = if !on_device {
            self.backend.download(&logits)
        } else if host_rows.is_empty() {
            Vec::new()
        } else {
            self.backend.download(&gather(&host_rows))
        };
        let raw = (!raw_rows.is_empty()).then(|| gather(&raw_rows));
        let picked = if pick_rows.is_empty() { Vec::new() } else { self.backend.pick(&mut logits, &pick_rows) };
        let (mut host_rows, mut picked) = (host.chunks_exact(vocab), picked.into_iter());
        let mut kept_all = Vec::new();
        let mut extras = Vec::new();
        // Device log-probabilities to ask for: (item of `extras`, kept token, its row of `raw`).
        let (mut wanted, mut raw_next) = (Vec::new(), 0);
        for (item, pick) in items.iter().zip(picks) {
            let seq = self.scheduler.get(item.seq_id).expect("planned sequences are known");
            let state = &self.requests[&item.seq_id];
            let (history, prompt_len, p) = (seq.tokens(), seq.prompt_len(), &state.params);
            if pick.is_some() {
                let item_picks: Vec<Picked> = picked.by_ref().take(item.num_samples()).collect();
                let kept = plumb_sampling::verify_drafts(&item.drafts, history, |j, h| {
                    plumb_sampling::sample_picked(&item_picks[j], p, h.len() as u64)
                });
                if let Some(n) = state.logprobs {
                    // The item's rows of `raw` follow the previous logprobs items' rows.
                    for (j, &token) in kept.iter().enumerate() {
                        wanted.push((extras.len(), j, LogprobRow { row: raw_next + j, token, top: n }));
                    }
                    raw_next += item.num_samples();
                }
                extras.push((item.seq_id, kept.iter().map(|_| output::Extras::default()).collect::<Vec<_>>()));
                kept_all.push(kept);
                continue;
            }
            let item_rows: Vec<&[f32]> = host_rows.by_ref().take(item.num_samples()).collect();
            let kept = plumb_sampling::sample_drafted(item_rows.iter().copied(), &item.drafts, p, history, prompt_len);
            extras.push((
                item.seq_id,
                kept.iter()
                    .zip(&item_rows)
                    .map(|(&token, row)| output::Extras {
                        logprobs: state.logprobs.map(|n| plumb_core::logprobs::logprobs_host(row, token, n)),
                        logits: state.return_logits.then(|| row.to_vec()),
                    })
                    .collect(),
            ));
            kept_all.push(kept);
        }
        if let Some(raw) = raw {
            let rows: Vec<LogprobRow> = wanted.iter().map(|w| w.2).collect();
            for ((i, j, _), lp) in wanted.into_iter().zip(self.backend.logprobs(&raw, &rows)) {
                extras[i].1[j].logprobs = Some(lp);
            }
        }
        (kept_all, extras)
    }

    /// Tells the proposer how its drafts fared and counts them.
    fn observe_drafts(&mut self, plan: &StepPlan, kept: &[Vec<u32>]) {
        let drafted =
            plan.items.iter().filter(|item| item.sample).zip(kept).filter(|(item, _)| !item.drafts.is_empty());
        for (item, kept) in drafted {
            let num_accepted = kept.len() - 1;
            let s = &mut self.draft_stats;
            s.num_verify_steps += 1;
            s.num_draft_tokens += item.drafts.len() as u64;
            s.num_accepted_tokens += num_accepted as u64;
            s.num_emitted_tokens += kept.len() as u64;
            if let Some(p) = &mut self.proposer {
                p.observe(item.seq_id, item.drafts.len(), num_accepted);
            }
        }
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

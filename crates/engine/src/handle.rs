//! `EngineHandle`: the engine loop on a thread of its own, shared by any number of client threads
//! (the server, `plumb chat`, benchmarks). A cloneable handle submits requests and gets back a
//! stream of events per request; dropping the stream cancels the request, whose lane and blocks
//! are free before the next step. Submissions beyond the in-flight bound are refused at once.
//! A fault inside a step fails the requests of that step with an internal error; the loop goes on.

use crate::{DraftStats, Engine, EngineError, Request, StepOutput};
use plumb_core::FullBackend;
use plumb_scheduler::{FinishReason, SchedulerStats, SeqId};
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// What a request's stream yields.
#[derive(Debug, PartialEq)]
pub enum Event {
    /// A sampled token (with `finished` set on the last one).
    Token(StepOutput),
    /// The request failed after it was accepted; nothing follows.
    Failed(EngineError),
}

/// Why a submission was refused. Nothing was queued.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HandleError {
    #[error(transparent)]
    Invalid(#[from] EngineError),
    #[error("the engine is busy: {limit} requests are already in flight; try again later")]
    QueueFull { limit: usize },
    #[error("the engine has stopped")]
    Stopped,
}

/// Counters since the engine started, for metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    pub scheduler: SchedulerStats,
    pub requests_in_flight: usize,
    pub requests_finished_stop: u64,
    pub requests_finished_length: u64,
    pub requests_cancelled: u64,
    pub requests_failed: u64,
    pub prompt_tokens_total: u64,
    pub generated_tokens_total: u64,
    pub steps_total: u64,
    /// Speculative drafts verified and accepted (all zero without a proposer).
    pub drafts: DraftStats,
}

enum Command {
    Add(SeqId, Request, UnboundedSender<Event>),
    Cancel(SeqId),
}

struct Shared {
    vocab_size: usize,
    max_len: usize,
    max_in_flight: usize,
    in_flight: AtomicUsize,
    next_id: AtomicU64,
    stats: Mutex<EngineStats>,
}

/// A cloneable handle to an engine running on its own thread. The thread ends when every handle
/// and stream is dropped.
#[derive(Clone)]
pub struct EngineHandle {
    commands: Sender<Command>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for EngineHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EngineHandle(max_len {}, max in flight {})", self.shared.max_len, self.shared.max_in_flight)
    }
}

/// The events of one request. Dropping it cancels the request.
#[derive(Debug)]
pub struct RequestStream {
    id: SeqId,
    events: UnboundedReceiver<Event>,
    commands: Sender<Command>,
    done: bool,
}

impl RequestStream {
    pub fn id(&self) -> SeqId {
        self.id
    }

    fn note(&mut self, e: Option<Event>) -> Option<Event> {
        match &e {
            None | Some(Event::Failed(_)) => self.done = true,
            Some(Event::Token(t)) if t.finished.is_some() => self.done = true,
            _ => {}
        }
        e
    }

    /// The next event, waiting for it (not from inside an async runtime).
    pub fn blocking_next(&mut self) -> Option<Event> {
        let e = self.events.blocking_recv();
        self.note(e)
    }

    /// The next event, awaiting it.
    pub async fn next(&mut self) -> Option<Event> {
        let e = self.events.recv().await;
        self.note(e)
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.commands.send(Command::Cancel(self.id));
        }
    }
}

impl EngineHandle {
    /// Moves `engine` onto a thread of its own. At most `max_in_flight` requests (running and
    /// waiting) are accepted at once.
    pub fn spawn<B: FullBackend + 'static>(engine: Engine<B>, max_in_flight: usize) -> EngineHandle
    where
        B::KvCache: 'static,
    {
        let shared = Arc::new(Shared {
            vocab_size: engine.model().config().vocab_size,
            max_len: engine.max_len(),
            max_in_flight: max_in_flight.max(1),
            in_flight: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            stats: Mutex::new(EngineStats::default()),
        });
        let (commands, rx) = channel();
        let loop_shared = shared.clone();
        std::thread::Builder::new()
            .name("plumb-engine".into())
            .spawn(move || run(engine, rx, &loop_shared))
            .expect("spawning the engine thread");
        EngineHandle { commands, shared }
    }

    /// The longest prompt + max_tokens a request may ask for.
    pub fn max_len(&self) -> usize {
        self.shared.max_len
    }

    pub fn vocab_size(&self) -> usize {
        self.shared.vocab_size
    }

    /// Queues a request and returns its event stream; a bad request or a full engine is refused here.
    pub fn submit(&self, req: Request) -> Result<RequestStream, HandleError> {
        crate::validate(&req, self.shared.vocab_size, self.shared.max_len)?;
        let limit = self.shared.max_in_flight;
        let taken =
            self.shared.in_flight.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limit).then_some(n + 1));
        if taken.is_err() {
            return Err(HandleError::QueueFull { limit });
        }
        let id = SeqId(self.shared.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, events) = unbounded_channel();
        if self.commands.send(Command::Add(id, req, tx)).is_err() {
            self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(HandleError::Stopped);
        }
        Ok(RequestStream { id, events, commands: self.commands.clone(), done: false })
    }

    /// Counters as of the last step.
    pub fn stats(&self) -> EngineStats {
        let mut s = self.shared.stats.lock().unwrap_or_else(|e| e.into_inner()).clone();
        s.requests_in_flight = self.shared.in_flight.load(Ordering::Acquire);
        s
    }
}

/// The loop: take commands (waiting for one when idle), then one step, then emit.
fn run<B: FullBackend>(mut engine: Engine<B>, commands: Receiver<Command>, shared: &Shared) {
    let mut streams: HashMap<SeqId, UnboundedSender<Event>> = HashMap::new();
    let mut stats = EngineStats::default();
    loop {
        let first = if engine.has_work() {
            commands.try_recv().ok()
        } else {
            match commands.recv() {
                Ok(c) => Some(c),
                Err(_) => return,
            }
        };
        for cmd in first.into_iter().chain(commands.try_iter()) {
            match cmd {
                Command::Add(id, req, tx) => {
                    let prompt_len = req.prompt.len() as u64;
                    match engine.add_request_as(id, req) {
                        Ok(()) => {
                            stats.prompt_tokens_total += prompt_len;
                            streams.insert(id, tx);
                        }
                        Err(e) => {
                            let _ = tx.send(Event::Failed(e));
                            stats.requests_failed += 1;
                            shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                        }
                    }
                }
                Command::Cancel(id) => {
                    if streams.remove(&id).is_some() {
                        engine.abort(id);
                        stats.requests_cancelled += 1;
                        shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                    }
                }
            }
        }
        if !engine.has_work() {
            publish(shared, &engine, &stats);
            continue;
        }
        match catch_unwind(AssertUnwindSafe(|| engine.step())) {
            Ok(outputs) => {
                stats.steps_total += 1;
                for out in outputs {
                    let (id, finished) = (out.seq_id, out.finished);
                    stats.generated_tokens_total += 1;
                    if let Some(reason) = finished {
                        // Free the slot before the client can see the end: a client that submits
                        // again as soon as its last token arrives must find room.
                        shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                        match reason {
                            FinishReason::Stop => stats.requests_finished_stop += 1,
                            FinishReason::Length => stats.requests_finished_length += 1,
                        }
                        if let Some(tx) = streams.remove(&id) {
                            let _ = tx.send(Event::Token(out));
                        }
                        continue;
                    }
                    let delivered = streams.get(&id).is_some_and(|tx| tx.send(Event::Token(out)).is_ok());
                    if !delivered && streams.remove(&id).is_some() {
                        // The client went away without a word: free its lane now.
                        engine.abort(id);
                        stats.requests_cancelled += 1;
                        shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                    }
                }
            }
            Err(panic) => {
                let why = panic_message(panic.as_ref()).unwrap_or_else(|| "a step panicked".into());
                for (id, tx) in streams.drain() {
                    engine.abort(id);
                    let _ = tx.send(Event::Failed(EngineError::Internal(why.clone())));
                    stats.requests_failed += 1;
                    shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
        publish(shared, &engine, &stats);
    }
}

fn publish<B: FullBackend>(shared: &Shared, engine: &Engine<B>, stats: &EngineStats) {
    let mut s = shared.stats.lock().unwrap_or_else(|e| e.into_inner());
    *s = EngineStats { scheduler: engine.stats(), drafts: engine.draft_stats(), ..stats.clone() };
}

/// The message a panic carried (`panic!` with a format or a literal), if any.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    payload.downcast_ref::<String>().cloned().or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
}

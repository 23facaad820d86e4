//! Runs a [`Job`] on the engine: one engine request per (prompt, answer), each driven by a task
//! that turns its tokens into text pieces (whole characters, stop sequences cut and never
//! leaked) and sends them to the handler. Dropping the receiver — a client that went away —
//! ends every task, whose dropped engine stream cancels its request within one step.

use crate::error::ApiError;
use crate::metrics::Outcome;
use crate::params::Job;
use crate::state::{AppState, LoadedModel};
use plumb_engine::{Event, FinishReason, Request, RequestStream};
use plumb_tokenizer::{StopMatcher, StopStep, StreamDecoder};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// A generated token's log-probability and its top alternatives, by id.
#[derive(Clone, Debug)]
pub struct TokenInfo {
    pub id: u32,
    pub logprob: f64,
    pub top: Vec<(u32, f64)>,
}

/// Why an answer ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    Stop,
    Length,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// What one step added to one answer.
#[derive(Debug)]
pub struct Piece {
    /// The answer's index among all of the request's answers (prompt-major).
    pub choice: usize,
    pub text: String,
    /// The tokens of this step, when log-probabilities were asked for (end-of-turn tokens excluded).
    pub tokens: Vec<TokenInfo>,
    /// Set on an answer's last piece.
    pub finish: Option<Finish>,
    /// Tokens generated for this answer so far.
    pub completion_tokens: usize,
}

/// What a running job sends its handler.
#[derive(Debug)]
pub enum ChoiceEvent {
    Piece(Piece),
    Failed(ApiError),
}

/// A job started on the engine.
#[derive(Debug)]
pub struct Running {
    pub events: UnboundedReceiver<ChoiceEvent>,
    pub num_choices: usize,
    pub prompt_tokens: usize,
}

/// Submits every answer of `job`; refuses the whole job (queueing nothing) if any is refused.
pub fn start(job: &Job, model: &Arc<LoadedModel>, state: &Arc<AppState>) -> Result<Running, ApiError> {
    let arrived = Instant::now();
    let max_len = model.handle.max_len();
    let stop_ids = model.tokenizer.spec().eog_ids.clone();
    let mut streams: Vec<(usize, RequestStream, Option<String>)> = Vec::new();
    for (p, prompt) in job.prompts.iter().enumerate() {
        if prompt.len() >= max_len {
            return Err(ApiError::NoRoom { prompt_len: prompt.len(), max_len });
        }
        let max_tokens = job.max_tokens.unwrap_or(max_len - prompt.len());
        let echo = job.echo.then(|| model.tokenizer.decode(prompt, false).unwrap_or_default());
        for i in 0..job.n {
            let mut params = job.params.clone();
            params.seed = job.seed_of(i);
            let mut req = Request::new(prompt.clone(), params, max_tokens, stop_ids.clone());
            req.logprobs = job.logprobs;
            streams.push((p * job.n + i, model.handle.submit(req)?, echo.clone()));
        }
    }
    let prompt_tokens = job.prompts.iter().map(Vec::len).sum();
    state.metrics.prompt_tokens(prompt_tokens * job.n);
    let (tx, events) = unbounded_channel();
    let num_choices = streams.len();
    for (choice, stream, echo) in streams {
        let (model, state, tx, stops) = (model.clone(), state.clone(), tx.clone(), job.stops.clone());
        let want_logprobs = job.logprobs.is_some();
        tokio::spawn(async move {
            drive(Answer { choice, stream, echo, stops, want_logprobs, arrived }, &model, &state, &tx).await;
        });
    }
    Ok(Running { events, num_choices, prompt_tokens })
}

/// One answer in flight.
struct Answer {
    choice: usize,
    stream: RequestStream,
    echo: Option<String>,
    stops: Vec<String>,
    want_logprobs: bool,
    arrived: Instant,
}

/// Turns one answer's tokens into pieces until it ends, fails, or its handler goes away.
async fn drive(mut a: Answer, model: &LoadedModel, state: &AppState, tx: &UnboundedSender<ChoiceEvent>) {
    let tok = &model.tokenizer;
    let mut decoder = StreamDecoder::new(tok, true);
    let mut matcher = StopMatcher::new(a.stops.iter().cloned());
    let (mut generated, mut last) = (0usize, None::<Instant>);
    let mut text = a.echo.take().unwrap_or_default();
    loop {
        let out = match a.stream.next().await {
            Some(Event::Token(out)) => out,
            Some(Event::Failed(e)) => {
                let _ = tx.send(ChoiceEvent::Failed(e.into()));
                return;
            }
            None => {
                let _ = tx.send(ChoiceEvent::Failed(ApiError::ShuttingDown));
                return;
            }
        };
        let now = Instant::now();
        state.metrics.token(last.map(|l| now - l), now - a.arrived);
        last = Some(now);
        generated += 1;
        let decoded = decoder.push(out.token).unwrap_or_default();
        let mut finish = None;
        match matcher.push(&decoded) {
            StopStep::Continue(t) => text.push_str(&t),
            StopStep::Stopped { text: t, .. } => {
                text.push_str(&t);
                finish = Some(Finish::Stop);
            }
        }
        if finish.is_none()
            && let Some(reason) = out.finished
        {
            match matcher.push(&decoder.finish()) {
                StopStep::Continue(t) => {
                    text.push_str(&t);
                    text.push_str(&matcher.finish());
                    finish = Some(match reason {
                        FinishReason::Stop => Finish::Stop,
                        FinishReason::Length => Finish::Length,
                    });
                }
                StopStep::Stopped { text: t, .. } => {
                    text.push_str(&t);
                    finish = Some(Finish::Stop);
                }
            }
        }
        let mut tokens = Vec::new();
        if let Some(lp) = out.logprobs.filter(|_| a.want_logprobs && !tok.is_eog(out.token)) {
            tokens.push(TokenInfo { id: lp.token, logprob: lp.logprob, top: lp.top });
        }
        let piece =
            Piece { choice: a.choice, text: std::mem::take(&mut text), tokens, finish, completion_tokens: generated };
        // A failed send means the handler is gone; returning drops the engine stream, which
        // cancels the request (a stop sequence ends it the same way).
        if tx.send(ChoiceEvent::Piece(piece)).is_err() || finish.is_some() {
            return;
        }
    }
}

/// A token as text (lossy where it is part of a character) and as bytes, for log-probabilities.
pub fn token_text(model: &LoadedModel, id: u32) -> (String, Vec<u8>) {
    let bytes = model.tokenizer.token_bytes(id).map(<[u8]>::to_vec).unwrap_or_default();
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// One answer, whole.
#[derive(Debug, Default)]
pub struct Collected {
    pub text: String,
    pub tokens: Vec<TokenInfo>,
    pub finish: Option<Finish>,
    pub completion_tokens: usize,
}

/// Waits for every answer of a non-streamed job.
pub async fn collect(mut running: Running, state: &Arc<AppState>) -> Result<Vec<Collected>, ApiError> {
    let mut answers: Vec<Collected> = (0..running.num_choices).map(|_| Collected::default()).collect();
    let mut open = running.num_choices;
    let mut guard = OutcomeGuard::new(state.clone());
    while open > 0 {
        match running.events.recv().await {
            Some(ChoiceEvent::Piece(p)) => {
                let a = &mut answers[p.choice];
                a.text.push_str(&p.text);
                a.tokens.extend(p.tokens);
                a.completion_tokens = p.completion_tokens;
                if let Some(f) = p.finish {
                    a.finish = Some(f);
                    guard.saw(f);
                    open -= 1;
                }
            }
            Some(ChoiceEvent::Failed(e)) => {
                guard.fail();
                return Err(e);
            }
            None => {
                guard.fail();
                return Err(ApiError::Internal("the answer's task ended early".into()));
            }
        }
    }
    guard.done();
    Ok(answers)
}

/// Records a request's outcome once: as it finished, or as cancelled if dropped before.
#[derive(Debug)]
pub struct OutcomeGuard {
    state: Arc<AppState>,
    length: bool,
    recorded: bool,
}

impl OutcomeGuard {
    pub fn new(state: Arc<AppState>) -> Self {
        OutcomeGuard { state, length: false, recorded: false }
    }

    pub fn saw(&mut self, f: Finish) {
        self.length |= f == Finish::Length;
    }

    pub fn done(&mut self) {
        self.record(if self.length { Outcome::Length } else { Outcome::Stop });
    }

    pub fn fail(&mut self) {
        self.record(Outcome::Failed);
    }

    fn record(&mut self, o: Outcome) {
        if !self.recorded {
            self.recorded = true;
            self.state.metrics.finished(o);
        }
    }
}

impl Drop for OutcomeGuard {
    fn drop(&mut self) {
        self.record(Outcome::Cancelled);
    }
}

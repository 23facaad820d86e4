//! Streams a running job as server-sent events: one `data:` chunk per piece, an optional usage
//! chunk, then `data: [DONE]`. An engine failure mid-stream becomes an `{"error": …}` event.
//! Dropping the stream (the client disconnected) drops the job's receiver, which cancels it.

use crate::generate::{ChoiceEvent, OutcomeGuard, Piece, Running};
use crate::state::AppState;
use crate::wire::Usage;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use serde::Serialize;
use std::convert::Infallible;
use std::sync::Arc;

/// How one route shapes its chunks.
pub trait Chunks: Send + 'static {
    /// Chunks sent before any token (chat: each choice's role).
    fn opening(&mut self) -> Vec<serde_json::Value>;
    /// The chunk for one piece.
    fn piece(&mut self, piece: Piece) -> serde_json::Value;
    /// The usage chunk (sent only when the request asked for it).
    fn usage(&mut self, usage: Usage) -> serde_json::Value;
}

struct Streaming<C> {
    running: Running,
    chunks: C,
    guard: OutcomeGuard,
    pending: std::collections::VecDeque<String>,
    open: usize,
    completion_tokens: Vec<usize>,
    include_usage: bool,
    finished: bool,
}

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| format!("{{\"error\":{{\"message\":\"{e}\"}}}}"))
}

/// The SSE response for `running`.
pub fn respond<C: Chunks>(running: Running, mut chunks: C, include_usage: bool, state: Arc<AppState>) -> Response {
    let pending = chunks.opening().iter().map(json).collect();
    let open = running.num_choices;
    let s = Streaming {
        completion_tokens: vec![0; open],
        running,
        chunks,
        guard: OutcomeGuard::new(state),
        pending,
        open,
        include_usage,
        finished: false,
    };
    Sse::new(events(s)).into_response()
}

fn events<C: Chunks>(s: Streaming<C>) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    stream::unfold(s, |mut s| async move {
        loop {
            if let Some(data) = s.pending.pop_front() {
                return Some((Ok(Event::default().data(data)), s));
            }
            if s.finished {
                return None;
            }
            if s.open == 0 {
                s.guard.done();
                if s.include_usage {
                    let completion_tokens: usize = s.completion_tokens.iter().sum();
                    let prompt_tokens = s.running.prompt_tokens;
                    let usage =
                        Usage { prompt_tokens, completion_tokens, total_tokens: prompt_tokens + completion_tokens };
                    let chunk = s.chunks.usage(usage);
                    s.pending.push_back(json(&chunk));
                }
                s.pending.push_back("[DONE]".into());
                s.finished = true;
                continue;
            }
            match s.running.events.recv().await {
                Some(ChoiceEvent::Piece(p)) => {
                    s.completion_tokens[p.choice] = p.completion_tokens;
                    if let Some(f) = p.finish {
                        s.guard.saw(f);
                        s.open -= 1;
                    }
                    let chunk = s.chunks.piece(p);
                    s.pending.push_back(json(&chunk));
                }
                Some(ChoiceEvent::Failed(e)) => {
                    s.guard.fail();
                    s.pending.push_back(json(&e.body()));
                    s.pending.push_back("[DONE]".into());
                    s.finished = true;
                }
                None => {
                    s.guard.fail();
                    s.finished = true;
                }
            }
        }
    })
}

//! `POST /v1/completions`: a prompt (text, texts or token ids) continued, answered whole or
//! streamed as `text_completion` events, with the legacy log-probability layout.

use crate::error::ApiError;
use crate::generate::{self, Piece, TokenInfo, token_text};
use crate::metrics::Outcome;
use crate::routes::{JsonBody, completion_id};
use crate::sse::{self, Chunks};
use crate::state::{AppState, LoadedModel, unix_now};
use crate::wire::*;
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Adds `tokens` to a choice's legacy log-probabilities; `offset` is the choice's text length
/// (in characters) before them.
fn extend_logprobs(model: &LoadedModel, lp: &mut CompletionLogprobs, tokens: &[TokenInfo], mut offset: usize) {
    for t in tokens {
        let (text, _) = token_text(model, t.id);
        let top: BTreeMap<String, f64> =
            t.top.iter().map(|&(id, logprob)| (token_text(model, id).0, logprob)).collect();
        lp.text_offset.push(offset);
        offset += text.chars().count();
        lp.tokens.push(text);
        lp.token_logprobs.push(Some(t.logprob));
        lp.top_logprobs.push(Some(top));
    }
}

/// Answers a completion request.
#[utoipa::path(
    post,
    path = "/v1/completions",
    request_body = CompletionRequest,
    responses(
        (status = 200, description = "The completion; with `stream: true`, server-sent `Completion` chunks ending with `[DONE]`",
         content((Completion = "application/json"), (Completion = "text/event-stream"))),
        crate::error::GenerationErrors,
    )
)]
pub async fn completions(State(state): State<Arc<AppState>>, JsonBody(body): JsonBody) -> Result<Response, ApiError> {
    let model = state.ready()?;
    let job = crate::params::completion(&body, &model).inspect_err(|_| state.metrics.finished(Outcome::Rejected))?;
    let running = generate::start(&job, &model, &state).inspect_err(|_| state.metrics.finished(Outcome::Rejected))?;
    let (id, created) = (completion_id("cmpl"), unix_now());
    let fingerprint = state.config.fingerprint.clone();
    let want_logprobs = job.logprobs.is_some();
    if job.stream {
        let offsets = vec![0; running.num_choices];
        let chunks = CompletionChunks { id, created, fingerprint, model, want_logprobs, offsets };
        return Ok(sse::respond(running, chunks, job.include_usage, state.clone()));
    }
    let prompt_tokens = running.prompt_tokens;
    let answers = generate::collect(running, &state).await?;
    let completion_tokens = answers.iter().map(|a| a.completion_tokens).sum();
    let choices = answers
        .into_iter()
        .enumerate()
        .map(|(index, a)| {
            let logprobs = want_logprobs.then(|| {
                let mut lp = CompletionLogprobs::default();
                extend_logprobs(&model, &mut lp, &a.tokens, 0);
                lp
            });
            CompletionChoice {
                index,
                text: a.text,
                logprobs,
                finish_reason: Some(a.finish.map_or("stop", |f| f.as_str()).into()),
            }
        })
        .collect();
    Ok(Json(Completion {
        id,
        object: "text_completion".into(),
        created,
        model: model.name.clone(),
        system_fingerprint: fingerprint,
        choices,
        usage: Some(Usage { prompt_tokens, completion_tokens, total_tokens: prompt_tokens + completion_tokens }),
    })
    .into_response())
}

struct CompletionChunks {
    id: String,
    created: u64,
    fingerprint: String,
    model: Arc<LoadedModel>,
    want_logprobs: bool,
    /// Characters sent so far per choice (the next token's `text_offset`).
    offsets: Vec<usize>,
}

impl CompletionChunks {
    fn chunk(&self, choices: Vec<CompletionChoice>, usage: Option<Usage>) -> serde_json::Value {
        serde_json::to_value(Completion {
            id: self.id.clone(),
            object: "text_completion".into(),
            created: self.created,
            model: self.model.name.clone(),
            system_fingerprint: self.fingerprint.clone(),
            choices,
            usage,
        })
        .unwrap_or_default()
    }
}

impl Chunks for CompletionChunks {
    fn opening(&mut self) -> Vec<serde_json::Value> {
        Vec::new()
    }

    fn piece(&mut self, p: Piece) -> serde_json::Value {
        let logprobs = self.want_logprobs.then(|| {
            let mut lp = CompletionLogprobs::default();
            extend_logprobs(&self.model, &mut lp, &p.tokens, self.offsets[p.choice]);
            lp
        });
        self.offsets[p.choice] += p.text.chars().count();
        let finish_reason = p.finish.map(|f| f.as_str().into());
        self.chunk(vec![CompletionChoice { index: p.choice, text: p.text, logprobs, finish_reason }], None)
    }

    fn usage(&mut self, usage: Usage) -> serde_json::Value {
        self.chunk(Vec::new(), Some(usage))
    }
}

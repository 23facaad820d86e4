//! `POST /v1/chat/completions`: messages through the model's chat template, answered whole or
//! streamed as `chat.completion.chunk` events.

use crate::error::ApiError;
use crate::generate::{self, Collected, Piece, TokenInfo, token_text};
use crate::routes::{JsonBody, completion_id};
use crate::sse::{self, Chunks};
use crate::state::{AppState, LoadedModel, unix_now};
use crate::wire::*;
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

fn logprobs(model: &LoadedModel, tokens: &[TokenInfo]) -> ChatLogprobs {
    let entry = |t: &TokenInfo| {
        let (token, bytes) = token_text(model, t.id);
        let top_logprobs = t
            .top
            .iter()
            .map(|&(id, logprob)| {
                let (token, bytes) = token_text(model, id);
                TopLogprob { token, logprob, bytes }
            })
            .collect();
        TokenLogprob { token, logprob: t.logprob, bytes, top_logprobs }
    };
    ChatLogprobs { content: tokens.iter().map(entry).collect() }
}

/// Answers a chat request.
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    request_body = ChatCompletionRequest,
    responses(
        (status = 200, description = "The answer; with `stream: true`, server-sent `ChatCompletionChunk` events ending with `[DONE]`",
         content((ChatCompletion = "application/json"), (ChatCompletionChunk = "text/event-stream"))),
        crate::error::GenerationErrors,
    )
)]
pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let model = state.ready()?;
    let job = crate::params::chat(&body, &model)
        .inspect_err(|_| state.metrics.finished(crate::metrics::Outcome::Rejected))?;
    let running = generate::start(&job, &model, &state)
        .inspect_err(|_| state.metrics.finished(crate::metrics::Outcome::Rejected))?;
    let (id, created) = (completion_id("chatcmpl"), unix_now());
    let fingerprint = state.config.fingerprint.clone();
    if job.stream {
        let chunks = ChatChunks { id, created, fingerprint, model, num_choices: running.num_choices };
        return Ok(sse::respond(running, chunks, job.include_usage, state.clone()));
    }
    let prompt_tokens = running.prompt_tokens;
    let answers = generate::collect(running, &state).await?;
    let completion_tokens = answers.iter().map(|a| a.completion_tokens).sum();
    let want_logprobs = job.logprobs.is_some();
    let choices = answers
        .into_iter()
        .enumerate()
        .map(|(index, a): (usize, Collected)| ChatChoice {
            index,
            logprobs: want_logprobs.then(|| logprobs(&model, &a.tokens)),
            message: ChatMessageOut { role: "assistant".into(), content: a.text },
            finish_reason: a.finish.map_or("stop", |f| f.as_str()).into(),
        })
        .collect();
    Ok(Json(ChatCompletion {
        id,
        object: "chat.completion".into(),
        created,
        model: model.name.clone(),
        system_fingerprint: fingerprint,
        choices,
        usage: Usage { prompt_tokens, completion_tokens, total_tokens: prompt_tokens + completion_tokens },
    })
    .into_response())
}

struct ChatChunks {
    id: String,
    created: u64,
    fingerprint: String,
    model: Arc<LoadedModel>,
    num_choices: usize,
}

impl ChatChunks {
    fn chunk(&self, choices: Vec<ChatChunkChoice>, usage: Option<Usage>) -> serde_json::Value {
        serde_json::to_value(ChatCompletionChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk".into(),
            created: self.created,
            model: self.model.name.clone(),
            system_fingerprint: self.fingerprint.clone(),
            choices,
            usage,
        })
        .unwrap_or_default()
    }
}

impl Chunks for ChatChunks {
    fn opening(&mut self) -> Vec<serde_json::Value> {
        (0..self.num_choices)
            .map(|index| {
                let delta = ChatDelta { role: Some("assistant".into()), content: Some(String::new()) };
                self.chunk(vec![ChatChunkChoice { index, delta, logprobs: None, finish_reason: None }], None)
            })
            .collect()
    }

    fn piece(&mut self, p: Piece) -> serde_json::Value {
        let logprobs = (!p.tokens.is_empty()).then(|| logprobs(&self.model, &p.tokens));
        let delta = ChatDelta { role: None, content: Some(p.text) };
        let choice =
            ChatChunkChoice { index: p.choice, delta, logprobs, finish_reason: p.finish.map(|f| f.as_str().into()) };
        self.chunk(vec![choice], None)
    }

    fn usage(&mut self, usage: Usage) -> serde_json::Value {
        self.chunk(Vec::new(), Some(usage))
    }
}

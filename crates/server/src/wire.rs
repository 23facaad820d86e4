//! The OpenAI wire format: what clients send and what they get back, as serde types. JSON lives
//! here and in the handlers' edges only; `params` turns a request into engine types at once.
//! Invariant: every type here is also the OpenAPI schema `/openapi.json` publishes, so the two
//! cannot drift. Unknown request fields are ignored, as OpenAI does.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// A stop sequence or several.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// Options for a streamed response.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub struct StreamOptions {
    /// Send one last chunk with the usage of the whole request (its `choices` is empty).
    pub include_usage: Option<bool>,
}

/// Sampling and length parameters shared by both generation routes.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub struct SamplingFields {
    /// Sampling temperature; 0 picks the most likely token.
    #[schema(minimum = 0.0, maximum = 2.0)]
    pub temperature: Option<f32>,
    /// Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p.
    #[schema(exclusive_minimum = 0.0, maximum = 1.0)]
    pub top_p: Option<f32>,
    /// Keep the k most likely tokens (0: off).
    #[schema(minimum = 0)]
    pub top_k: Option<u32>,
    /// Drop tokens less likely than min_p × the most likely one.
    #[schema(minimum = 0.0, maximum = 1.0)]
    pub min_p: Option<f32>,
    /// The same seed gives the same answer, alone or under load.
    pub seed: Option<i64>,
    #[schema(minimum = -2.0, maximum = 2.0)]
    pub presence_penalty: Option<f32>,
    #[schema(minimum = -2.0, maximum = 2.0)]
    pub frequency_penalty: Option<f32>,
    /// Divides the logit of every token already present (prompt or answer); 1: off.
    #[schema(exclusive_minimum = 0.0)]
    pub repetition_penalty: Option<f32>,
    /// Token id (as a string) → bias added to its logit, -100..100.
    pub logit_bias: Option<BTreeMap<String, f32>>,
    pub stop: Option<Stop>,
    /// How many answers to generate for each prompt.
    #[schema(minimum = 1, maximum = 128)]
    pub n: Option<u32>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    /// Accepted and not used.
    pub user: Option<String>,
}

/// A part of a message's content.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct ContentPart {
    /// Only `text` is supported.
    #[serde(rename = "type")]
    #[schema(pattern = "^text$")]
    pub kind: String,
    pub text: Option<String>,
}

/// A message's content: text, or a list of parts.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One turn of the conversation.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct ChatMessageIn {
    /// `system`, `developer`, `user` or `assistant`.
    #[schema(pattern = "^(system|developer|user|assistant)$")]
    pub role: String,
    pub content: Option<MessageContent>,
    /// Accepted and not used.
    pub name: Option<String>,
}

/// `POST /v1/chat/completions`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct ChatCompletionRequest {
    pub model: String,
    pub messages: Vec<ChatMessageIn>,
    /// Most tokens to generate (default: what the context leaves).
    #[schema(minimum = 1)]
    pub max_tokens: Option<u32>,
    /// The same as max_tokens (the newer name); give one of them.
    #[schema(minimum = 1)]
    pub max_completion_tokens: Option<u32>,
    /// Return each token's log-probability.
    pub logprobs: Option<bool>,
    /// With logprobs: the most likely alternatives at each position.
    #[schema(minimum = 0, maximum = 20)]
    pub top_logprobs: Option<u32>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
}

/// A prompt: text, several texts, token ids, or several lists of token ids.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

/// `POST /v1/completions`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: Prompt,
    /// Most tokens to generate (default 16, as OpenAI).
    #[schema(minimum = 1)]
    pub max_tokens: Option<u32>,
    /// Return the log-probabilities of each token and this many alternatives.
    #[schema(minimum = 0, maximum = 20)]
    pub logprobs: Option<u32>,
    /// Put the prompt in front of the answer.
    pub echo: Option<bool>,
    /// Only 1 or n (plumb does not rank extra candidates).
    #[schema(minimum = 1)]
    pub best_of: Option<u32>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
}

/// Token counts of a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

/// An alternative token at one position.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f64,
    pub bytes: Vec<u8>,
}

/// A generated token with its log-probability and the alternatives asked for.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f64,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

/// A chat choice's log-probabilities.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct ChatLogprobs {
    pub content: Vec<TokenLogprob>,
}

/// The assistant's message.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ChatMessageOut {
    pub role: String,
    pub content: String,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ChatChoice {
    pub index: usize,
    pub message: ChatMessageOut,
    pub logprobs: Option<ChatLogprobs>,
    /// `stop` (end of turn or a stop sequence) or `length`.
    pub finish_reason: String,
}

/// A chat answer.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ChatCompletion {
    pub id: String,
    /// `chat.completion`.
    pub object: String,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
}

/// What a streamed chat chunk adds to its choice.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct ChatDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ChatChunkChoice {
    pub index: usize,
    pub delta: ChatDelta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<String>,
}

/// One server-sent event of a streamed chat answer.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ChatCompletionChunk {
    pub id: String,
    /// `chat.completion.chunk`.
    pub object: String,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<ChatChunkChoice>,
    /// Set on the last chunk only, when `stream_options.include_usage` asked for it.
    pub usage: Option<Usage>,
}

/// A completion choice's log-probabilities (the legacy layout).
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    /// null for the first prompt token when echoed.
    pub token_logprobs: Vec<Option<f64>>,
    pub top_logprobs: Vec<Option<BTreeMap<String, f64>>>,
    pub text_offset: Vec<usize>,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    /// `stop` or `length`; null in a streamed chunk until the choice ends.
    pub finish_reason: Option<String>,
}

/// A completion, or one streamed chunk of one (the same shape).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Completion {
    pub id: String,
    /// `text_completion`.
    pub object: String,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<CompletionChoice>,
    /// Always set when not streaming; in a stream only on the usage chunk.
    pub usage: Option<Usage>,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ModelCard {
    pub id: String,
    /// `model`.
    pub object: String,
    pub created: u64,
    pub owned_by: String,
    /// Prompt and answer together, in tokens.
    pub max_model_len: usize,
}

/// `GET /v1/models`.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ModelList {
    /// `list`.
    pub object: String,
    pub data: Vec<ModelCard>,
}

/// `GET /health`.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`, or `loading` (with status 503).
    pub status: String,
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `not_found_error`, `rate_limit_error`,
    /// `server_error` or `unavailable_error`.
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
}

/// Every error, as OpenAI shapes it.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

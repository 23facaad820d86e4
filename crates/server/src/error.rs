//! Every error the server answers with, mapped to its status and OpenAI's body shape in one place
//! (`{"error": {"message", "type", "param", "code"}}`). Request errors are 4xx; an engine fault is
//! a 500 for the requests it touched and the server keeps serving.

use crate::wire::{ErrorBody, ErrorDetail};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use plumb_engine::{EngineError, HandleError};
use plumb_scheduler::RequestError;

/// The errors a generation route may answer with, for the OpenAPI document.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum GenerationErrors {
    /// Bad parameters, malformed JSON, an unsupported field or a prompt over the context
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// Missing or wrong API key
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// Unknown model
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// Body too large
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// Too many requests in flight
    #[response(status = 429)]
    QueueFull(ErrorBody),
    /// The engine failed
    #[response(status = 500)]
    Internal(ErrorBody),
    /// Loading or shutting down
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// Why a request was not answered.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A parameter is missing, has the wrong type or is out of range.
    #[error("{message}")]
    BadParam { message: String, param: Option<String> },
    /// A field plumb does not support yet (never silently ignored).
    #[error("`{param}` is not supported by plumb yet{why}")]
    Unsupported { param: String, why: String },
    #[error("the request body is not valid JSON: {0}")]
    MalformedJson(String),
    #[error(
        "this model's maximum context length is {max_len} tokens; the request has {prompt_len} prompt tokens \
         and asks for {max_tokens} more"
    )]
    TooLong { prompt_len: usize, max_tokens: usize, max_len: usize },
    #[error(
        "the prompt has {prompt_len} tokens, which leaves no room to answer in this model's context of {max_len} tokens"
    )]
    NoRoom { prompt_len: usize, max_len: usize },
    #[error("missing or invalid API key; send it as `Authorization: Bearer <key>`")]
    Unauthorized,
    #[error("the model `{asked}` does not exist; this server serves `{served}`")]
    UnknownModel { asked: String, served: String },
    #[error("no route for {method} {path}")]
    NoRoute { method: String, path: String },
    #[error("{method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    #[error("the request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("{0}")]
    QueueFull(String),
    #[error("the model is still loading; try again shortly")]
    Loading,
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("the engine failed while computing this request: {0}")]
    Internal(String),
}

impl ApiError {
    pub fn param(message: impl Into<String>, param: &str) -> Self {
        ApiError::BadParam { message: message.into(), param: Some(param.into()) }
    }

    pub fn unsupported(param: &str, why: &str) -> Self {
        ApiError::Unsupported { param: param.into(), why: why.into() }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadParam { .. }
            | ApiError::Unsupported { .. }
            | ApiError::MalformedJson(_)
            | ApiError::TooLong { .. }
            | ApiError::NoRoom { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::UnknownModel { .. } | ApiError::NoRoute { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::QueueFull(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Loading | ApiError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn kind(&self) -> &'static str {
        match self.status() {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            StatusCode::SERVICE_UNAVAILABLE => "unavailable_error",
            StatusCode::INTERNAL_SERVER_ERROR => "server_error",
            _ => "invalid_request_error",
        }
    }

    fn param_name(&self) -> Option<String> {
        match self {
            ApiError::BadParam { param, .. } => param.clone(),
            ApiError::Unsupported { param, .. } => Some(param.clone()),
            ApiError::TooLong { .. } | ApiError::NoRoom { .. } => Some("messages".into()),
            ApiError::UnknownModel { .. } => Some("model".into()),
            _ => None,
        }
    }

    fn code(&self) -> Option<&'static str> {
        Some(match self {
            ApiError::Unsupported { .. } => "unsupported_parameter",
            ApiError::MalformedJson(_) => "malformed_json",
            ApiError::TooLong { .. } | ApiError::NoRoom { .. } => "context_length_exceeded",
            ApiError::Unauthorized => "invalid_api_key",
            ApiError::UnknownModel { .. } => "model_not_found",
            ApiError::TooLarge { .. } => "request_too_large",
            ApiError::QueueFull(_) => "queue_full",
            _ => return None,
        })
    }

    /// The OpenAI-shaped body.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                message: self.to_string(),
                kind: self.kind().into(),
                param: self.param_name(),
                code: self.code().map(String::from),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response = (status, axum::Json(self.body())).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if matches!(status, StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE) {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Request(RequestError::TooLong { prompt_len, max_tokens, max_len }) => {
                ApiError::TooLong { prompt_len, max_tokens, max_len }
            }
            EngineError::Request(RequestError::QueueFull { .. }) => ApiError::QueueFull(e.to_string()),
            EngineError::Request(ref r) => ApiError::BadParam { message: r.to_string(), param: None },
            EngineError::Sampling(ref s) => {
                let param = match s {
                    plumb_sampling::SamplingError::OutOfRange { name, .. } => name.to_string(),
                    _ => "logit_bias".into(),
                };
                ApiError::BadParam { message: s.to_string(), param: Some(param) }
            }
            EngineError::BadToken { .. } => ApiError::BadParam { message: e.to_string(), param: None },
            EngineError::TooManyLogprobs { .. } => {
                ApiError::BadParam { message: e.to_string(), param: Some("logprobs".into()) }
            }
            EngineError::Internal(why) | EngineError::Backend(why) => ApiError::Internal(why),
        }
    }
}

impl From<HandleError> for ApiError {
    fn from(e: HandleError) -> Self {
        match e {
            HandleError::Invalid(e) => e.into(),
            HandleError::QueueFull { .. } => ApiError::QueueFull(e.to_string()),
            HandleError::Stopped => ApiError::ShuttingDown,
        }
    }
}

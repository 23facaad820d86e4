//! The router: every route, the API-key check, the body reader (size limit, JSON syntax) and the
//! answers for unknown routes and methods — all errors in OpenAI's shape.

use crate::error::ApiError;
use crate::state::AppState;
use crate::wire::{ErrorBody, Health, ModelCard, ModelList};
use axum::Json;
use axum::extract::{FromRequest, Path, Request, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Router, extract::DefaultBodyLimit};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use utoipa::OpenApi;

/// A request body parsed as JSON (any JSON; the route's parser gives it a type), refused with
/// 413 past the size limit and 400 when it is not JSON.
#[derive(Debug)]
pub struct JsonBody(pub serde_json::Value);

impl FromRequest<Arc<AppState>> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let limit = state.config.max_body_bytes;
        let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
        if declared.is_some_and(|n| n > limit) {
            return Err(ApiError::TooLarge { limit });
        }
        let bytes = axum::body::to_bytes(req.into_body(), limit).await.map_err(|_| ApiError::TooLarge { limit })?;
        serde_json::from_slice(&bytes).map(JsonBody).map_err(|e| ApiError::MalformedJson(e.to_string()))
    }
}

/// A fresh response id with `prefix`.
pub fn completion_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{:x}{n:06x}", crate::state::unix_now())
}

/// Compares in time that does not depend on where the strings differ.
fn same_key(given: &[u8], expected: &[u8]) -> bool {
    let mut diff = (given.len() ^ expected.len()) as u8 | u8::from(given.len() != expected.len());
    for (i, &e) in expected.iter().enumerate() {
        diff |= given.get(i).copied().unwrap_or(0) ^ e;
    }
    diff == 0
}

async fn require_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &state.config.api_key {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| same_key(g.trim().as_bytes(), key.as_bytes())) {
            return ApiError::Unauthorized.into_response();
        }
    }
    next.run(req).await
}

/// The served model.
#[utoipa::path(get, path = "/v1/models", responses(
    (status = 200, body = ModelList),
    (status = 401, body = ErrorBody),
    (status = 503, description = "Loading", body = ErrorBody),
))]
async fn models(State(state): State<Arc<AppState>>) -> Result<Json<ModelList>, ApiError> {
    let m = state.ready()?;
    Ok(Json(ModelList { object: "list".into(), data: vec![card(&m)] }))
}

fn card(m: &crate::state::LoadedModel) -> ModelCard {
    ModelCard {
        id: m.name.clone(),
        object: "model".into(),
        created: m.created,
        owned_by: "plumb".into(),
        max_model_len: m.handle.max_len(),
    }
}

/// One model by id.
#[utoipa::path(get, path = "/v1/models/{model}", params(("model" = String, Path)), responses(
    (status = 200, body = ModelCard),
    (status = 401, body = ErrorBody),
    (status = 404, body = ErrorBody),
    (status = 503, body = ErrorBody),
))]
async fn model(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<ModelCard>, ApiError> {
    let m = state.ready()?;
    if id != m.name {
        return Err(ApiError::UnknownModel { asked: id, served: m.name.clone() });
    }
    Ok(Json(card(&m)))
}

/// 200 once the model is loaded, 503 while it loads or the server drains.
#[utoipa::path(get, path = "/health", responses((status = 200, body = Health), (status = 503, body = Health)))]
async fn health(State(state): State<Arc<AppState>>) -> (StatusCode, Json<Health>) {
    match state.ready() {
        Ok(_) => (StatusCode::OK, Json(Health { status: "ok".into() })),
        Err(ApiError::ShuttingDown) => {
            (StatusCode::SERVICE_UNAVAILABLE, Json(Health { status: "shutting_down".into() }))
        }
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, Json(Health { status: "loading".into() })),
    }
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", responses((status = 200, content_type = "text/plain", body = String)))]
async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let stats = state.model.get().map(|m| m.handle.stats());
    let text = state.metrics.render(stats.as_ref());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", responses((status = 200, content_type = "application/json", body = Object)))]
async fn openapi(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    if let Some(m) = state.model.get() {
        // Name what this server actually serves, so clients and fuzzers reach past a 404.
        for req in ["ChatCompletionRequest", "CompletionRequest"] {
            let own = &mut doc["components"]["schemas"][req]["allOf"][1]["properties"];
            if own.is_object() {
                own["model"]["enum"] = serde_json::json!([m.name]);
                own["max_tokens"]["maximum"] = serde_json::json!(m.handle.max_len() - 1);
            }
        }
    }
    Json(doc)
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::NoRoute { method: method.to_string(), path: uri.path().into() }
}

async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed { method: method.to_string(), path: uri.path().into() }
}

#[derive(Debug, OpenApi)]
#[openapi(
    info(title = "plumb", description = "An OpenAI-compatible server for the plumb inference engine"),
    paths(crate::chat::chat_completions, crate::completions::completions, models, model, health, metrics, openapi),
    components(schemas(crate::wire::ChatCompletionChunk))
)]
pub struct ApiDoc;

/// Every route over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/v1/chat/completions", post(crate::chat::chat_completions))
        .route("/v1/completions", post(crate::completions::completions))
        .route("/v1/models", get(models))
        .route("/v1/models/{model}", get(model))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_key));
    Router::new()
        .merge(v1)
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_compare_whole() {
        assert!(same_key(b"secret", b"secret"));
        assert!(!same_key(b"secret", b"secreT"));
        assert!(!same_key(b"secre", b"secret"));
        assert!(!same_key(b"secret!", b"secret"));
        assert!(!same_key(b"", b"secret"));
        assert!(same_key(b"", b""));
    }
}

//! What every handler shares: the configuration, the model once it is loaded, the metrics and
//! whether the server is draining. The model is absent while it loads (routes answer 503).

use crate::error::ApiError;
use crate::metrics::Metrics;
use plumb_engine::EngineHandle;
use plumb_sampling::SamplingDefaults;
use plumb_tokenizer::{ChatTemplate, Tokenizer};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How the server runs.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Bearer key every `/v1` route requires; None: open.
    pub api_key: Option<String>,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Names the build in every response's `system_fingerprint`.
    pub fingerprint: String,
    /// How long in-flight requests may run on after SIGINT/SIGTERM before they are cancelled.
    pub grace: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            api_key: None,
            max_body_bytes: 4 << 20,
            fingerprint: format!("plumb-{}", env!("CARGO_PKG_VERSION")),
            grace: Duration::from_secs(10),
        }
    }
}

/// A model ready to serve: the engine running it and the text side of it.
pub struct LoadedModel {
    /// The id clients name in `model`.
    pub name: String,
    pub handle: EngineHandle,
    pub tokenizer: Tokenizer,
    pub template: Option<ChatTemplate>,
    /// The model's own sampling defaults: a request that leaves a parameter unset gets the
    /// model's value, else OpenAI's default.
    pub sampling: SamplingDefaults,
    /// Unix time the model was loaded.
    pub created: u64,
}

impl std::fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LoadedModel({}, {:?})", self.name, self.handle)
    }
}

impl LoadedModel {
    pub fn new(name: String, handle: EngineHandle, tokenizer: Tokenizer, template: Option<ChatTemplate>) -> Self {
        LoadedModel { name, handle, tokenizer, template, sampling: SamplingDefaults::default(), created: unix_now() }
    }

    /// The same model with the checkpoint's sampling defaults.
    pub fn with_sampling_defaults(self, sampling: SamplingDefaults) -> Self {
        LoadedModel { sampling, ..self }
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Shared by every handler.
#[derive(Debug)]
pub struct AppState {
    pub config: ServerConfig,
    pub model: OnceLock<Arc<LoadedModel>>,
    pub metrics: Metrics,
    draining: AtomicBool,
}

impl AppState {
    pub fn new(config: ServerConfig) -> Self {
        AppState { config, model: OnceLock::new(), metrics: Metrics::default(), draining: AtomicBool::new(false) }
    }

    /// The model, or why requests cannot be served now.
    pub fn ready(&self) -> Result<Arc<LoadedModel>, ApiError> {
        if self.draining.load(Ordering::Acquire) {
            return Err(ApiError::ShuttingDown);
        }
        self.model.get().cloned().ok_or(ApiError::Loading)
    }

    /// From now on new requests are refused with 503.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Release);
    }
}

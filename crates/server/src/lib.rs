//! plumb-server: the OpenAI-compatible HTTP API over the lanes engine (`plumb serve`).
//! It parses requests into engine types at once (`params`), runs them through an
//! [`plumb_engine::EngineHandle`] (`generate`), and maps every error to a status in one place
//! (`error`). It never picks a backend or reads a checkpoint: the caller hands it a loader.
//! Invariant: a request's answer is the engine's answer for the same tokens and parameters,
//! whatever else the server is doing.

mod chat;
mod completions;
mod error;
mod generate;
mod metrics;
mod params;
mod routes;
mod sse;
mod state;
pub mod wire;

pub use error::ApiError;
pub use params::choice_seed;
pub use routes::{ApiDoc, router};
pub use state::{AppState, LoadedModel, ServerConfig};

use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("loading the model failed: {0}")]
    Load(String),
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Serves on `listener` until `shutdown` resolves. The routes answer at once (503 while `load`
/// runs on a blocking thread); then in-flight requests get `config.grace` to finish before
/// they are cancelled. `on_ready` runs once the model is loaded.
pub async fn serve<L, S>(
    listener: TcpListener,
    config: ServerConfig,
    load: L,
    on_ready: impl FnOnce(&LoadedModel) + Send + 'static,
    shutdown: S,
) -> Result<(), ServerError>
where
    L: FnOnce() -> Result<LoadedModel, String> + Send + 'static,
    S: Future<Output = ()> + Send + 'static,
{
    let grace = config.grace;
    let state = Arc::new(AppState::new(config));
    let app = router(state.clone());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let loading = {
        let state = state.clone();
        tokio::task::spawn_blocking(move || {
            let model = Arc::new(load()?);
            // Serve first, then say so: a client that acts on the ready line must find the model.
            let _ = state.model.set(model.clone());
            on_ready(&model);
            Ok::<(), String>(())
        })
    };
    let draining = {
        let state = state.clone();
        async move {
            shutdown.await;
            state.drain();
            let _ = stop_tx.send(true);
        }
    };
    let server = axum::serve(listener, app).with_graceful_shutdown(draining);
    let mut grace_rx = stop_rx.clone();
    let grace_timer = async move {
        let _ = grace_rx.wait_for(|&stopped| stopped).await;
        tokio::time::sleep(grace).await;
    };
    let load_failed = async {
        match loading.await {
            Ok(Ok(())) => std::future::pending::<String>().await,
            Ok(Err(e)) => e,
            Err(e) => format!("the loading thread failed: {e}"),
        }
    };
    tokio::select! {
        r = server => Ok(r?),
        _ = grace_timer => Ok(()),
        e = load_failed => Err(ServerError::Load(e)),
    }
}

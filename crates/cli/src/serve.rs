//! `plumb serve`: the OpenAI-compatible server. Binds at once (health answers 503 while the model
//! loads), loads the model with the lanes engine, prints a ready line, and on SIGINT/SIGTERM stops
//! accepting, lets in-flight requests finish within the grace period, then exits 0.

use crate::counts;
use crate::receipt;
use crate::session::{Lanes, ModelArgs, OpenBackend, Session};
use anyhow::{Context, Result};
use plumb_engine::EngineHandle;
use plumb_server::{LoadedModel, ServerConfig};
use std::time::Duration;

/// `plumb serve`'s arguments.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Requests decoded together in one step.
    #[arg(long, default_value_t = 8, value_parser = counts::positive)]
    pub max_lanes: usize,
    /// Requests accepted at once (running and waiting); more are answered 429.
    #[arg(long, default_value_t = 256, value_parser = counts::positive)]
    pub max_queue: usize,
    /// Tokens computed per engine step (decode rows first, then prompt chunks). Default: 256 on
    /// the CPU, 2048 on CUDA.
    #[arg(long, value_parser = counts::positive)]
    pub step_tokens: Option<usize>,
    /// KV-cache positions shared by all requests (default: 2 × the context).
    #[arg(long, value_parser = counts::positive)]
    pub kv_tokens: Option<usize>,
    /// Require `Authorization: Bearer KEY` on /v1 routes (or set PLUMB_API_KEY).
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// The model id clients send (default: the file name without .gguf).
    #[arg(long, value_name = "NAME")]
    pub served_model_name: Option<String>,
    /// Seconds in-flight requests may run on after SIGINT/SIGTERM before they are cancelled.
    #[arg(long, default_value_t = 10)]
    pub grace: u64,
}

pub fn run(args: ServeArgs) -> Result<()> {
    crate::on_device!(args.model.device, B => serve_on::<B>(args))
}

fn serve_on<B: OpenBackend>(args: ServeArgs) -> Result<()>
where
    B::KvCache: 'static,
{
    // The device first: a missing GPU is one clear line before anything listens.
    let backend = B::open(&args.model)?;
    let api_key = args.api_key.clone().or_else(|| std::env::var("PLUMB_API_KEY").ok()).filter(|k| !k.is_empty());
    let config = ServerConfig {
        api_key,
        fingerprint: format!(
            "plumb-{}-{}",
            env!("CARGO_PKG_VERSION"),
            &receipt::BUILD_COMMIT[..receipt::BUILD_COMMIT.len().min(12)]
        ),
        grace: Duration::from_secs(args.grace),
        ..ServerConfig::default()
    };
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the server runtime")?;
    runtime.block_on(async move {
        let addr = format!("{}:{}", args.host, args.port);
        let listener = tokio::net::TcpListener::bind(&addr).await.with_context(|| format!("listening on {addr}"))?;
        let url = format!("http://{}", listener.local_addr()?);
        eprintln!("plumb serve: listening on {url} (the model is loading; /health answers 503 until it is ready)");
        let ready_url = url.clone();
        let load = move || load(&args, backend).map_err(|e| format!("{e:#}"));
        let on_ready = move |m: &LoadedModel| {
            eprintln!("ready: {} at {ready_url}/v1 (OpenAI API; Ctrl-C stops)", m.name);
        };
        plumb_server::serve(listener, config, load, on_ready, shutdown_signal()).await?;
        eprintln!("plumb serve: stopped");
        Ok(())
    })
}

fn load<B: OpenBackend>(args: &ServeArgs, backend: B) -> Result<LoadedModel>
where
    B::KvCache: 'static,
{
    let path = crate::resolve_model(args.model.model.as_deref())?;
    // Default: two full contexts, so a long request never waits for another one to finish.
    let kv_tokens = args.kv_tokens.unwrap_or(2 * args.model.ctx.unwrap_or(8192));
    let lanes = Lanes { max_lanes: args.max_lanes, kv_tokens, max_waiting: args.max_queue };
    let session = Session::open_lanes(
        &path,
        &args.model,
        args.step_tokens.unwrap_or(args.model.device.default_step_tokens(256)),
        backend,
        true,
        &lanes,
    )?;
    let name = args.served_model_name.clone().unwrap_or_else(|| {
        path.file_name().map_or("model".into(), |n| n.to_string_lossy().trim_end_matches(".gguf").to_string())
    });
    let handle = EngineHandle::spawn(session.engine, args.max_queue);
    Ok(LoadedModel::new(name, handle, session.tokenizer, session.template).with_sampling_defaults(session.sampling))
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    eprintln!("plumb serve: shutting down (in-flight requests get the grace period to finish)");
}

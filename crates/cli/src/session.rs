//! A loaded model ready to serve: checkpoint, tokenizer, chat template, backend and engine.
//! The CLI's one place that picks a backend: `--device` names it, [`on_device!`] turns it into a
//! type, and [`OpenBackend`] builds it.

use crate::counts;
use anyhow::{Context, Result};
use plumb_backend_cpu::CpuBackend;
use plumb_backend_cuda::CudaBackend;
use plumb_checkpoint::{Checkpoint, CheckpointRef};
use plumb_core::{FullBackend, KvStore, LinearInputs};
use plumb_engine::Engine;
use plumb_engine::load;
use plumb_sampling::SamplingDefaults;
use plumb_scheduler::SchedulerConfig;
use plumb_tokenizer::{ChatTemplate, Tokenizer};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// KV positions per block.
pub const BLOCK_SIZE: usize = 16;

/// Options shared by every command that runs a model.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// A .gguf path, a Hugging Face model folder (config.json + safetensors), or a known model name
    /// (default: SmolLM2-135M-Instruct, pulled on first use).
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// Kernel threads (default: all cores).
    #[arg(long, short = 't', default_value_t = 0, allow_negative_numbers = true, value_parser = counts::non_negative)]
    pub threads: usize,
    /// Context length in tokens, prompt and answer together (default: the model's, at most 8192).
    #[arg(long, allow_negative_numbers = true, value_parser = counts::positive)]
    pub ctx: Option<usize>,
    /// Where the model runs: `cpu`, or `cuda` / `cuda:N` for NVIDIA GPU N (run, serve, check and bench).
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    /// Draft tokens with this proposer and verify them in one step: `ngram[:k=4,n=3]` (prompt
    /// lookup; see also --draft-model). Answers are identical with or without it (run, chat,
    /// serve, bench).
    #[arg(long, value_name = "SPEC")]
    pub draft: Option<crate::draft::DraftSpec>,
    /// Draft tokens with this smaller model (a path or model name; it must share the model's
    /// tokenizer), on the same device. Answers are identical with or without it.
    #[arg(long, value_name = "MODEL")]
    pub draft_model: Option<String>,
    /// Drafts per step of --draft-model (1..=16, default 4).
    #[arg(long, value_name = "K", allow_negative_numbers = true, value_parser = counts::non_negative)]
    pub draft_k: Option<usize>,
    /// The element type of the KV cache: `f32` (default), `f16` or `bf16` (half the bytes per
    /// cached token, also for attention to read). A declared precision: `plumb check` gates the
    /// backend at it.
    #[arg(long, value_name = "TYPE", value_parser = parse_kv_dtype)]
    pub kv_dtype: Option<KvStore>,
    /// The element type linear layers take their activations in, on the CPU: `f32` (default) or
    /// `q8` (blocks of 32 int8 values with an f32 scale, as llama.cpp's Q8 activations, for
    /// weights in Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K: integer dot products, on VNNI
    /// where the CPU has it, else AVX2). A declared precision: `plumb check` gates the backend at it.
    #[arg(long, value_name = "TYPE", value_parser = parse_act_dtype)]
    pub act_dtype: Option<LinearInputs>,
}

fn parse_kv_dtype(s: &str) -> Result<KvStore, String> {
    KvStore::parse(s).ok_or_else(|| format!("`{s}` is not a KV element type: use f32, f16 or bf16"))
}

fn parse_act_dtype(s: &str) -> Result<LinearInputs, String> {
    match s {
        "f32" => Ok(LinearInputs::F32),
        "q8" => Ok(LinearInputs::Q8),
        _ => Err(format!("`{s}` is not an activation element type: use f32 or q8")),
    }
}

/// How many requests an engine runs at once and the KV room they share.
#[derive(Clone, Debug)]
pub struct Lanes {
    pub max_lanes: usize,
    /// KV-cache positions shared by all lanes (at least one full context is always allocated).
    pub kv_tokens: usize,
    /// Requests that may wait for a lane.
    pub max_waiting: usize,
}

impl Lanes {
    /// One request at a time (`run`, `chat`, `bench`, `check`).
    pub const ONE: Lanes = Lanes { max_lanes: 1, kv_tokens: 0, max_waiting: 16 };
}

/// A device `--device` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda(usize),
}

impl Device {
    /// Rows per engine step when --step-tokens is not given: `cpu` on the CPU, where a step costs
    /// about as much per row at any size, so small steps keep inter-token latency low while
    /// prompts prefill; 2048 on CUDA, whose GEMMs need thousands of rows to fill the GPU (vLLM's
    /// chunked-prefill budget for serving is the same).
    pub fn default_step_tokens(self, cpu: usize) -> usize {
        match self {
            Device::Cpu => cpu,
            Device::Cuda(_) => 2048,
        }
    }
}

impl std::str::FromStr for Device {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| format!("unknown device `{s}` (expected cpu, cuda or cuda:N)")),
        }
    }
}

/// Runs `$body` with `$B` bound to the backend type of `$device`; the body is compiled once per
/// backend, so generic code stays free of dynamic dispatch.
#[macro_export]
macro_rules! on_device {
    ($device:expr, $B:ident => $body:expr) => {
        match $device {
            $crate::session::Device::Cpu => {
                type $B = plumb_backend_cpu::CpuBackend;
                $body
            }
            $crate::session::Device::Cuda(_) => {
                type $B = plumb_backend_cuda::CudaBackend;
                $body
            }
        }
    };
}

/// Reads (bytes of weights and KV read, FLOPs done) by a backend's ops so far.
pub type WorkSource = Box<dyn Fn() -> (u64, u64) + Send + Sync>;

/// A backend the CLI can build from its model arguments.
pub trait OpenBackend: FullBackend + Sized + 'static {
    fn open(args: &ModelArgs) -> Result<Self>;
    /// Kernel threads, for backends that run on CPU threads.
    fn threads(&self) -> Option<usize>;
    /// What a receipt records about the device beyond its name.
    fn device_info(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
    /// What a receipt records about the device, read when it is called (the backend may have
    /// moved into an engine thread by then): counters cover the run.
    fn device_info_later(&self) -> Box<dyn Fn() -> serde_json::Value + Send + Sync> {
        let now = self.device_info();
        Box::new(move || now.clone())
    }
    /// A reader of (bytes of weights and KV read, FLOPs done) by the ops so far, where the backend
    /// counts them; readable after the backend has moved into an engine thread.
    fn work_source(&self) -> Option<WorkSource> {
        None
    }
    /// The measured copy bandwidth in bytes/s (read + written), where the backend measures it.
    fn copy_bandwidth(&self) -> Option<f64> {
        None
    }
    /// The measured dense bf16 matrix-multiply rate in FLOP/s, where the backend measures it; a
    /// failed measurement is reported and leaves the figure out.
    fn bf16_matmul_rate(&self) -> Option<f64> {
        None
    }
}

impl OpenBackend for CpuBackend {
    fn open(args: &ModelArgs) -> Result<Self> {
        if args.device != Device::Cpu {
            anyhow::bail!(
                "this command runs on the CPU only so far (--device cuda works with run, serve, check and bench)"
            );
        }
        warn_threads(args.threads);
        Ok(CpuBackend::new(args.threads)
            .with_kv_store(args.kv_dtype.unwrap_or_default())
            .with_q8_inputs(args.act_dtype == Some(LinearInputs::Q8)))
    }
    fn threads(&self) -> Option<usize> {
        Some(self.num_threads())
    }
}

impl OpenBackend for CudaBackend {
    fn open(args: &ModelArgs) -> Result<Self> {
        let Device::Cuda(ordinal) = args.device else { anyhow::bail!("the CUDA backend needs --device cuda") };
        if args.act_dtype == Some(LinearInputs::Q8) {
            anyhow::bail!(
                "--act-dtype q8 runs on the CPU only (the CUDA backend declares its own: bf16 on tensor cores)"
            );
        }
        let backend = CudaBackend::new(ordinal)?;
        // The flag, else the backend's own setting (`PLUMB_CUDA_KV`, else f32).
        if let Some(store) = args.kv_dtype {
            backend.set_kv_store(store);
        }
        Ok(backend)
    }
    fn threads(&self) -> Option<usize> {
        None
    }
    fn work_source(&self) -> Option<WorkSource> {
        let work = self.work_counters();
        Some(Box::new(move || (work.bytes_read(), work.flops())))
    }
    fn copy_bandwidth(&self) -> Option<f64> {
        CudaBackend::copy_bandwidth(self).ok()
    }
    fn bf16_matmul_rate(&self) -> Option<f64> {
        CudaBackend::bf16_matmul_rate(self).map_err(|e| eprintln!("no bf16 rate for the roofline: {e}")).ok()
    }
    fn device_info_later(&self) -> Box<dyn Fn() -> serde_json::Value + Send + Sync> {
        let fixed = self.device_info();
        let stats = self.graph_stats_source();
        Box::new(move || {
            let mut info = fixed.clone();
            let s = stats();
            info["graph_steps"] = serde_json::json!({
                "captured": s.num_captured,
                "replayed": s.num_replayed,
                "eager": s.num_eager,
            });
            info
        })
    }
    fn device_info(&self) -> serde_json::Value {
        serde_json::json!({
            "device": self.device_name(),
            "ordinal": self.ordinal(),
            "arch": self.arch(),
            "driver_cuda_version": self.driver_version(),
            "nvrtc_version": self.nvrtc_version(),
            "kernels_from_disk_cache": self.kernels_cached,
            "cuda_graphs": self.graphs_enabled(),
            "kv_store": plumb_core::Backend::kv_store(self).name(),
            "linear_long_fold_chunks_from_k": self.fold_long_from(),
            "attention_split_positions": self.attention_split(),
            "graph_segment_launches": self.graph_segment(),
            "graph_segment_ramp": self.graph_ramp(),
            "kernels": self
                .kernel_choices()
                .into_iter()
                .map(|(k, on)| (k.to_string(), serde_json::Value::Bool(on)))
                .collect::<serde_json::Map<_, _>>(),
            "graph_steps": {
                "captured": self.graph_stats().num_captured,
                "replayed": self.graph_stats().num_replayed,
                "eager": self.graph_stats().num_eager,
            },
        })
    }
}

pub struct Session<B: FullBackend = CpuBackend> {
    pub path: PathBuf,
    pub tokenizer: Tokenizer,
    pub template: Option<ChatTemplate>,
    /// The model's own sampling defaults, for options a request leaves unset.
    pub sampling: SamplingDefaults,
    pub engine: Engine<B>,
}

impl<B: OpenBackend> Session<B> {
    pub fn open(args: &ModelArgs, max_batch_tokens: usize) -> Result<Self> {
        // The device first: a missing GPU is reported before any model is looked for or pulled.
        let backend = B::open(args)?;
        let path = crate::resolve_model(args.model.as_deref())?;
        Self::open_path(&path, args, max_batch_tokens, backend, true)
    }

    /// Opens `path` on `backend` for one request at a time; `gated: false` skips the family's
    /// gate check (for `plumb check`, which runs the gate itself).
    pub fn open_path(path: &Path, args: &ModelArgs, max_batch_tokens: usize, backend: B, gated: bool) -> Result<Self> {
        Self::open_lanes(path, args, max_batch_tokens, backend, gated, &Lanes::ONE)
    }

    /// A session whose engine runs up to `lanes.max_lanes` requests at once.
    pub fn open_lanes(
        path: &Path,
        args: &ModelArgs,
        max_batch_tokens: usize,
        backend: B,
        gated: bool,
        lanes: &Lanes,
    ) -> Result<Self> {
        let start = Instant::now();
        let file = Checkpoint::open(path).with_context(|| format!("opening {}", path.display()))?;
        check_architecture(file.as_ref()).with_context(|| format!("loading {}", path.display()))?;
        let tokenizer =
            load::checkpoint_tokenizer(file.as_ref()).with_context(|| format!("loading {}", path.display()))?;
        let template = load::chat_template(&tokenizer)?;
        let sampling = plumb_engine::generation_config::sampling_defaults(file.as_ref())
            .with_context(|| format!("loading {}", path.display()))?;
        let model = if gated {
            plumb_models::load_model(&file, &backend)
        } else {
            plumb_models::registry::load_model_with(&file, &backend, None)
        }
        .with_context(|| format!("loading {}", path.display()))?;
        let model_ctx = model.config().max_position_embeddings;
        let ctx = args.ctx.unwrap_or(model_ctx.min(8192));
        if ctx == 0 || ctx > model_ctx {
            anyhow::bail!("--ctx {ctx} is outside 1..={model_ctx} (the model's context length)");
        }
        let config = SchedulerConfig {
            block_size: BLOCK_SIZE,
            num_blocks: lanes.kv_tokens.max(ctx).div_ceil(BLOCK_SIZE),
            max_lanes: lanes.max_lanes,
            max_batch_tokens,
            max_model_len: ctx,
            max_waiting: lanes.max_waiting,
            // A chat's earlier turns are computed once: each new turn reuses their KV.
            enable_prefix_cache: true,
        };
        let drafter = crate::draft::DraftSpec::from_args(args)?;
        let mut engine = Engine::try_new(backend, model, config)?;
        if let Some(spec) = &drafter {
            let proposer = spec.proposer(&engine, &tokenizer)?;
            engine.set_proposer(Some(proposer));
        }
        eprintln!(
            "loaded {} in {:.2} s ({})",
            path.file_name().map_or(path.display().to_string(), |n| n.to_string_lossy().into_owned()),
            start.elapsed().as_secs_f64(),
            engine.backend().name()
        );
        let spec = *engine.kv_spec();
        if spec.lane_state.num_layers > 0 {
            // Linear-attention layers: a fixed state per lane instead of KV that grows.
            let state = spec.lane_state;
            let cache = match (engine.scheduler_config().enable_prefix_cache, state.num_snapshots) {
                (true, n) => format!(
                    "prefix cache resumes from lane-state snapshots ({n} slots, {:.1} MiB)",
                    (n * state.bytes_per_slot()) as f64 / (1024.0 * 1024.0)
                ),
                (false, _) => "prefix cache off (this model or backend cannot snapshot lane state)".into(),
            };
            eprintln!(
                "lane state: {:.1} KiB per lane in {} linear-attention layers, constant in the context length; \
                 KV only for the other {} layers ({} bytes per token); {cache}",
                state.bytes_per_slot() as f64 / 1024.0,
                state.num_layers,
                spec.num_layers,
                spec.bytes_per_position(),
            );
        }
        Ok(Session { path: path.to_path_buf(), tokenizer, template, sampling, engine })
    }
}

/// Refuses an architecture no family runs, naming it, before the tokenizer or hyper-parameters
/// are read (an unsupported model's metadata keys are not expected to make sense to plumb).
pub fn check_architecture(checkpoint: CheckpointRef<'_>) -> Result<()> {
    let file = match checkpoint {
        CheckpointRef::Gguf(file) => file,
        CheckpointRef::Hf(h) => {
            let arch = &h.config.architecture;
            if plumb_models::registry::family_of(arch).is_none() {
                anyhow::bail!(
                    "architecture `{arch}` is not supported (plumb runs: {})",
                    plumb_models::registry::SUPPORTED
                );
            }
            return Ok(());
        }
    };
    let arch = file.get_str("general.architecture")?;
    let hf = plumb_checkpoint::hparams::hf_architecture(arch).unwrap_or(arch);
    if plumb_models::registry::family_of(hf).is_none() {
        let hf = if hf == arch { String::new() } else { format!(" (`{hf}`)") };
        anyhow::bail!("architecture `{arch}`{hf} is not supported (plumb runs: {})", plumb_models::registry::SUPPORTED);
    }
    Ok(())
}

/// More kernel threads than cores only slows the kernels down; say so.
fn warn_threads(threads: usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads > cores {
        eprintln!(
            "warning: --threads {threads} is more than the {} of this machine; kernels run slower when \
             threads share a core (0 uses all cores)",
            counts::plural(cores, "core", "cores")
        );
    }
}

//! The `Backend` op groups every model graph is written against. A backend (float64 reference,
//! CPU, CUDA) implements them; a family never knows which one runs it.
//! Invariant (DESIGN.md principle 2): every op computes each output row with a reduction order
//! fixed by shapes alone — never by the number of rows, a row's place in the batch, or chunking.
//! Tensors are 2-D, row-major, f32: [rows, cols]. Ops panic on shape mismatch: shapes come from
//! validated configs, so a mismatch is a bug in a graph, never bad user input.

use crate::batch::{ForwardBatch, KvSpec};
use crate::bytes::HostBytes;
use crate::dtype::GgmlType;
use crate::logprobs::{LogprobRow, TokenLogprobs};
use crate::pick::{PickRow, Picked};

mod apart;
mod deepseek_v4;
mod precision;
pub use apart::{linear_add_apart, linear_add_norm_apart, norm_apart, norm_linear_apart, swiglu_apart};
pub use deepseek_v4::{
    COMPRESSED_ATTENTION_OPS, CompressedAttentionOps, Compression, HYPER_CONNECTION_OPS, HcSpec, HyperConnectionOps,
    PagedSegment, SCORED_MOE_OPS, ScoredMoeOps, paged_segments,
};
pub use precision::{KvStore, LinearInputs};

/// A weight as stored in a checkpoint: `rows` outputs of `cols` inputs, in type `ty`.
#[derive(Clone, Debug)]
pub struct WeightSource {
    pub name: String,
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub bytes: HostBytes,
}

/// Why a backend refused a weight.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("backend `{backend}` has no kernels for {ty} (tensor `{name}`)")]
    UnsupportedType { backend: String, ty: GgmlType, name: String },
    #[error("tensor `{name}`: {why}")]
    BadWeight { name: String, why: String },
    #[error("backend `{backend}` cannot run attention heads of {head_dim} dimensions ({why})")]
    UnsupportedHeadDim { backend: String, head_dim: usize, why: String },
    #[error("backend `{backend}` has no {group} kernels yet, which {needed_by} needs")]
    MissingOpGroup { backend: String, group: &'static str, needed_by: String },
    #[error("{what} ({mib:.1} MiB) does not fit on {backend}: {why}")]
    OutOfMemory { backend: String, what: String, mib: f64, why: String },
}

/// Shape of a backend tensor.
pub trait Shape {
    fn rows(&self) -> usize;
    fn cols(&self) -> usize;
}

/// Memory: tensors, weights and the KV cache. Every other group builds on it.
pub trait Backend: Send + Sync {
    /// Activations: [rows, cols] f32.
    type Tensor: Shape + Send;
    /// A prepared weight matrix or vector.
    type Weight: Shape + Send + Sync;
    /// Paged K/V storage for all layers.
    type KvCache: Send;

    fn name(&self) -> String;
    /// The backend's kind as `--device` and the gate table name it: `cpu`, `ref`, `cuda`.
    fn kind(&self) -> &'static str;
    /// Whether `linear`/`embed` accept weights of type `ty`.
    fn supports(&self, ty: GgmlType) -> bool;
    /// The declared precision of `linear`'s activation input for a weight of type `ty` with `k`
    /// columns: f32 (the default), rounded to bf16 as it enters the products (tensor-core
    /// GEMMs) or quantized to Q8 blocks (integer dot products). Conformance and the whole-model gate measure the backend against the reference
    /// run at this precision, so a declaration is checked, never a silent loss.
    fn linear_inputs(&self, ty: GgmlType, k: usize) -> LinearInputs {
        let _ = (ty, k);
        LinearInputs::F32
    }
    /// The declared element type of the KV cache (f32 by default): `write_kv` stores each value
    /// rounded to it and attention reads the stored form. Conformance and the gate's floor run
    /// the reference with the same store, as for [`Backend::linear_inputs`].
    fn kv_store(&self) -> KvStore {
        KvStore::F32
    }
    fn load_weight(&self, src: WeightSource) -> Result<Self::Weight, BackendError>;
    /// A [rows, cols] tensor for an op to write. Its contents are unspecified until then (a
    /// device backend hands out recycled memory; the CPU backends zero it).
    fn tensor(&self, rows: usize, cols: usize) -> Self::Tensor;
    /// Copies host data in (`data.len() == rows * cols`).
    fn upload(&self, data: &[f32], rows: usize, cols: usize) -> Self::Tensor;
    /// Copies a tensor out, row-major.
    fn download(&self, t: &Self::Tensor) -> Vec<f32>;
    /// Copies a tensor out in float64 (a float64 backend overrides this to lose nothing).
    fn download_f64(&self, t: &Self::Tensor) -> Vec<f64> {
        self.download(t).into_iter().map(f64::from).collect()
    }
    fn new_kv_cache(&self, spec: &KvSpec) -> Self::KvCache;
    /// `new_kv_cache`, with running out of memory as an error (a device backend's cache is sized
    /// by the user; the default is for backends whose allocation cannot fail short of the host).
    fn try_new_kv_cache(&self, spec: &KvSpec) -> Result<Self::KvCache, BackendError> {
        Ok(self.new_kv_cache(spec))
    }
    /// Whether activation memory is scarce beside the KV cache (a device's memory, not the
    /// host's): the engine then runs its largest possible step once at start-up, so a
    /// configuration whose steps cannot fit is refused before it serves, not mid-step. The
    /// backend's allocator is expected to keep what that step used.
    fn profiles_memory(&self) -> bool {
        false
    }
    /// Called by the model once at the start of every forward pass, before any op of the step,
    /// with the step's batch and KV cache. A device backend uploads the batch's metadata here once
    /// instead of per op, and may run the step as one recorded unit (CUDA graphs) that it submits
    /// at the first host read. The CPU and reference backends need nothing.
    fn begin_step(&self, batch: &ForwardBatch, kv: &Self::KvCache) {
        let _ = (batch, kv);
    }
    /// Whether [`Backend::pick`] reduces rows where the logits live (so a sampled token, not its
    /// row, crosses to the host). The engine then reads whole rows only for requests whose
    /// sampler needs them (logprobs, returned logits, no top-k cut).
    fn picks_on_device(&self) -> bool {
        false
    }
    /// Each of `rows`: its row of `logits` edited by its penalties, then reduced by its pick,
    /// exactly as [`crate::pick::pick_host`] defines (the edits may be left in the rows named).
    /// The default reads the logits back and runs that definition.
    fn pick(&self, logits: &mut Self::Tensor, rows: &[PickRow]) -> Vec<Picked> {
        let host = self.download(logits);
        let cols = logits.cols();
        rows.iter().map(|r| crate::pick::pick_host(&host[r.row * cols..(r.row + 1) * cols], r)).collect()
    }
    /// The log-probability of each entry's token in its row of `logits`, with its alternatives,
    /// as [`crate::logprobs::logprobs_host`] defines (a device may sum in its own order: within
    /// [`crate::logprobs::LOGPROB_TOLERANCE`], same alternatives). The default reads the named
    /// rows back and runs the definition.
    fn logprobs(&self, logits: &Self::Tensor, rows: &[LogprobRow]) -> Vec<TokenLogprobs> {
        let host = self.download(logits);
        let cols = logits.cols();
        rows.iter()
            .map(|r| crate::logprobs::logprobs_host(&host[r.row * cols..(r.row + 1) * cols], r.token, r.top))
            .collect()
    }
    /// The mixture-of-experts op group, where this backend has kernels for it. A family that
    /// needs it asks here when it loads, so a backend without it is refused before any weight
    /// is read rather than failing mid-step.
    fn moe_ops(&self) -> Option<&dyn MoeOps<Tensor = Self::Tensor, Weight = Self::Weight, KvCache = Self::KvCache>> {
        None
    }
    /// The Gated DeltaNet op group of the hybrid linear-attention families, where this backend
    /// has kernels for it (asked at load, as `moe_ops`).
    fn gated_delta_ops(
        &self,
    ) -> Option<&dyn GatedDeltaOps<Tensor = Self::Tensor, Weight = Self::Weight, KvCache = Self::KvCache>> {
        None
    }
    /// Snapshots of per-lane state for the prefix cache, where this backend keeps them. A
    /// backend that returns `Some` also honours `ForwardBatch::state_snapshots` in every
    /// stateful op; without it, the engine runs state models with the prefix cache off.
    fn lane_state_ops(
        &self,
    ) -> Option<&dyn LaneStateOps<Tensor = Self::Tensor, Weight = Self::Weight, KvCache = Self::KvCache>> {
        None
    }
    /// The compressed sparse attention op group (DeepSeek V4), where this backend has kernels
    /// for it (asked at load, as `moe_ops`).
    fn compressed_attention_ops(
        &self,
    ) -> Option<&dyn CompressedAttentionOps<Tensor = Self::Tensor, Weight = Self::Weight, KvCache = Self::KvCache>>
    {
        None
    }
    /// The hyper-connection op group (several residual streams mixed per sublayer), where this
    /// backend has kernels for it (asked at load, as `moe_ops`).
    fn hyper_connection_ops(
        &self,
    ) -> Option<&dyn HyperConnectionOps<Tensor = Self::Tensor, Weight = Self::Weight, KvCache = Self::KvCache>> {
        None
    }
    /// The scored-router and clamped-expert op group, where this backend has kernels for it
    /// (asked at load, as `moe_ops`).
    fn scored_moe_ops(
        &self,
    ) -> Option<&dyn ScoredMoeOps<Tensor = Self::Tensor, Weight = Self::Weight, KvCache = Self::KvCache>> {
        None
    }
}

/// Copies of a lane's whole state (every state layer and part, with the token count it has
/// absorbed) between its lane slot and a snapshot slot of the same KV cache
/// (`LaneStateSpec::num_snapshots`): device memory stays on the device. Exact copies, so a lane
/// restored from a snapshot continues bit for bit as the lane the snapshot was taken from.
pub trait LaneStateOps: Backend {
    /// Snapshot slot `snapshot` := lane slot `slot`.
    fn save_lane_state(&self, kv: &mut Self::KvCache, slot: usize, snapshot: usize);
    /// Lane slot `slot` := snapshot slot `snapshot`; the lane continues at its token count.
    fn restore_lane_state(&self, kv: &mut Self::KvCache, snapshot: usize, slot: usize);
}

/// Matrix products and lookups over any weight format.
pub trait LinearOps: Backend {
    /// out[n, m] = Σ_k x[n, k] · w[m, k]. x: [num_rows, cols(w)], out: [num_rows, rows(w)].
    fn linear(&self, x: &Self::Tensor, w: &Self::Weight, out: &mut Self::Tensor);
    /// Several products of one input (q/k/v, gate/up): outs[i] = x · ws[i]ᵀ. A fast backend runs
    /// them as one launch; each output is computed exactly as `linear` computes it.
    fn linear_multi(&self, x: &Self::Tensor, ws: &[&Self::Weight], outs: &mut [&mut Self::Tensor]) {
        for (w, out) in ws.iter().zip(outs.iter_mut()) {
            self.linear(x, w, out);
        }
    }
    /// A SwiGLU's first half: out = silu(x · gateᵀ) · (x · upᵀ), the gate and up products and the
    /// `silu_mul` that reads them, which a backend may run as one launch. The bits must be those
    /// of `linear_multi` then `silu_mul` ([`swiglu_apart`]). out: [num_rows, rows(gate)].
    fn linear_swiglu(&self, x: &Self::Tensor, gate: &Self::Weight, up: &Self::Weight, out: &mut Self::Tensor)
    where
        Self: ElementwiseOps,
    {
        swiglu_apart(self, x, gate, up, out);
    }
    /// A residual add of a product: acc += x · wᵀ, which a backend may fold into the product's
    /// store. The bits must be those of `linear` then `add` ([`linear_add_apart`]).
    fn linear_add(&self, x: &Self::Tensor, w: &Self::Weight, acc: &mut Self::Tensor)
    where
        Self: ElementwiseOps,
    {
        linear_add_apart(self, x, w, acc);
    }
    /// A residual add of a product and the input of the sublayer that reads the sum: acc += x · wᵀ,
    /// then rms_norm(acc) with `norm` (its weight and epsilon). Returns the normed rows, or None
    /// where the backend leaves the norm to the next products' launch (`norm_linear_multi`,
    /// `norm_linear_swiglu`, `norm_qkv_rope_write_kv` then take acc and `norm`). The bits must be
    /// those of `linear`, then `add`, then `rms_norm` ([`linear_add_norm_apart`]).
    fn linear_add_norm(
        &self,
        x: &Self::Tensor,
        w: &Self::Weight,
        acc: &mut Self::Tensor,
        norm: (&Self::Weight, f32),
    ) -> Option<Self::Tensor>
    where
        Self: ElementwiseOps,
    {
        Some(linear_add_norm_apart(self, x, w, acc, norm))
    }
    /// Products of a normalized input: outs[i] = rms_norm(x) · ws[i]ᵀ (`norm`: the norm's weight
    /// and epsilon), which a backend may run with the norm computed inside the products' launch.
    /// The bits must be those of `rms_norm` then `linear_multi` ([`norm_linear_apart`]).
    fn norm_linear_multi(
        &self,
        x: &Self::Tensor,
        norm: (&Self::Weight, f32),
        ws: &[&Self::Weight],
        outs: &mut [&mut Self::Tensor],
    ) where
        Self: ElementwiseOps,
    {
        let normed = norm_apart(self, x, norm);
        self.linear_multi(&normed, ws, outs);
    }
    /// `linear_swiglu` of rms_norm(x), which a backend may run as one launch. The bits must be
    /// those of `rms_norm` then `linear_swiglu`.
    fn norm_linear_swiglu(
        &self,
        x: &Self::Tensor,
        norm: (&Self::Weight, f32),
        gate: &Self::Weight,
        up: &Self::Weight,
        out: &mut Self::Tensor,
    ) where
        Self: ElementwiseOps,
    {
        let normed = norm_apart(self, x, norm);
        self.linear_swiglu(&normed, gate, up, out);
    }
    /// Independent products (the experts of a MoE layer): outs[i] = xs[i] · ws[i]ᵀ. A fast
    /// backend runs them as one launch; each output is computed exactly as `linear` computes it.
    fn linear_batched(&self, xs: &[&Self::Tensor], ws: &[&Self::Weight], outs: &mut [&mut Self::Tensor]) {
        assert!(
            xs.len() == ws.len() && ws.len() == outs.len(),
            "linear_batched: inputs, weights and outputs differ in number"
        );
        for ((x, w), out) in xs.iter().zip(ws).zip(outs.iter_mut()) {
            self.linear(x, w, out);
        }
    }
    /// out[n, :] = table[ids[n], :] dequantized. out: [ids.len(), cols(table)].
    fn embed(&self, ids: &[u32], table: &Self::Weight, out: &mut Self::Tensor);
    /// out[i, :] = x[rows[i], :].
    fn gather_rows(&self, x: &Self::Tensor, rows: &[u32], out: &mut Self::Tensor);
}

/// Normalization and element-wise ops.
pub trait ElementwiseOps: Backend {
    /// out[n, :] = x[n, :] / sqrt(mean(x[n, :]²) + eps) · weight. weight: [1, cols].
    fn rms_norm(&self, x: &Self::Tensor, weight: &Self::Weight, eps: f32, out: &mut Self::Tensor);
    /// RMSNorm of every `head_dim`-long slice of each row (Qwen3's per-head QK norm), where
    /// `head_dim = weight.cols()`. x, out: [num_rows, num_heads · head_dim]; weight: [1, head_dim].
    fn rms_norm_heads(&self, x: &Self::Tensor, weight: &Self::Weight, eps: f32, out: &mut Self::Tensor);
    /// acc += x.
    fn add(&self, acc: &mut Self::Tensor, x: &Self::Tensor);
    /// acc += x, then out = rms_norm(acc): a residual add and the norm that reads its sum, which a
    /// backend may fuse into one pass. The bits must be those of `add` then `rms_norm`.
    fn add_rms_norm(
        &self,
        acc: &mut Self::Tensor,
        x: &Self::Tensor,
        weight: &Self::Weight,
        eps: f32,
        out: &mut Self::Tensor,
    ) {
        self.add(acc, x);
        self.rms_norm(acc, weight, eps, out);
    }
    /// x[n, :] += bias for every row n. bias: [1, cols].
    fn add_bias(&self, x: &mut Self::Tensor, bias: &Self::Weight);
    /// out = silu(gate) · up.
    fn silu_mul(&self, gate: &Self::Tensor, up: &Self::Tensor, out: &mut Self::Tensor);
}

/// Rotary position embeddings.
pub trait RopeOps: Backend {
    /// [num_rows, 2 · inv_freq.len()]: cos then sin of `positions[n] · inv_freq[i]`, computed in f64.
    fn rope_table(&self, positions: &[u32], inv_freq: &[f64]) -> Self::Tensor;
    /// Rotates adjacent pairs (x[2i], x[2i+1]) of each head's first `2 · inv_freq.len()` dims
    /// (the layout of GGUF Llama-family checkpoints). x: [num_rows, num_heads · head_dim].
    fn rope(&self, x: &mut Self::Tensor, table: &Self::Tensor, num_heads: usize, head_dim: usize);
    /// Rotates pairs (x[i], x[i + r/2]) of each head's first r = `2 · inv_freq.len()` dims: the
    /// "rotate-half" layout Hugging Face checkpoints store. x: [num_rows, num_heads · head_dim].
    fn rope_rotate_half(&self, x: &mut Self::Tensor, table: &Self::Tensor, num_heads: usize, head_dim: usize);
    /// `rope` (or, with `rotate_half`, `rope_rotate_half`) of q's `num_heads` heads and of k's
    /// `num_kv_heads`: one launch on a backend that fuses them, with the bits of the two apart.
    #[allow(clippy::too_many_arguments)]
    fn rope_qk(
        &self,
        q: &mut Self::Tensor,
        k: &mut Self::Tensor,
        table: &Self::Tensor,
        num_heads: usize,
        num_kv_heads: usize,
        head_dim: usize,
        rotate_half: bool,
    ) {
        if rotate_half {
            self.rope_rotate_half(q, table, num_heads, head_dim);
            self.rope_rotate_half(k, table, num_kv_heads, head_dim);
        } else {
            self.rope(q, table, num_heads, head_dim);
            self.rope(k, table, num_kv_heads, head_dim);
        }
    }
}

/// Paged attention.
pub trait AttentionOps: Backend {
    /// Whether `attention` takes heads of `head_dim`; a model the backend cannot run is refused at
    /// load with this error rather than failing mid-step.
    fn check_head_dim(&self, head_dim: usize) -> Result<(), BackendError> {
        let _ = head_dim;
        Ok(())
    }
    /// Stores each row's K and V ([num_rows, num_kv_heads · head_dim]) at its slot of `layer`.
    fn write_kv(&self, kv: &mut Self::KvCache, layer: usize, k: &Self::Tensor, v: &Self::Tensor, batch: &ForwardBatch);
    /// `rope_qk` of q and k (rotated in place), then `write_kv` of the rotated k and v: one launch
    /// on a backend that fuses them, with the bits of the two apart.
    #[allow(clippy::too_many_arguments)]
    fn rope_write_kv(
        &self,
        q: &mut Self::Tensor,
        k: &mut Self::Tensor,
        v: &Self::Tensor,
        table: &Self::Tensor,
        kv: &mut Self::KvCache,
        layer: usize,
        batch: &ForwardBatch,
        heads: (usize, usize, usize),
        rotate_half: bool,
    ) where
        Self: RopeOps,
    {
        let (num_heads, num_kv_heads, head_dim) = heads;
        self.rope_qk(q, k, table, num_heads, num_kv_heads, head_dim, rotate_half);
        self.write_kv(kv, layer, k, v, batch);
    }
    /// The q, k and v products of rms_norm(x) (`norm`: its weight and epsilon; None: x is normed
    /// already; `ws`: q's, k's and v's weights), then `rope_write_kv` of them: one launch on a
    /// backend that fuses them, with the bits of `norm_linear_multi` (or `linear_multi`) then
    /// `rope_write_kv`.
    #[allow(clippy::too_many_arguments)]
    fn norm_qkv_rope_write_kv(
        &self,
        x: &Self::Tensor,
        norm: Option<(&Self::Weight, f32)>,
        ws: [&Self::Weight; 3],
        [q, k, v]: [&mut Self::Tensor; 3],
        table: &Self::Tensor,
        kv: &mut Self::KvCache,
        layer: usize,
        batch: &ForwardBatch,
        heads: (usize, usize, usize),
        rotate_half: bool,
    ) where
        Self: LinearOps + ElementwiseOps + RopeOps,
    {
        match norm {
            Some(norm) => self.norm_linear_multi(x, norm, &ws, &mut [&mut *q, &mut *k, &mut *v]),
            None => self.linear_multi(x, &ws, &mut [&mut *q, &mut *k, &mut *v]),
        }
        self.rope_write_kv(q, k, v, table, kv, layer, batch, heads, rotate_half);
    }
    /// Causal grouped-query attention of each row over positions 0..=position of its lane.
    /// q: [num_rows, num_heads · head_dim] → out: same shape. `scale` multiplies the scores; it is
    /// float64 so the reference uses the exact value (a float32 backend rounds it once).
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        q: &Self::Tensor,
        kv: &Self::KvCache,
        layer: usize,
        batch: &ForwardBatch,
        num_heads: usize,
        scale: f64,
        out: &mut Self::Tensor,
    );
}

/// Mixture-of-experts routing and combining. Experts themselves are `linear`s over the rows routed
/// to them, so this group holds only what is new: choosing each row's experts and summing their
/// outputs. Both work on each row alone, so a row's result never depends on the other rows.
pub trait MoeOps: Backend {
    /// For each row of `logits` ([num_rows, num_experts], the router's scores): the `k` experts of
    /// highest score in descending order, ties broken by the lower expert index, returned as ids
    /// [num_rows · k], row-major. `weights` [num_rows, k] gets their softmax probabilities over all
    /// experts, or, with `renormalize`, over the `k` chosen (so they sum to 1). A NaN score ranks
    /// above every number, so it is chosen and reaches the output instead of being dropped.
    fn router_topk(&self, logits: &Self::Tensor, k: usize, renormalize: bool, weights: &mut Self::Tensor) -> Vec<u32>;
    /// out[n, :] = Σ_{j < k} weights[n, j] · ys[src[n·k + j].group][src[n·k + j].row, :], summed in
    /// slot order j = 0, 1, … from zero, where k = weights.cols(). out: [num_rows, cols of each ys].
    fn moe_combine(&self, ys: &[&Self::Tensor], src: &[ExpertRow], weights: &Self::Tensor, out: &mut Self::Tensor);
}

/// Where one (row, slot) of a routing finds its expert's output: row `row` of expert group `group`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpertRow {
    pub group: u32,
    pub row: u32,
}

/// Gated DeltaNet (Qwen3.5 / 3.6, Qwen3-Next) and the norms and gates of the hybrid families
/// built on it. The two stateful ops read and write the lane state the batch names
/// (`ForwardBatch::state_slots`, geometry in `KvSpec::lane_state`): each lane's rows are taken in
/// position order, one token at a time, so a token's output and the state after it never depend
/// on how its sequence was split into steps or which other lanes share the step.
pub trait GatedDeltaOps: Backend {
    /// Zero-centred RMSNorm of every `weight.cols()`-long slice of each row:
    /// `x / sqrt(mean(x²) + eps) · (1 + w)`. x, out: [num_rows, k · weight.cols()]. `eps` is
    /// float64 so the reference adds the configured value itself (activations this op sees, such
    /// as a delta-rule output, can be small enough that eps's float32 rounding shows).
    fn rms_norm_1p(&self, x: &Self::Tensor, weight: &Self::Weight, eps: f64, out: &mut Self::Tensor);
    /// Norm-then-gate: for every `weight.cols()`-long slice, `x / sqrt(mean(x²) + eps) · w ·
    /// silu(z)`. x, z, out: [num_rows, k · weight.cols()].
    fn rms_norm_gated(
        &self,
        x: &Self::Tensor,
        z: &Self::Tensor,
        weight: &Self::Weight,
        eps: f64,
        out: &mut Self::Tensor,
    );
    /// out = x · σ(gate), where gate has x's shape or one column (a per-row gate).
    fn sigmoid_mul(&self, x: &Self::Tensor, gate: &Self::Tensor, out: &mut Self::Tensor);
    /// Per row and value head h: `g = −exp(a_log[h]) · softplus(a[h] + dt_bias[h])` and
    /// `beta = σ(b[h])`. a, b, g, beta: [num_rows, num_v_heads]; a_log, dt_bias: [1, num_v_heads].
    #[allow(clippy::too_many_arguments)]
    fn gdn_gates(
        &self,
        a: &Self::Tensor,
        b: &Self::Tensor,
        a_log: &Self::Weight,
        dt_bias: &Self::Weight,
        g: &mut Self::Tensor,
        beta: &mut Self::Tensor,
    );
    /// Causal depthwise convolution then SiLU, per lane: `out[t, c] = silu(Σ_j w[c, j] · x[t − K +
    /// 1 + j, c])` over the lane's previous inputs (its conv state, zeros before position 0).
    /// Leaves each lane's last K − 1 inputs in its conv state of lane-state layer `layer`.
    /// x, out: [num_rows, C]; weight: [1, C · K] (row c holds channel c's K taps).
    fn conv1d_silu(
        &self,
        kv: &mut Self::KvCache,
        layer: usize,
        x: &Self::Tensor,
        weight: &Self::Weight,
        batch: &ForwardBatch,
        out: &mut Self::Tensor,
    );
    /// The gated delta rule, per lane and value head h (key head h / (Hv / Hk)), token by token:
    /// q, k L2-normalised (`x / sqrt(Σx² + 1e-6)`), q scaled by 1/√dk, then `S ← e^{g}·S;
    /// u = β·(v − Sᵀk); S ← S + k·uᵀ; o = Sᵀq` with S [dk, dv] the lane's recurrent state of
    /// layer `layer`. qkv: [num_rows, 2·Hk·dk + Hv·dv] as q ‖ k ‖ v; g, beta: [num_rows, Hv];
    /// out: [num_rows, Hv·dv].
    #[allow(clippy::too_many_arguments)]
    fn gated_delta_rule(
        &self,
        kv: &mut Self::KvCache,
        layer: usize,
        qkv: &Self::Tensor,
        g: &Self::Tensor,
        beta: &Self::Tensor,
        heads: GdnHeads,
        batch: &ForwardBatch,
        out: &mut Self::Tensor,
    );
}

/// Head geometry of a Gated DeltaNet layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnHeads {
    pub num_k_heads: usize,
    pub num_v_heads: usize,
    pub k_head_dim: usize,
    pub v_head_dim: usize,
}

impl GdnHeads {
    /// Columns of the q ‖ k ‖ v input.
    pub fn qkv_cols(&self) -> usize {
        2 * self.num_k_heads * self.k_head_dim + self.num_v_heads * self.v_head_dim
    }
    /// Floats of one lane's recurrent state: Hv · dk · dv.
    pub fn state_floats(&self) -> usize {
        self.num_v_heads * self.k_head_dim * self.v_head_dim
    }
}

/// The ops of `GatedDeltaOps`; a backend whose `gated_delta_ops` is `Some` must pass a
/// conformance case for each.
pub const GATED_DELTA_OPS: [&str; 6] =
    ["rms_norm_1p", "rms_norm_gated", "sigmoid_mul", "gdn_gates", "conv1d_silu", "gated_delta_rule"];

/// The ops of `LaneStateOps`.
pub const LANE_STATE_OPS: [&str; 2] = ["save_lane_state", "restore_lane_state"];

/// The ops of `MoeOps`; a backend whose `moe_ops` is `Some` must pass a conformance case for each.
pub const MOE_OPS: [&str; 2] = ["router_topk", "moe_combine"];

/// Every op of the required traits above (not the optional `MoeOps`). The conformance suite must
/// have a case for each (a test checks), so adding an op here without a case fails the tests.
pub const OPS: [&str; 14] = [
    "linear",
    "linear_multi",
    "embed",
    "gather_rows",
    "rms_norm",
    "rms_norm_heads",
    "add",
    "add_bias",
    "silu_mul",
    "rope_table",
    "rope",
    "rope_rotate_half",
    "write_kv",
    "attention",
];

/// Everything a Llama-style graph needs.
pub trait FullBackend: LinearOps + ElementwiseOps + RopeOps + AttentionOps {}
impl<B: LinearOps + ElementwiseOps + RopeOps + AttentionOps> FullBackend for B {}

#[cfg(test)]
mod tests {
    use super::KvStore;

    #[test]
    fn kv_stores_round_to_nearest_even_and_name_themselves() {
        // f16 steps by 2^-10 near 1: 1 + 2^-11 is a tie between 1 and 1 + 2^-10 and goes to the
        // even one (1); 1 + 3·2^-11 is a tie between 1 + 2^-10 and 1 + 2^-9 and goes to 1 + 2^-9.
        assert_eq!(KvStore::F16.round(1.0 + 2f32.powi(-11)), 1.0);
        assert_eq!(KvStore::F16.round(1.0 + 3.0 * 2f32.powi(-11)), 1.0 + 2f32.powi(-9));
        assert_eq!(KvStore::F16.round(70000.0), f32::INFINITY);
        assert_eq!(KvStore::Bf16.round(70000.0), 70144.0);
        assert_eq!(KvStore::Bf16.round(1.0 + 2f32.powi(-8)), 1.0);
        assert!(KvStore::F16.round(f32::NAN).is_nan());
        let x = 0.123_456_79_f32;
        assert_eq!(KvStore::F32.round(x).to_bits(), x.to_bits());
        for s in [KvStore::F32, KvStore::F16, KvStore::Bf16] {
            assert_eq!(KvStore::parse(s.name()), Some(s));
        }
        assert_eq!((KvStore::F32.bytes(), KvStore::F16.bytes(), KvStore::Bf16.bytes()), (4, 2, 2));
        assert_eq!(KvStore::parse("fp8"), None);
    }
}

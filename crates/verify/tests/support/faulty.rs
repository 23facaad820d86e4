//! A backend with one injected fault, wrapping the CPU backend: each fault is a mistake the
//! gates must catch and name.
#![allow(dead_code)]

use plumb_backend_cpu::{CpuBackend, CpuKvCache, CpuTensor, CpuWeight};
use plumb_core::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    /// RoPE rotates every position after the first one step too far. (Shifting every position
    /// alike would be harmless: attention only sees relative positions.)
    RopeOffByOne,
    /// The first block of every Q4_1 / Q8_0 weight loses its scale (reads as zero).
    DroppedBlockScale,
    /// Multi-row `linear` sums each dot product in plain sequential order, unlike one-row steps.
    SummationOrderDependsOnBatch,
    /// Every `linear` reads the model file from disk.
    DiskReadWhileServing(&'static str),
    /// The RoPE table row of this position holds NaN (a kernel that reads past its table).
    NanAtPosition(u32),
    /// The output head lifts each row's runner-up logit above the top one (greedy always differs).
    PromoteRunnerUp,
    /// No fault, but the backend calls itself another kind (to test gate refusal).
    PretendKind(&'static str),
    /// The backend lacks the mixture-of-experts op group (as the CUDA backend does today).
    NoMoeOps,
    /// `moe_combine` rounds each slot's product and sum once (a fused multiply-add) when the step
    /// has more than one row, twice otherwise. (Reversing the slot order would not do: with top-2,
    /// 0 + a + b and 0 + b + a round alike.)
    MoeRoundingDependsOnBatch,
    /// `linear` rounds its activations to bf16 for weights whose K is a multiple of 8 (as a
    /// tensor-core backend does), declaring it through `linear_inputs` when `true`.
    Bf16Inputs(bool),
    /// `write_kv` stores K and V rounded to f16 (as a 16-bit KV cache does), declaring it
    /// through `kv_store` when `true`.
    F16Kv(bool),
    /// `linear` takes Q8 activations (an inner backend built `with_q8_inputs`), declaring them
    /// through `linear_inputs` when `true`.
    Q8Inputs(bool),
}

#[derive(Debug)]
pub struct Faulty {
    pub inner: CpuBackend,
    pub fault: Fault,
}

impl Backend for Faulty {
    type Tensor = CpuTensor;
    type Weight = CpuWeight;
    type KvCache = CpuKvCache;
    fn name(&self) -> String {
        format!("faulty {:?}", self.fault)
    }
    fn kind(&self) -> &'static str {
        match self.fault {
            Fault::PretendKind(kind) => kind,
            _ => "cpu",
        }
    }
    fn supports(&self, ty: GgmlType) -> bool {
        self.inner.supports(ty)
    }
    fn linear_inputs(&self, ty: GgmlType, k: usize) -> LinearInputs {
        match self.fault {
            Fault::Bf16Inputs(true) if k.is_multiple_of(8) => LinearInputs::Bf16,
            Fault::Q8Inputs(false) => LinearInputs::F32,
            _ => self.inner.linear_inputs(ty, k),
        }
    }
    fn kv_store(&self) -> KvStore {
        match self.fault {
            Fault::F16Kv(true) => KvStore::F16,
            _ => self.inner.kv_store(),
        }
    }
    fn load_weight(&self, mut src: WeightSource) -> Result<CpuWeight, BackendError> {
        if self.fault == Fault::DroppedBlockScale && matches!(src.ty, GgmlType::Q4_1 | GgmlType::Q8_0) && src.rows > 1 {
            let mut bytes = src.bytes.to_vec();
            bytes[0] = 0;
            bytes[1] = 0;
            src.bytes = HostBytes::from_vec(bytes);
        }
        self.inner.load_weight(src)
    }
    fn tensor(&self, rows: usize, cols: usize) -> CpuTensor {
        self.inner.tensor(rows, cols)
    }
    fn upload(&self, data: &[f32], rows: usize, cols: usize) -> CpuTensor {
        self.inner.upload(data, rows, cols)
    }
    fn download(&self, t: &CpuTensor) -> Vec<f32> {
        self.inner.download(t)
    }
    fn new_kv_cache(&self, spec: &KvSpec) -> CpuKvCache {
        self.inner.new_kv_cache(spec)
    }
    fn begin_step(&self, batch: &ForwardBatch, kv: &CpuKvCache) {
        self.inner.begin_step(batch, kv)
    }
    fn moe_ops(&self) -> Option<&dyn MoeOps<Tensor = CpuTensor, Weight = CpuWeight, KvCache = CpuKvCache>> {
        match self.fault {
            Fault::NoMoeOps => None,
            _ => Some(self),
        }
    }
}

impl MoeOps for Faulty {
    fn router_topk(&self, logits: &CpuTensor, k: usize, renormalize: bool, weights: &mut CpuTensor) -> Vec<u32> {
        self.inner.router_topk(logits, k, renormalize, weights)
    }
    fn moe_combine(&self, ys: &[&CpuTensor], src: &[ExpertRow], weights: &CpuTensor, out: &mut CpuTensor) {
        if self.fault == Fault::MoeRoundingDependsOnBatch && out.rows > 1 {
            let (k, cols) = (weights.cols, out.cols);
            for n in 0..out.rows {
                let o = &mut out.data[n * cols..(n + 1) * cols];
                o.fill(0.0);
                for j in 0..k {
                    let ExpertRow { group, row } = src[n * k + j];
                    let y = &ys[group as usize].data[row as usize * cols..][..cols];
                    for (o, &v) in o.iter_mut().zip(y) {
                        *o = weights.data[n * k + j].mul_add(v, *o);
                    }
                }
            }
            return;
        }
        self.inner.moe_combine(ys, src, weights, out)
    }
}

impl LinearOps for Faulty {
    fn linear(&self, x: &CpuTensor, w: &CpuWeight, out: &mut CpuTensor) {
        if let Fault::DiskReadWhileServing(path) = self.fault {
            let _ = std::fs::read(path);
        }
        if self.fault == Fault::SummationOrderDependsOnBatch && x.rows > 1 {
            // Recover wᵀ exactly (each output of I·wᵀ has one non-zero term), then sum in plain order.
            let (k, m) = (w.cols, w.rows);
            let mut eye = vec![0f32; k * k];
            for i in 0..k {
                eye[i * k + i] = 1.0;
            }
            let mut wt = self.inner.tensor(k, m);
            self.inner.linear(&self.inner.upload(&eye, k, k), w, &mut wt);
            for n in 0..x.rows {
                for j in 0..m {
                    let mut s = 0f32;
                    for i in 0..k {
                        s += x.data[n * k + i] * wt.data[i * m + j];
                    }
                    out.data[n * m + j] = s;
                }
            }
            return;
        }
        if matches!(self.fault, Fault::Bf16Inputs(_)) && w.cols.is_multiple_of(8) {
            let rounded: Vec<f32> = LinearInputs::Bf16.apply(&x.data);
            self.inner.linear(&self.inner.upload(&rounded, x.rows, x.cols), w, out);
            return;
        }
        self.inner.linear(x, w, out);
        if self.fault == Fault::PromoteRunnerUp && (w.name == "lm_head.weight" || w.name == "model.embed_tokens.weight")
        {
            for row in out.data.chunks_exact_mut(w.rows) {
                let mut idx: Vec<usize> = (0..row.len()).collect();
                idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
                row[idx[1]] = row[idx[0]] + 1.0;
            }
        }
    }
    fn embed(&self, ids: &[u32], table: &CpuWeight, out: &mut CpuTensor) {
        self.inner.embed(ids, table, out)
    }
    fn gather_rows(&self, x: &CpuTensor, rows: &[u32], out: &mut CpuTensor) {
        self.inner.gather_rows(x, rows, out)
    }
}

impl ElementwiseOps for Faulty {
    fn rms_norm(&self, x: &CpuTensor, weight: &CpuWeight, eps: f32, out: &mut CpuTensor) {
        self.inner.rms_norm(x, weight, eps, out)
    }
    fn rms_norm_heads(&self, x: &CpuTensor, weight: &CpuWeight, eps: f32, out: &mut CpuTensor) {
        self.inner.rms_norm_heads(x, weight, eps, out)
    }
    fn add(&self, acc: &mut CpuTensor, x: &CpuTensor) {
        self.inner.add(acc, x)
    }
    fn add_bias(&self, x: &mut CpuTensor, bias: &CpuWeight) {
        self.inner.add_bias(x, bias)
    }
    fn silu_mul(&self, gate: &CpuTensor, up: &CpuTensor, out: &mut CpuTensor) {
        self.inner.silu_mul(gate, up, out)
    }
}

impl RopeOps for Faulty {
    fn rope_table(&self, positions: &[u32], inv_freq: &[f64]) -> CpuTensor {
        if let Fault::NanAtPosition(bad) = self.fault {
            let mut t = self.inner.rope_table(positions, inv_freq);
            let cols = t.cols;
            for (row, _) in positions.iter().enumerate().filter(|&(_, &p)| p == bad) {
                t.data[row * cols] = f32::NAN;
            }
            return t;
        }
        if self.fault == Fault::RopeOffByOne {
            let shifted: Vec<u32> = positions.iter().map(|&p| if p > 0 { p + 1 } else { p }).collect();
            return self.inner.rope_table(&shifted, inv_freq);
        }
        self.inner.rope_table(positions, inv_freq)
    }
    fn rope(&self, x: &mut CpuTensor, table: &CpuTensor, num_heads: usize, head_dim: usize) {
        self.inner.rope(x, table, num_heads, head_dim)
    }
    fn rope_rotate_half(&self, x: &mut CpuTensor, table: &CpuTensor, num_heads: usize, head_dim: usize) {
        self.inner.rope_rotate_half(x, table, num_heads, head_dim)
    }
}

impl AttentionOps for Faulty {
    fn check_head_dim(&self, head_dim: usize) -> Result<(), BackendError> {
        self.inner.check_head_dim(head_dim)
    }
    fn write_kv(&self, kv: &mut CpuKvCache, layer: usize, k: &CpuTensor, v: &CpuTensor, batch: &ForwardBatch) {
        if let Fault::F16Kv(_) = self.fault {
            let round = |t: &CpuTensor| {
                let data: Vec<f32> = self.inner.download(t).into_iter().map(|x| KvStore::F16.round(x)).collect();
                self.inner.upload(&data, t.rows(), t.cols())
            };
            return self.inner.write_kv(kv, layer, &round(k), &round(v), batch);
        }
        self.inner.write_kv(kv, layer, k, v, batch)
    }
    fn attention(
        &self,
        q: &CpuTensor,
        kv: &CpuKvCache,
        layer: usize,
        batch: &ForwardBatch,
        num_heads: usize,
        scale: f64,
        out: &mut CpuTensor,
    ) {
        self.inner.attention(q, kv, layer, batch, num_heads, scale, out)
    }
}

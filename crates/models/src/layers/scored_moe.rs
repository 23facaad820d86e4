//! DeepSeek V4's mixture of experts: a sqrt-softplus router that picks experts by a learned
//! top-k with a correction bias, or (hash-routed layers) by a static token → experts table, each
//! weighing its experts by the plain scores renormalised and scaled; routed experts and one shared
//! expert, all SwiGLU with clamped inputs. Weights by the checkpoint's DeepSeek names
//! (`ffn.gate.weight`, `ffn.gate.bias` or `ffn.gate.tid2eid`, `ffn.experts.{e}.w1/w2/w3`,
//! `ffn.shared_experts.w1/w2/w3`).

use crate::Trace;
use crate::layers::loader::WeightLoader;
use crate::registry::ModelError;
use plumb_core::{Backend, BackendError, ExpertRow, FullBackend, Shape};

/// Geometry and constants of the block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScoredMoeSpec {
    pub hidden: usize,
    pub intermediate: usize,
    pub num_experts: usize,
    pub top_k: usize,
    pub routed_scaling: f64,
    pub swiglu_limit: f64,
}

/// How a layer picks its experts.
#[derive(Debug)]
enum Routing<B: Backend> {
    /// Learned top-k of `s + bias`; bias [1, E].
    Learned(B::Weight),
    /// Static: token id t → experts `table[t·k .. (t + 1)·k]`.
    Hash(Vec<u32>),
}

/// A clamped-SwiGLU expert (w1 = gate, w3 = up, w2 = down).
#[derive(Debug)]
struct Expert<B: Backend> {
    w1: B::Weight,
    w3: B::Weight,
    w2: B::Weight,
}

impl<B: FullBackend> Expert<B> {
    fn load(w: &WeightLoader<'_, B>, p: &str, hidden: usize, inter: usize) -> Result<Self, ModelError> {
        Ok(Expert {
            w1: w.load_shaped(&format!("{p}.w1.weight"), inter, hidden)?,
            w3: w.load_shaped(&format!("{p}.w3.weight"), inter, hidden)?,
            w2: w.load_shaped(&format!("{p}.w2.weight"), hidden, inter)?,
        })
    }

    fn forward(&self, b: &B, x: &B::Tensor, limit: f64) -> B::Tensor {
        let ops = b.scored_moe_ops().expect("checked at load");
        let n = x.rows();
        let (mut gate, mut up) = (b.tensor(n, self.w1.rows()), b.tensor(n, self.w3.rows()));
        b.linear_multi(x, &[&self.w1, &self.w3], &mut [&mut gate, &mut up]);
        let mut act = b.tensor(n, self.w1.rows());
        ops.clamped_swiglu(&gate, &up, limit, &mut act);
        let mut out = b.tensor(n, self.w2.rows());
        b.linear(&act, &self.w2, &mut out);
        out
    }
}

/// A loaded block.
#[derive(Debug)]
pub struct ScoredMoe<B: Backend> {
    spec: ScoredMoeSpec,
    gate: B::Weight,
    routing: Routing<B>,
    experts: Vec<Expert<B>>,
    shared: Expert<B>,
}

impl<B: FullBackend> ScoredMoe<B> {
    /// Loads `{prefix}.gate` … (prefix: `model.layers.{i}.ffn`); `hash` for hash-routed layers.
    pub fn load(
        w: &WeightLoader<'_, B>,
        prefix: &str,
        spec: ScoredMoeSpec,
        hash: bool,
        vocab: usize,
    ) -> Result<Self, ModelError> {
        let b = w.backend;
        for (missing, group) in
            [(b.scored_moe_ops().is_none(), "scored-router"), (b.moe_ops().is_none(), "mixture-of-experts")]
        {
            if missing {
                let needed_by = format!("the MoE block `{prefix}`");
                return Err(BackendError::MissingOpGroup { backend: b.name(), group, needed_by }.into());
            }
        }
        let ScoredMoeSpec { hidden, intermediate, num_experts, top_k, .. } = spec;
        let routing = if hash {
            let name = format!("{prefix}.gate.tid2eid");
            let (table, rows, cols) = w.load_host_i64(&name)?;
            if (rows, cols) != (vocab, top_k) {
                return Err(ModelError::WrongShape { name, expected: (vocab, top_k), actual: (rows, cols) });
            }
            if let Some(bad) = table.iter().find(|&&e| !(0..num_experts as i64).contains(&e)) {
                return Err(ModelError::BadValue { name, why: format!("names expert {bad} of {num_experts}") });
            }
            Routing::Hash(table.into_iter().map(|e| e as u32).collect())
        } else {
            Routing::Learned(w.load_shaped(&format!("{prefix}.gate.bias"), 1, num_experts)?)
        };
        let experts = (0..num_experts)
            .map(|e| Expert::load(w, &format!("{prefix}.experts.{e}"), hidden, intermediate))
            .collect::<Result<_, _>>()?;
        Ok(ScoredMoe {
            gate: w.load_shaped(&format!("{prefix}.gate.weight"), num_experts, hidden)?,
            shared: Expert::load(w, &format!("{prefix}.shared_experts"), hidden, intermediate)?,
            routing,
            experts,
            spec,
        })
    }

    /// routed(x) + shared(x) for x [num_rows, hidden]; `token_ids` pick the hash-routed experts.
    pub fn forward(
        &self,
        b: &B,
        x: &B::Tensor,
        token_ids: &[u32],
        layer: usize,
        trace: &mut Option<Trace<'_, B>>,
    ) -> B::Tensor {
        let ops = b.scored_moe_ops().expect("checked at load");
        let s = self.spec;
        let (n, k) = (x.rows(), s.top_k);
        let mut logits = b.tensor(n, s.num_experts);
        b.linear(x, &self.gate, &mut logits);
        let mut weights = b.tensor(n, k);
        let ids = match &self.routing {
            Routing::Learned(bias) => ops.sqrt_softplus_topk(&logits, bias, k, s.routed_scaling, &mut weights),
            Routing::Hash(table) => {
                let ids: Vec<u32> = token_ids
                    .iter()
                    .flat_map(|&t| table[t as usize * k..(t as usize + 1) * k].iter().copied())
                    .collect();
                ops.hash_route_weights(&logits, &ids, s.routed_scaling, &mut weights);
                ids
            }
        };
        if let Some(t) = trace {
            t("router_weights", Some(layer), &weights);
        }
        // Rows per expert in row order, and where each (row, slot) finds its expert's output.
        let mut rows_of: Vec<Vec<u32>> = vec![Vec::new(); s.num_experts];
        let mut at = Vec::with_capacity(ids.len());
        for (i, &e) in ids.iter().enumerate() {
            at.push((e as usize, rows_of[e as usize].len() as u32));
            rows_of[e as usize].push((i / k) as u32);
        }
        let mut group_of = vec![u32::MAX; s.num_experts];
        let mut ys = Vec::new();
        for (e, rows) in rows_of.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
            group_of[e] = ys.len() as u32;
            let mut routed = b.tensor(rows.len(), s.hidden);
            b.gather_rows(x, rows, &mut routed);
            ys.push(self.experts[e].forward(b, &routed, s.swiglu_limit));
        }
        let src: Vec<ExpertRow> = at.into_iter().map(|(e, row)| ExpertRow { group: group_of[e], row }).collect();
        let mut out = b.tensor(n, s.hidden);
        let moe = b.moe_ops().expect("checked at load");
        moe.moe_combine(&ys.iter().collect::<Vec<_>>(), &src, &weights, &mut out);
        b.add(&mut out, &self.shared.forward(b, x, s.swiglu_limit));
        out
    }
}

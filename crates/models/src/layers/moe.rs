//! The mixture-of-experts feed-forward block (Qwen3-MoE's sparse block; later families reuse it):
//! a router scores every expert for each row, each row goes to its `top_k` experts (ties to the
//! lower expert index), each expert — a SwiGLU MLP — runs once over all the rows routed to it in
//! the step, and a row's output is its experts' outputs weighted and summed in slot order. Some
//! families (Qwen3.5-MoE, Qwen3-Next) add a shared expert every row goes through, scaled by a
//! per-row sigmoid gate: `out = Σ_j w_j·expert_j(x) + σ(x·g)·shared(x)`.
//! Invariant: a row's output depends on that row's input alone. An expert sees a different
//! number of rows from step to step, which changes no row's bits because `linear` computes each
//! row the same at any row count, and the combine reads a row's k outputs in a fixed order.

use crate::Trace;
use crate::layers::gated_delta::ops as gated_ops;
use crate::layers::{loader::WeightLoader, mlp::Mlp};
use crate::registry::ModelError;
use plumb_core::{Backend, BackendError, ExpertRow, FullBackend, Shape};

/// How a checkpoint stores the experts of a block at `prefix`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertLayout {
    /// `{prefix}.experts.{e}.{gate,up,down}_proj.weight`, one SwiGLU per expert (Qwen3-MoE, Qwen3-Next).
    PerExpert,
    /// `{prefix}.experts.gate_up_proj` [E, 2·I, hidden] (each expert's gate rows, then its up rows)
    /// and `{prefix}.experts.down_proj` [E, hidden, I] (Qwen3.5-MoE).
    Fused,
}

/// The sigmoid-gated shared expert: `σ(x·shared_expert_gate)·shared_expert(x)`.
#[derive(Debug)]
struct SharedExpert<B: Backend> {
    mlp: Mlp<B>,
    /// [1, hidden]: one gate logit per row.
    gate: B::Weight,
}

/// The shape of one MoE block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeSpec {
    pub num_experts: usize,
    /// Experts per row (k).
    pub top_k: usize,
    /// Each expert's intermediate size.
    pub intermediate_size: usize,
    /// Whether the k weights are renormalized to sum to 1.
    pub norm_topk_prob: bool,
}

/// A loaded MoE block.
#[derive(Debug)]
pub struct Moe<B: Backend> {
    /// The router: [num_experts, hidden].
    gate: B::Weight,
    experts: Vec<Mlp<B>>,
    spec: MoeSpec,
    shared: Option<SharedExpert<B>>,
}

impl<B: FullBackend> Moe<B> {
    /// Loads `{prefix}.gate.weight` and `{prefix}.experts.{e}.{gate,up,down}_proj.weight`, after
    /// checking that the backend has the MoE op group (so a backend without it reads no weight).
    pub fn load(w: &WeightLoader<'_, B>, prefix: &str, hidden: usize, spec: MoeSpec) -> Result<Self, ModelError> {
        Self::load_with(w, prefix, hidden, spec, ExpertLayout::PerExpert, None)
    }

    /// Loads a block whose experts are stored as `layout` says and, with
    /// `shared_intermediate_size`, its gated shared expert (`{prefix}.shared_expert.*` and
    /// `{prefix}.shared_expert_gate.weight`), whose gate needs the Gated DeltaNet op group's
    /// `sigmoid_mul` (the families with a shared expert are built on it).
    pub fn load_with(
        w: &WeightLoader<'_, B>,
        prefix: &str,
        hidden: usize,
        spec: MoeSpec,
        layout: ExpertLayout,
        shared_intermediate_size: Option<usize>,
    ) -> Result<Self, ModelError> {
        if w.backend.moe_ops().is_none() {
            return Err(BackendError::MissingOpGroup {
                backend: w.backend.name(),
                group: "mixture-of-experts",
                needed_by: format!("the MoE block `{prefix}`"),
            }
            .into());
        }
        if shared_intermediate_size.is_some() && w.backend.gated_delta_ops().is_none() {
            return Err(BackendError::MissingOpGroup {
                backend: w.backend.name(),
                group: "Gated DeltaNet",
                needed_by: format!("the shared expert gate of `{prefix}`"),
            }
            .into());
        }
        let experts = match layout {
            ExpertLayout::PerExpert => (0..spec.num_experts)
                .map(|e| Mlp::load(w, &format!("{prefix}.experts.{e}"), hidden, spec.intermediate_size))
                .collect::<Result<_, _>>()?,
            ExpertLayout::Fused => fused_experts(w, prefix, hidden, spec)?,
        };
        let shared = match shared_intermediate_size {
            None => None,
            Some(size) => Some(SharedExpert {
                mlp: Mlp::load(w, &format!("{prefix}.shared_expert"), hidden, size)?,
                gate: w.load_shaped(&format!("{prefix}.shared_expert_gate.weight"), 1, hidden)?,
            }),
        };
        let gate = w.load_shaped(&format!("{prefix}.gate.weight"), spec.num_experts, hidden)?;
        Ok(Moe { gate, experts, spec, shared })
    }

    /// x: [num_rows, hidden] (normed) → [num_rows, hidden].
    pub fn forward(&self, b: &B, x: &B::Tensor, layer: usize, trace: &mut Option<Trace<'_, B>>) -> B::Tensor {
        let ops = b.moe_ops().expect("`Moe::load` refuses a backend without the MoE op group");
        let (n, hidden, k) = (x.rows(), x.cols(), self.spec.top_k);
        let mut router_logits = b.tensor(n, self.spec.num_experts);
        b.linear(x, &self.gate, &mut router_logits);
        if let Some(t) = trace {
            t("router_logits", Some(layer), &router_logits);
        }
        let mut weights = b.tensor(n, k);
        let ids = ops.router_topk(&router_logits, k, self.spec.norm_topk_prob, &mut weights);
        let plan = Dispatch::new(&ids, k, self.spec.num_experts);
        let routed: Vec<B::Tensor> = plan
            .groups
            .iter()
            .map(|(_, rows)| {
                let mut routed = b.tensor(rows.len(), hidden);
                b.gather_rows(x, rows, &mut routed);
                routed
            })
            .collect();
        // Every chosen expert at once: one batch of gate/up products, one of down products.
        let experts: Vec<&Mlp<B>> = plan.groups.iter().map(|(e, _)| &self.experts[*e]).collect();
        let ys = Mlp::forward_batched(b, &experts, &routed.iter().collect::<Vec<_>>());
        let mut out = b.tensor(n, hidden);
        ops.moe_combine(&ys.iter().collect::<Vec<_>>(), &plan.src, &weights, &mut out);
        if let Some(shared) = &self.shared {
            let y = shared.mlp.forward(b, x, layer, &mut None);
            let mut gate = b.tensor(n, 1);
            b.linear(x, &shared.gate, &mut gate);
            let mut gated = b.tensor(n, hidden);
            gated_ops(b).sigmoid_mul(&y, &gate, &mut gated);
            b.add(&mut out, &gated);
        }
        if let Some(t) = trace {
            t("moe_out", Some(layer), &out);
        }
        out
    }
}

/// One row range as a part of `load_row_parts`.
fn one(rows: std::ops::Range<usize>) -> Vec<std::ops::Range<usize>> {
    std::iter::once(rows).collect()
}

/// Splits the fused expert tensors into one SwiGLU per expert. The split copies rows as stored,
/// so each expert's products are those of the fused tensors.
fn fused_experts<B: FullBackend>(
    w: &WeightLoader<'_, B>,
    prefix: &str,
    hidden: usize,
    spec: MoeSpec,
) -> Result<Vec<Mlp<B>>, ModelError> {
    let (e, inter) = (spec.num_experts, spec.intermediate_size);
    let gate_up: Vec<_> = (0..e)
        .flat_map(|i| [one(2 * i * inter..(2 * i + 1) * inter), one((2 * i + 1) * inter..(2 * i + 2) * inter)])
        .collect();
    let mut gate_up = w.load_row_parts(&format!("{prefix}.experts.gate_up_proj"), e * 2 * inter, hidden, &gate_up)?;
    let down: Vec<_> = (0..e).map(|i| one(i * hidden..(i + 1) * hidden)).collect();
    let down = w.load_row_parts(&format!("{prefix}.experts.down_proj"), e * hidden, inter, &down)?;
    let mut experts = Vec::with_capacity(e);
    for down_proj in down {
        let mut pair = gate_up.drain(..2);
        let (gate_proj, up_proj) = (pair.next().expect("two per expert"), pair.next().expect("two per expert"));
        drop(pair);
        experts.push(Mlp::from_weights(gate_proj, up_proj, down_proj));
    }
    Ok(experts)
}

/// One step's routing turned into work per expert.
#[derive(Debug, PartialEq)]
struct Dispatch {
    /// (expert, the rows routed to it in ascending order), for every expert with rows, by expert.
    groups: Vec<(usize, Vec<u32>)>,
    /// For slot j of row n (at n·k + j): which group's output row holds its expert's output.
    src: Vec<ExpertRow>,
}

impl Dispatch {
    /// `ids`: [num_rows · k] expert ids from `router_topk`.
    fn new(ids: &[u32], k: usize, num_experts: usize) -> Self {
        let mut rows_of: Vec<Vec<u32>> = vec![Vec::new(); num_experts];
        let mut at = Vec::with_capacity(ids.len());
        for (i, &e) in ids.iter().enumerate() {
            let e = e as usize;
            assert!(e < num_experts, "router chose expert {e} of {num_experts}");
            at.push((e, rows_of[e].len() as u32));
            rows_of[e].push((i / k) as u32);
        }
        let mut group_of = vec![u32::MAX; num_experts];
        let mut groups = Vec::new();
        for (e, rows) in rows_of.into_iter().enumerate() {
            if !rows.is_empty() {
                group_of[e] = groups.len() as u32;
                groups.push((e, rows));
            }
        }
        let src = at.into_iter().map(|(e, row)| ExpertRow { group: group_of[e], row }).collect();
        Dispatch { groups, src }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatch_groups_rows_per_expert_and_points_each_slot_at_its_output() {
        // Three rows, top-2 of 5 experts: row 0 → (3, 1), row 1 → (1, 4), row 2 → (3, 4).
        let plan = Dispatch::new(&[3, 1, 1, 4, 3, 4], 2, 5);
        assert_eq!(plan.groups, vec![(1, vec![0, 1]), (3, vec![0, 2]), (4, vec![1, 2])]);
        let at = |group, row| ExpertRow { group, row };
        assert_eq!(plan.src, vec![at(1, 0), at(0, 0), at(0, 1), at(2, 0), at(1, 1), at(2, 1)]);
    }

    #[test]
    fn an_empty_step_dispatches_nothing() {
        let plan = Dispatch::new(&[], 2, 4);
        assert!(plan.groups.is_empty() && plan.src.is_empty());
    }
}

//! The mixture-of-experts feed-forward block (Qwen3-MoE's sparse block; later families reuse it):
//! a router scores every expert for each row, each row goes to its `top_k` experts (ties to the
//! lower expert index), each expert — a SwiGLU MLP — runs once over all the rows routed to it in
//! the step, and a row's output is its experts' outputs weighted and summed in slot order.
//! Invariant: a row's output depends on that row's input alone. An expert sees a different
//! number of rows from step to step, which changes no row's bits because `linear` computes each
//! row the same at any row count, and the combine reads a row's k outputs in a fixed order.

use crate::Trace;
use crate::layers::{loader::WeightLoader, mlp::Mlp};
use crate::registry::ModelError;
use plumb_core::{Backend, BackendError, ExpertRow, FullBackend, Shape};

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
}

impl<B: FullBackend> Moe<B> {
    /// Loads `{prefix}.gate.weight` and `{prefix}.experts.{e}.{gate,up,down}_proj.weight`, after
    /// checking that the backend has the MoE op group (so a backend without it reads no weight).
    pub fn load(w: &WeightLoader<'_, B>, prefix: &str, hidden: usize, spec: MoeSpec) -> Result<Self, ModelError> {
        if w.backend.moe_ops().is_none() {
            return Err(BackendError::MissingOpGroup {
                backend: w.backend.name(),
                group: "mixture-of-experts",
                needed_by: format!("the MoE block `{prefix}`"),
            }
            .into());
        }
        let experts = (0..spec.num_experts)
            .map(|e| Mlp::load(w, &format!("{prefix}.experts.{e}"), hidden, spec.intermediate_size))
            .collect::<Result<_, _>>()?;
        Ok(Moe { gate: w.load_shaped(&format!("{prefix}.gate.weight"), spec.num_experts, hidden)?, experts, spec })
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
        let ys: Vec<B::Tensor> = plan
            .groups
            .iter()
            .map(|(expert, rows)| {
                let mut routed = b.tensor(rows.len(), hidden);
                b.gather_rows(x, rows, &mut routed);
                self.experts[*expert].forward(b, &routed, layer, &mut None)
            })
            .collect();
        let mut out = b.tensor(n, hidden);
        ops.moe_combine(&ys.iter().collect::<Vec<_>>(), &plan.src, &weights, &mut out);
        if let Some(t) = trace {
            t("moe_out", Some(layer), &out);
        }
        out
    }
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

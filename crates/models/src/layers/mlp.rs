//! The SwiGLU feed-forward block: down(silu(gate(x)) · up(x)), with biases where a checkpoint
//! has them (`mlp_bias` Llamas).

use crate::Trace;
use crate::layers::loader::WeightLoader;
use crate::layers::residual::{self, Input};
use crate::registry::ModelError;
use plumb_core::{Backend, ElementwiseOps, LinearOps, Shape};

#[derive(Debug)]
pub struct Mlp<B: Backend> {
    gate_proj: B::Weight,
    up_proj: B::Weight,
    down_proj: B::Weight,
    /// Biases of gate, up and down, each present or not as the checkpoint has it.
    biases: [Option<B::Weight>; 3],
}

impl<B: LinearOps + ElementwiseOps> Mlp<B> {
    pub fn load(w: &WeightLoader<'_, B>, prefix: &str, hidden: usize, intermediate: usize) -> Result<Self, ModelError> {
        let bias = |name: &str, len: usize| w.load_optional_vector(&format!("{prefix}.{name}.bias"), len);
        Ok(Mlp {
            biases: [bias("gate_proj", intermediate)?, bias("up_proj", intermediate)?, bias("down_proj", hidden)?],
            gate_proj: w.load_shaped(&format!("{prefix}.gate_proj.weight"), intermediate, hidden)?,
            up_proj: w.load_shaped(&format!("{prefix}.up_proj.weight"), intermediate, hidden)?,
            down_proj: w.load_shaped(&format!("{prefix}.down_proj.weight"), hidden, intermediate)?,
        })
    }

    /// A bias-free SwiGLU from weights already loaded (experts split out of fused tensors).
    pub fn from_weights(gate_proj: B::Weight, up_proj: B::Weight, down_proj: B::Weight) -> Self {
        Mlp { gate_proj, up_proj, down_proj, biases: [None, None, None] }
    }

    /// Several SwiGLUs each on its own input (the experts of a MoE step): `mlps[i]` on `xs[i]`,
    /// their gate/up products in one `linear_batched` and their down products in another, so a
    /// backend launches two product batches, not three per expert. Each output equals
    /// `mlps[i].forward(xs[i])` bit for bit.
    pub fn forward_batched(b: &B, mlps: &[&Self], xs: &[&B::Tensor]) -> Vec<B::Tensor> {
        let mut gate_up: Vec<B::Tensor> = Vec::with_capacity(2 * mlps.len());
        let (mut inputs, mut weights) = (Vec::with_capacity(2 * mlps.len()), Vec::with_capacity(2 * mlps.len()));
        for (mlp, &x) in mlps.iter().zip(xs) {
            for w in [&mlp.gate_proj, &mlp.up_proj] {
                gate_up.push(b.tensor(x.rows(), w.rows()));
                inputs.push(x);
                weights.push(w);
            }
        }
        b.linear_batched(&inputs, &weights, &mut gate_up.iter_mut().collect::<Vec<_>>());
        let mut acts = Vec::with_capacity(mlps.len());
        for (mlp, pair) in mlps.iter().zip(gate_up.chunks_exact_mut(2)) {
            let [gate, up] = pair else { unreachable!("chunks of two") };
            for (t, bias) in [&mut *gate, &mut *up].into_iter().zip(&mlp.biases) {
                if let Some(bias) = bias {
                    b.add_bias(t, bias);
                }
            }
            let mut act = b.tensor(gate.rows(), mlp.gate_proj.rows());
            b.silu_mul(gate, up, &mut act);
            acts.push(act);
        }
        let mut outs: Vec<B::Tensor> =
            mlps.iter().zip(xs).map(|(mlp, x)| b.tensor(x.rows(), mlp.down_proj.rows())).collect();
        let downs: Vec<&B::Weight> = mlps.iter().map(|mlp| &mlp.down_proj).collect();
        b.linear_batched(&acts.iter().collect::<Vec<_>>(), &downs, &mut outs.iter_mut().collect::<Vec<_>>());
        for (mlp, out) in mlps.iter().zip(outs.iter_mut()) {
            if let Some(bias) = &mlp.biases[2] {
                b.add_bias(out, bias);
            }
        }
        outs
    }

    /// x += `forward`(rms_norm(x)) (`input`: the normed rows, or the norm to apply), with the
    /// norm inside the gate|up products and the SwiGLU (`norm_linear_swiglu`, where gate and up
    /// have no bias) and the add inside down's (`linear_add`, where down has none), for a backend
    /// that fuses them: the bits of `rms_norm`, `forward` and `add` apart. With `next` (the next
    /// sublayer's norm), returns that sublayer's input where the add computed it (`residual`).
    /// Untraced steps only.
    pub fn forward_residual(
        &self,
        b: &B,
        x: &mut B::Tensor,
        input: Input<'_, B>,
        next: Option<(&B::Weight, f32)>,
    ) -> Option<B::Tensor> {
        let n = x.rows();
        let mut act = b.tensor(n, self.gate_proj.rows());
        match input {
            Input::Normed(normed) if self.biases[..2].iter().all(Option::is_none) => {
                b.linear_swiglu(normed, &self.gate_proj, &self.up_proj, &mut act)
            }
            Input::Pending(norm) if self.biases[..2].iter().all(Option::is_none) => {
                b.norm_linear_swiglu(x, norm, &self.gate_proj, &self.up_proj, &mut act)
            }
            input => input.with_normed(b, x, |normed| self.gate_up_biased(b, normed, &mut act)),
        }
        // The bias goes in before the residual add: down's add in the store only without one.
        match &self.biases[2] {
            None => residual::linear_add(b, &act, &self.down_proj, x, next),
            Some(_) => residual::add(b, x, &self.project_down(b, &act), next),
        }
    }

    /// silu(gate(x) + gate bias) · (up(x) + up bias) into act, the biases as the checkpoint has them.
    fn gate_up_biased(&self, b: &B, x: &B::Tensor, act: &mut B::Tensor) {
        let n = x.rows();
        let mut gate = b.tensor(n, self.gate_proj.rows());
        let mut up = b.tensor(n, self.up_proj.rows());
        b.linear_multi(x, &[&self.gate_proj, &self.up_proj], &mut [&mut gate, &mut up]);
        for (t, bias) in [&mut gate, &mut up].into_iter().zip(&self.biases) {
            if let Some(bias) = bias {
                b.add_bias(t, bias);
            }
        }
        b.silu_mul(&gate, &up, act);
    }

    /// x: [num_rows, hidden] → [num_rows, hidden].
    pub fn forward(&self, b: &B, x: &B::Tensor, layer: usize, trace: &mut Option<Trace<'_, B>>) -> B::Tensor {
        let n = x.rows();
        let mut act = b.tensor(n, self.gate_proj.rows());
        if self.biases[0].is_none() && self.biases[1].is_none() {
            // The products and the SwiGLU that reads them: one launch where the backend fuses them.
            b.linear_swiglu(x, &self.gate_proj, &self.up_proj, &mut act);
        } else {
            self.gate_up_biased(b, x, &mut act);
        }
        if let Some(t) = trace {
            t("ffn_act", Some(layer), &act);
        }
        self.project_down(b, &act)
    }

    /// down's product of the activation, with its bias where the checkpoint has one.
    fn project_down(&self, b: &B, act: &B::Tensor) -> B::Tensor {
        let mut out = b.tensor(act.rows(), self.down_proj.rows());
        b.linear(act, &self.down_proj, &mut out);
        if let Some(bias) = &self.biases[2] {
            b.add_bias(&mut out, bias);
        }
        out
    }
}

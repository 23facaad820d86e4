//! The SwiGLU feed-forward block: down(silu(gate(x)) · up(x)), with biases where a checkpoint
//! has them (`mlp_bias` Llamas).

use crate::Trace;
use crate::layers::loader::WeightLoader;
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

    /// x: [num_rows, hidden] → [num_rows, hidden].
    pub fn forward(&self, b: &B, x: &B::Tensor, layer: usize, trace: &mut Option<Trace<'_, B>>) -> B::Tensor {
        let n = x.rows();
        let mut gate = b.tensor(n, self.gate_proj.rows());
        let mut up = b.tensor(n, self.up_proj.rows());
        b.linear_multi(x, &[&self.gate_proj, &self.up_proj], &mut [&mut gate, &mut up]);
        for (t, bias) in [&mut gate, &mut up].into_iter().zip(&self.biases) {
            if let Some(bias) = bias {
                b.add_bias(t, bias);
            }
        }
        let mut act = b.tensor(n, self.gate_proj.rows());
        b.silu_mul(&gate, &up, &mut act);
        if let Some(t) = trace {
            t("ffn_act", Some(layer), &act);
        }
        let mut out = b.tensor(n, self.down_proj.rows());
        b.linear(&act, &self.down_proj, &mut out);
        if let Some(bias) = &self.biases[2] {
            b.add_bias(&mut out, bias);
        }
        out
    }
}

//! The one table between GGUF tensor names and Hugging Face ones (Llama-style families).
//! Model code speaks Hugging Face names; GGUF names are translated here and nowhere else.
//! Note: llama.cpp's converter permutes the rows of `attn_q`/`attn_k` for Llama-family models so
//! that RoPE rotates adjacent pairs; the attention layer, not this table, accounts for that.

/// (GGUF suffix within `blk.N.`, Hugging Face suffix within `model.layers.N.`).
const LAYER_NAMES: [(&str, &str); 20] = [
    ("attn_norm.weight", "input_layernorm.weight"),
    ("attn_q.weight", "self_attn.q_proj.weight"),
    ("attn_k.weight", "self_attn.k_proj.weight"),
    ("attn_v.weight", "self_attn.v_proj.weight"),
    ("attn_output.weight", "self_attn.o_proj.weight"),
    // Qwen3's per-head QK RMSNorm.
    ("attn_q_norm.weight", "self_attn.q_norm.weight"),
    ("attn_k_norm.weight", "self_attn.k_norm.weight"),
    ("attn_q.bias", "self_attn.q_proj.bias"),
    ("attn_k.bias", "self_attn.k_proj.bias"),
    ("attn_v.bias", "self_attn.v_proj.bias"),
    ("attn_output.bias", "self_attn.o_proj.bias"),
    ("ffn_gate.bias", "mlp.gate_proj.bias"),
    ("ffn_up.bias", "mlp.up_proj.bias"),
    ("ffn_down.bias", "mlp.down_proj.bias"),
    ("ffn_norm.weight", "post_attention_layernorm.weight"),
    ("ffn_gate.weight", "mlp.gate_proj.weight"),
    ("ffn_up.weight", "mlp.up_proj.weight"),
    ("ffn_down.weight", "mlp.down_proj.weight"),
    ("attn_rot_embd", "self_attn.rotary_emb.inv_freq"),
    // The MoE router (Qwen3-MoE).
    ("ffn_gate_inp.weight", "mlp.gate.weight"),
];

/// Expert projections: GGUF stacks every expert of a layer in one 3-D tensor
/// `blk.N.ffn_{gate,up,down}_exps.weight` (ggml dims [cols, rows, num_experts]); Hugging Face
/// stores `model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight` one matrix per expert.
const EXPERT_PROJS: [&str; 3] = ["gate", "up", "down"];

/// For a Hugging Face per-expert name: (the GGUF stacked tensor's name, the expert index).
pub fn hf_expert_to_gguf(name: &str) -> Option<(String, usize)> {
    let rest = name.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (expert, proj) = rest.strip_prefix("mlp.experts.")?.split_once('.')?;
    let expert: usize = expert.parse().ok()?;
    let proj = proj.strip_suffix("_proj.weight").filter(|p| EXPERT_PROJS.contains(p))?;
    Some((format!("blk.{layer}.ffn_{proj}_exps.weight"), expert))
}

/// For a GGUF stacked expert tensor of `num_experts`: the Hugging Face name of each expert's matrix.
pub fn gguf_experts_to_hf(name: &str, num_experts: usize) -> Option<Vec<String>> {
    let rest = name.strip_prefix("blk.")?;
    let (layer, suffix) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let proj = suffix.strip_prefix("ffn_")?.strip_suffix("_exps.weight").filter(|p| EXPERT_PROJS.contains(p))?;
    Some((0..num_experts).map(|e| format!("model.layers.{layer}.mlp.experts.{e}.{proj}_proj.weight")).collect())
}

/// Whole-model tensors: (GGUF name, Hugging Face name).
const GLOBAL_NAMES: [(&str, &str); 4] = [
    ("token_embd.weight", "model.embed_tokens.weight"),
    ("output_norm.weight", "model.norm.weight"),
    ("output.weight", "lm_head.weight"),
    // GGUF only: llama.cpp's converter bakes Llama-3 RoPE scaling into per-frequency divisors
    // ([rope_dim / 2]); Hugging Face computes the same from `rope_scaling` in config.json.
    ("rope_freqs.weight", "model.rope_freqs.weight"),
];

/// The Hugging Face name of GGUF tensor `name`, if the table knows it.
pub fn gguf_to_hf(name: &str) -> Option<String> {
    if let Some((_, hf)) = GLOBAL_NAMES.iter().find(|(g, _)| *g == name) {
        return Some(hf.to_string());
    }
    let rest = name.strip_prefix("blk.")?;
    let (layer, suffix) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (_, hf) = LAYER_NAMES.iter().find(|(g, _)| *g == suffix)?;
    Some(format!("model.layers.{layer}.{hf}"))
}

/// The GGUF name of Hugging Face tensor `name`, if the table knows it.
pub fn hf_to_gguf(name: &str) -> Option<String> {
    if let Some((g, _)) = GLOBAL_NAMES.iter().find(|(_, hf)| *hf == name) {
        return Some(g.to_string());
    }
    let rest = name.strip_prefix("model.layers.")?;
    let (layer, suffix) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (g, _) = LAYER_NAMES.iter().find(|(_, hf)| *hf == suffix)?;
    Some(format!("blk.{layer}.{g}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in ["token_embd.weight", "output.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight"] {
            let hf = gguf_to_hf(name).unwrap();
            assert_eq!(hf_to_gguf(&hf).as_deref(), Some(name));
        }
        assert_eq!(gguf_to_hf("blk.3.attn_k.weight").unwrap(), "model.layers.3.self_attn.k_proj.weight");
        assert_eq!(gguf_to_hf("blk.x.attn_k.weight"), None);
        assert_eq!(hf_to_gguf("model.layers.1.unknown.weight"), None);
        assert_eq!(gguf_to_hf("blk.2.ffn_gate_inp.weight").unwrap(), "model.layers.2.mlp.gate.weight");
    }

    #[test]
    fn expert_names_map_to_the_stacked_tensor_and_back() {
        let (g, e) = hf_expert_to_gguf("model.layers.3.mlp.experts.17.down_proj.weight").unwrap();
        assert_eq!((g.as_str(), e), ("blk.3.ffn_down_exps.weight", 17));
        let names = gguf_experts_to_hf(&g, 18).unwrap();
        assert_eq!((names.len(), names[17].as_str()), (18, "model.layers.3.mlp.experts.17.down_proj.weight"));
        assert_eq!(hf_expert_to_gguf("model.layers.3.mlp.experts.x.down_proj.weight"), None);
        assert_eq!(hf_expert_to_gguf("model.layers.3.mlp.experts.1.o_proj.weight"), None);
        assert_eq!(gguf_experts_to_hf("blk.3.ffn_gate.weight", 4), None);
    }
}

//! Named shapes for `plumb synth --arch`: the `config.json` of real checkpoints (hyper-parameters
//! copied from their Hugging Face model cards' config files), a shape between those and the test
//! sizes for benchmarks, and tiny shapes for tests.
//! Invariant: every preset parses with `Shape::parse` (a test walks them all).

use serde_json::{Value, json};

/// (name, what it is, config.json).
pub struct Preset {
    pub name: &'static str,
    pub about: &'static str,
    pub config: fn() -> Value,
}

impl std::fmt::Debug for Preset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Preset({})", self.name)
    }
}

/// Every preset, real shapes first.
pub const PRESETS: &[Preset] = &[
    Preset { name: "llama-3.1-8b", about: "Llama-3.1-8B (8.0 B parameters)", config: llama_3_1_8b },
    Preset { name: "llama-3.2-1b", about: "Llama-3.2-1B (1.2 B, tied head)", config: llama_3_2_1b },
    Preset { name: "qwen3-8b", about: "Qwen3-8B (8.2 B)", config: qwen3_8b },
    Preset { name: "qwen3-0.6b", about: "Qwen3-0.6B (0.6 B, tied head)", config: qwen3_0_6b },
    Preset {
        name: "qwen3-30b-a3b",
        about: "Qwen3-30B-A3B (30.5 B, 3.3 B active; 128 experts, 8 active)",
        config: qwen3_30b_a3b,
    },
    Preset {
        name: "qwen3-moe-1.6b",
        about: "Qwen3-MoE shape of 1.6 B (0.59 B active; 64 experts, 8 active) for benchmarks",
        config: qwen3_moe_1_6b,
    },
    Preset {
        name: "qwen3.5-0.8b",
        about: "Qwen3.5-0.8B's text model (0.75 B, tied head; 24 layers, 18 Gated DeltaNet of 16/16 heads of 128 and 6 \
                gated attention of 8/2 heads of 256, hidden 1024, FFN 3584, vocab 248 320)",
        config: qwen3_5_0_8b,
    },
    Preset {
        name: "qwen3.5-moe-1.7b",
        about: "Qwen3.5-MoE shape of 1.7 B for benchmarks and gates: Qwen3.5-35B-A3B's per-layer widths (hidden \
                2048, Gated DeltaNet 16/32 heads of 128, gated attention 16/2 heads of 256, experts of 512 plus a \
                shared expert of 512, vocab 248 320) with 8 of its 40 layers (6 linear, 2 full) and 16 of its 256 \
                experts, 8 active (1.0 B computed per token, half of it the head)",
        config: qwen3_5_moe_1_7b,
    },
    Preset {
        name: "qwen3-next-1.3b",
        about: "Qwen3-Next shape of 1.3 B for gates: Qwen3-Next-80B-A3B's per-layer widths (hidden 2048, fused \
                Gated DeltaNet projections 16/32 heads of 128, gated attention 16/2 heads of 256, experts of 512 \
                plus a shared expert of 512, vocab 151 936) with 8 of its 48 layers and 16 of its 512 experts, \
                10 active",
        config: qwen3_next_1_3b,
    },
    Preset {
        name: "deepseek-v4-flash",
        about: "DeepSeek-V4-Flash's backbone (transformers' DeepseekV4Config defaults: hidden 4096, 43 layers of \
                sliding + 23 HCA / 20 CSA attention, 64 heads of 512, 256 experts of 2048, 6 active, 3 hash-routed \
                layers, hc_mult 4, vocab 129 280; the YaRN original length 65 536 is assumed)",
        config: deepseek_v4_flash,
    },
    Preset {
        name: "deepseek-v4-1.6b",
        about: "DeepSeek V4 shape of 1.6 B for CPU benchmarks: V4-Flash's head geometry (heads of 512 with RoPE on \
                64, one K = V head, sliding window 128, CSA ratio 4 with a 64 × 128 indexer, HCA ratio 128, hc_mult \
                4, vocab 129 280) at hidden 1024 with 12 layers, 16 heads, and 128 experts of 256, 6 active",
        config: deepseek_v4_1_6b,
    },
    Preset { name: "tiny-llama", about: "2-layer Llama for tests (hidden 64, vocab 512)", config: tiny_llama },
    Preset {
        name: "tiny-qwen3",
        about: "2-layer Qwen3 for tests (hidden 64, head_dim 32, vocab 512)",
        config: tiny_qwen3,
    },
    Preset {
        name: "tiny-qwen3-moe",
        about: "3-layer Qwen3-MoE for tests (8 experts, 2 active; layer 1 dense)",
        config: tiny_qwen3_moe,
    },
    Preset {
        name: "tiny-deepseek-v4",
        about: "4-layer DeepSeek V4 for tests (sliding, CSA, HCA, CSA; hash then learned MoE; hidden 64, vocab 384): \
                the shape of fixtures/deepseek_v4",
        config: tiny_deepseek_v4,
    },
];

/// The preset called `name`.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// Every preset name, comma-separated.
pub fn names() -> String {
    PRESETS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}

fn llama(hidden: usize, inter: usize, layers: usize, heads: usize, kv_heads: usize, vocab: usize) -> Value {
    json!({
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": false,
        "attention_dropout": 0.0,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": 131072,
        "mlp_bias": false,
        "model_type": "llama",
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-5,
        "rope_scaling": {
            "factor": 8.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3"
        },
        "rope_theta": 500000.0,
        "tie_word_embeddings": false,
        "use_cache": true,
        "vocab_size": vocab
    })
}

fn llama_3_1_8b() -> Value {
    llama(4096, 14336, 32, 32, 8, 128256)
}

fn llama_3_2_1b() -> Value {
    let mut c = llama(2048, 8192, 16, 32, 8, 128256);
    c["head_dim"] = json!(64);
    c["rope_scaling"]["factor"] = json!(32.0);
    c["tie_word_embeddings"] = json!(true);
    c
}

fn tiny_llama() -> Value {
    let mut c = llama(64, 128, 2, 4, 2, 512);
    c["max_position_embeddings"] = json!(2048);
    c["rope_scaling"] = Value::Null;
    c
}

#[allow(clippy::too_many_arguments)]
fn qwen3(
    hidden: usize,
    inter: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    tied: bool,
) -> Value {
    json!({
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": false,
        "attention_dropout": 0.0,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": 40960,
        "max_window_layers": layers,
        "model_type": "qwen3",
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads,
        "rms_norm_eps": 1e-6,
        "rope_scaling": null,
        "rope_theta": 1000000.0,
        "sliding_window": null,
        "tie_word_embeddings": tied,
        "use_cache": true,
        "use_sliding_window": false,
        "vocab_size": 151936
    })
}

fn qwen3_8b() -> Value {
    qwen3(4096, 12288, 36, 32, 8, 128, false)
}

fn qwen3_0_6b() -> Value {
    qwen3(1024, 3072, 28, 16, 8, 128, true)
}

fn tiny_qwen3() -> Value {
    let mut c = qwen3(64, 128, 2, 4, 2, 32, false);
    c["vocab_size"] = json!(512);
    c["max_position_embeddings"] = json!(2048);
    c
}

/// A Qwen3-MoE config: `qwen3`'s attention keys plus the experts'.
fn qwen3_moe(base: Value, experts: usize, active: usize, moe_inter: usize) -> Value {
    let mut c = base;
    let m = c.as_object_mut().expect("qwen3() is an object");
    m.insert("architectures".into(), json!(["Qwen3MoeForCausalLM"]));
    m.insert("model_type".into(), json!("qwen3_moe"));
    m.insert("decoder_sparse_step".into(), json!(1));
    m.insert("mlp_only_layers".into(), json!([]));
    m.insert("moe_intermediate_size".into(), json!(moe_inter));
    m.insert("norm_topk_prob".into(), json!(true));
    m.insert("num_experts".into(), json!(experts));
    m.insert("num_experts_per_tok".into(), json!(active));
    m.insert("output_router_logits".into(), json!(false));
    m.insert("router_aux_loss_coef".into(), json!(0.001));
    c
}

fn qwen3_30b_a3b() -> Value {
    qwen3_moe(qwen3(2048, 6144, 48, 32, 4, 128, false), 128, 8, 768)
}

fn qwen3_moe_1_6b() -> Value {
    qwen3_moe(qwen3(1024, 3072, 24, 16, 4, 128, false), 64, 8, 256)
}

fn tiny_qwen3_moe() -> Value {
    let mut c = qwen3_moe(tiny_qwen3(), 8, 2, 32);
    c["num_hidden_layers"] = json!(3);
    c["max_window_layers"] = json!(3);
    c["mlp_only_layers"] = json!([1]);
    c
}

/// The Qwen3.5 / Qwen3-Next hybrid keys: `layers` layers, every fourth full attention, and the
/// real Gated DeltaNet and expert widths of both families.
fn hybrid_moe(architecture: &str, model_type: &str, layers: usize, experts: usize, active: usize) -> Value {
    let layer_types: Vec<&str> =
        (0..layers).map(|i| if (i + 1) % 4 == 0 { "full_attention" } else { "linear_attention" }).collect();
    json!({
        "architectures": [architecture],
        "attention_bias": false,
        "attention_dropout": 0.0,
        "head_dim": 256,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "initializer_range": 0.02,
        "layer_types": layer_types,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_value_head_dim": 128,
        "max_position_embeddings": 262144,
        "model_type": model_type,
        "moe_intermediate_size": 512,
        "num_attention_heads": 16,
        "num_experts": experts,
        "num_experts_per_tok": active,
        "num_hidden_layers": layers,
        "num_key_value_heads": 2,
        "output_router_logits": false,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"partial_rotary_factor": 0.25, "rope_theta": 10000000.0, "rope_type": "default"},
        "router_aux_loss_coef": 0.001,
        "shared_expert_intermediate_size": 512,
        "tie_word_embeddings": false,
        "use_cache": true,
        "vocab_size": 248320
    })
}

/// Qwen3.5-0.8B's text model (hyper-parameters as its checkpoint's `text_config` has them).
fn qwen3_5_0_8b() -> Value {
    let mut c = hybrid_moe("Qwen3_5ForCausalLM", "qwen3_5_text", 24, 1, 1);
    let m = c.as_object_mut().expect("hybrid_moe() is an object");
    for key in
        ["moe_intermediate_size", "num_experts", "num_experts_per_tok", "router_aux_loss_coef", "output_router_logits"]
    {
        m.remove(key);
    }
    m.remove("shared_expert_intermediate_size");
    m.insert("hidden_size".into(), json!(1024));
    m.insert("intermediate_size".into(), json!(3584));
    m.insert("num_attention_heads".into(), json!(8));
    m.insert("linear_num_value_heads".into(), json!(16));
    m.insert("tie_word_embeddings".into(), json!(true));
    c
}

fn qwen3_5_moe_1_7b() -> Value {
    hybrid_moe("Qwen3_5MoeForCausalLM", "qwen3_5_moe_text", 8, 16, 8)
}

fn qwen3_next_1_3b() -> Value {
    let mut c = hybrid_moe("Qwen3NextForCausalLM", "qwen3_next", 8, 16, 10);
    let m = c.as_object_mut().expect("hybrid_moe() is an object");
    m.insert("vocab_size".into(), json!(151936));
    m.insert("intermediate_size".into(), json!(5120));
    m.insert("norm_topk_prob".into(), json!(true));
    m.insert("decoder_sparse_step".into(), json!(1));
    m.insert("mlp_only_layers".into(), json!([]));
    c
}

/// A DeepSeek V4 config: transformers' layer pattern for `layers` (two HCA layers, then CSA and
/// HCA alternating; the first three MoE layers hash-routed) unless `layer_types` is given.
#[allow(clippy::too_many_arguments)]
fn deepseek_v4(
    hidden: usize,
    layers: usize,
    heads: usize,
    head_dim: usize,
    experts: usize,
    active: usize,
    moe_inter: usize,
    vocab: usize,
) -> Value {
    let layer_types: Vec<&str> = (0..layers)
        .map(|i| match i {
            0 | 1 => "heavily_compressed_attention",
            i if (i - 2) % 2 == 1 => "compressed_sparse_attention",
            _ => "heavily_compressed_attention",
        })
        .collect();
    let mlp_layer_types: Vec<&str> = (0..layers).map(|i| if i < 3 { "hash_moe" } else { "moe" }).collect();
    let partial = 64.0 / head_dim as f64;
    let mut c = json!({
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "attention_bias": false,
        "mlp_bias": false,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": 1,
        "head_dim": head_dim,
        "q_lora_rank": 1024,
        "o_groups": 8,
        "o_lora_rank": 1024,
        "n_routed_experts": experts,
        "num_experts_per_tok": active,
        "n_shared_experts": 1,
        "moe_intermediate_size": moe_inter,
        "norm_topk_prob": true,
        "scoring_func": "sqrtsoftplus",
        "routed_scaling_factor": 1.5,
        "swiglu_limit": 10.0,
        "hc_mult": 4,
        "hc_sinkhorn_iters": 20,
        "hc_eps": 1e-6,
        "index_n_heads": 64,
        "index_head_dim": 128,
        "index_topk": 512,
        "sliding_window": 128,
        "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
        "layer_types": layer_types,
        "mlp_layer_types": mlp_layer_types,
        "vocab_size": vocab,
    });
    let m = c.as_object_mut().expect("an object");
    m.insert("rope_theta".into(), json!(10000.0));
    m.insert("compress_rope_theta".into(), json!(160000.0));
    m.insert("partial_rotary_factor".into(), json!(partial));
    m.insert(
        "rope_parameters".into(),
        json!({
            "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": partial},
            "compress": {
                "rope_type": "yarn",
                "rope_theta": 160000.0,
                "partial_rotary_factor": partial,
                "factor": 16.0,
                "original_max_position_embeddings": 65536,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "attention_factor": 1.0
            }
        }),
    );
    for (key, value) in [
        ("max_position_embeddings", json!(1_048_576)),
        ("rms_norm_eps", json!(1e-6)),
        ("hidden_act", json!("silu")),
        ("initializer_range", json!(0.02)),
        ("tie_word_embeddings", json!(false)),
    ] {
        m.insert(key.into(), value);
    }
    c
}

fn deepseek_v4_flash() -> Value {
    deepseek_v4(4096, 43, 64, 512, 256, 6, 2048, 129_280)
}

fn deepseek_v4_1_6b() -> Value {
    let mut c = deepseek_v4(1024, 12, 16, 512, 128, 6, 256, 129_280);
    let m = c.as_object_mut().expect("deepseek_v4() is an object");
    for (key, value) in [("q_lora_rank", json!(512)), ("o_groups", json!(4)), ("o_lora_rank", json!(256))] {
        m.insert(key.into(), value);
    }
    c
}

/// fixtures/deepseek_v4's shape (written by transformers there; here by plumb synth).
fn tiny_deepseek_v4() -> Value {
    let mut c = deepseek_v4(64, 4, 4, 32, 8, 2, 32, 384);
    let m = c.as_object_mut().expect("deepseek_v4() is an object");
    for (key, value) in [
        ("q_lora_rank", json!(32)),
        ("o_groups", json!(2)),
        ("o_lora_rank", json!(16)),
        ("index_n_heads", json!(2)),
        ("index_head_dim", json!(16)),
        ("index_topk", json!(2)),
        ("sliding_window", json!(8)),
        ("swiglu_limit", json!(3.0)),
        ("compress_rates", json!({"compressed_sparse_attention": 4, "heavily_compressed_attention": 8})),
        (
            "layer_types",
            json!([
                "sliding_attention",
                "compressed_sparse_attention",
                "heavily_compressed_attention",
                "compressed_sparse_attention"
            ]),
        ),
        ("mlp_layer_types", json!(["hash_moe", "moe", "moe", "moe"])),
        ("partial_rotary_factor", json!(0.25)),
        ("max_position_embeddings", json!(1024)),
    ] {
        m.insert(key.into(), value);
    }
    m["rope_parameters"] = json!({
        "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        "compress": {
            "rope_type": "yarn",
            "rope_theta": 160000.0,
            "partial_rotary_factor": 0.25,
            "factor": 4.0,
            "original_max_position_embeddings": 64,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "attention_factor": 1.0
        }
    });
    c
}

//! A Hugging Face `config.json` → `ModelConfig`, checked per family: every key must be one the
//! family's config class defines (an unknown key is an error, not silently ignored), and keys that
//! select behaviour plumb does not implement must hold the value plumb does implement.
//! Invariant: a config that parses here describes exactly the graph the family file builds.

use crate::error::CheckpointError;
use crate::hparams::{ModelConfig, RopeLayout, RopeScaling};
use serde_json::{Map, Value};

/// Keys every Hugging Face decoder config may carry that do not change inference.
const COMMON_KEYS: &[&str] = &[
    "architectures",
    "model_type",
    "dtype",
    "torch_dtype",
    "transformers_version",
    "_name_or_path",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "use_cache",
    "initializer_range",
    "attention_dropout",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "hidden_act",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "tie_word_embeddings",
];

/// (architecture, model_type, the family's own keys).
const FAMILY_KEYS: &[(&str, &str, &[&str])] = &[
    ("LlamaForCausalLM", "llama", &["attention_bias", "mlp_bias", "pretraining_tp"]),
    ("MistralForCausalLM", "mistral", &["sliding_window"]),
    (
        "Qwen3ForCausalLM",
        "qwen3",
        &["attention_bias", "use_sliding_window", "sliding_window", "max_window_layers", "layer_types"],
    ),
    (
        "Qwen3MoeForCausalLM",
        "qwen3_moe",
        &[
            "attention_bias",
            "use_sliding_window",
            "sliding_window",
            "max_window_layers",
            // The experts, read by the family (plumb_models::families::qwen3_moe).
            "num_experts",
            "num_local_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "norm_topk_prob",
            "decoder_sparse_step",
            "mlp_only_layers",
            // Training only: the router's auxiliary loss.
            "output_router_logits",
            "router_aux_loss_coef",
        ],
    ),
    (
        "Qwen3_5ForCausalLM",
        "qwen3_5_text",
        &[
            "attention_bias",
            "layer_types",
            "full_attention_interval",
            // The Gated DeltaNet layers, read by the family (plumb_models::families::qwen3_5).
            "linear_conv_kernel_dim",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_num_key_heads",
            "linear_num_value_heads",
        ],
    ),
    (
        "Qwen3_5MoeForCausalLM",
        "qwen3_5_moe_text",
        &[
            "attention_bias",
            "layer_types",
            "full_attention_interval",
            // The Gated DeltaNet layers and the experts, read by the family
            // (plumb_models::families::qwen3_5_moe). Every layer is sparse and renormalizes.
            "linear_conv_kernel_dim",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_num_key_heads",
            "linear_num_value_heads",
            "num_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            // Training only: the router's auxiliary loss.
            "output_router_logits",
            "router_aux_loss_coef",
        ],
    ),
    (
        "Qwen3NextForCausalLM",
        "qwen3_next",
        &[
            "attention_bias",
            "layer_types",
            "full_attention_interval",
            "partial_rotary_factor",
            // The Gated DeltaNet layers and the experts, read by the family
            // (plumb_models::families::qwen3_next).
            "linear_conv_kernel_dim",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_num_key_heads",
            "linear_num_value_heads",
            "num_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            "norm_topk_prob",
            "decoder_sparse_step",
            "mlp_only_layers",
            // Training only: the router's auxiliary loss.
            "output_router_logits",
            "router_aux_loss_coef",
        ],
    ),
    (
        "DeepseekV4ForCausalLM",
        "deepseek_v4",
        &[
            "attention_bias",
            "mlp_bias",
            "partial_rotary_factor",
            "qk_rope_head_dim",
            // Attention, compressors, indexer, hyper-connections and experts, read by the family
            // (plumb_models::families::deepseek_v4).
            "layer_types",
            "mlp_layer_types",
            "sliding_window",
            "compress_rates",
            "compress_rope_theta",
            "q_lora_rank",
            "o_groups",
            "o_lora_rank",
            "index_n_heads",
            "index_head_dim",
            "index_topk",
            "hc_mult",
            "hc_sinkhorn_iters",
            "hc_eps",
            "moe_intermediate_size",
            "n_routed_experts",
            "n_shared_experts",
            "num_experts_per_tok",
            "scoring_func",
            "norm_topk_prob",
            "routed_scaling_factor",
            "swiglu_limit",
            // The multi-token-prediction layer count (its weights are refused or ignored by name).
            "num_nextn_predict_layers",
            // Training only: the router's auxiliary loss and jitter.
            "output_router_logits",
            "router_aux_loss_coef",
            "router_jitter_noise",
        ],
    ),
];

/// Architectures whose transformers config defaults `partial_rotary_factor` to 0.25 when the
/// file does not set it (the hybrid linear-attention families).
const QUARTER_ROTARY: &[&str] = &["Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "Qwen3NextForCausalLM"];

/// Vision-language checkpoints whose text model plumb runs: (architecture, model_type, the text
/// model's architecture). Their `config.json` nests the text config under `text_config`; the
/// vision tower's settings are not read (its weights are refused or ignored by the family,
/// explicitly).
pub const VISION_LANGUAGE: &[(&str, &str, &str)] = &[
    ("Qwen3_5ForConditionalGeneration", "qwen3_5", "Qwen3_5ForCausalLM"),
    ("Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe", "Qwen3_5MoeForCausalLM"),
];

/// Top-level keys of a vision-language config.json besides `text_config`.
const VISION_LANGUAGE_KEYS: &[&str] =
    &["vision_config", "image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"];

fn bad(key: &str, why: impl Into<String>) -> CheckpointError {
    CheckpointError::BadConfig { file: "config.json".into(), key: key.into(), why: why.into() }
}

/// Reads a present, non-null key with `f`, or says what it should have been.
fn opt<T>(
    m: &Map<String, Value>,
    key: &str,
    what: &str,
    f: impl Fn(&Value) -> Option<T>,
) -> Result<Option<T>, CheckpointError> {
    match m.get(key).filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(v) => f(v).map(Some).ok_or_else(|| bad(key, format!("is {v}, expected {what}"))),
    }
}

fn size(m: &Map<String, Value>, key: &str) -> Result<Option<usize>, CheckpointError> {
    opt(m, key, "a non-negative integer", |v| v.as_u64().and_then(|x| usize::try_from(x).ok()))
}

fn req_size(m: &Map<String, Value>, key: &str) -> Result<usize, CheckpointError> {
    size(m, key)?.ok_or_else(|| bad(key, "is missing"))
}

impl ModelConfig {
    /// Reads a Hugging Face `config.json` (transformers 4.x `rope_theta`/`rope_scaling` or 5.x
    /// `rope_parameters`). Weights of such checkpoints are stored in the rotate-half layout.
    pub fn from_hf_json(text: &str) -> Result<Self, CheckpointError> {
        let v: Value = serde_json::from_str(text).map_err(|e| bad("(file)", format!("is not JSON: {e}")))?;
        let Value::Object(m) = v else { return Err(bad("(file)", "is not a JSON object")) };
        let m = text_part(m)?;
        let archs = opt(&m, "architectures", "a list of strings", |v| {
            v.as_array()?.iter().map(|a| a.as_str().map(String::from)).collect::<Option<Vec<_>>>()
        })?
        .ok_or_else(|| bad("architectures", "is missing"))?;
        let [architecture] = archs.as_slice() else {
            return Err(bad("architectures", format!("lists {archs:?}; plumb expects exactly one")));
        };
        // A vision-language architecture is checked against its text model's keys.
        let text_arch =
            VISION_LANGUAGE.iter().find(|(a, _, _)| a == architecture).map_or(architecture.as_str(), |v| v.2);
        let family = FAMILY_KEYS.iter().find(|(a, _, _)| *a == text_arch);
        if let Some((_, model_type, own)) = family {
            if let Some(t) = opt(&m, "model_type", "a string", |v| v.as_str().map(String::from))?
                && t != *model_type
            {
                return Err(bad("model_type", format!("is `{t}`, which contradicts architecture {architecture}")));
            }
            if let Some(k) = m.keys().find(|k| !COMMON_KEYS.contains(&k.as_str()) && !own.contains(&k.as_str())) {
                return Err(bad(k, format!("is not a {architecture} setting plumb knows; refusing to ignore it")));
            }
            check_family_values(&m, architecture)?;
        }
        if let Some(act) = opt(&m, "hidden_act", "a string", |v| v.as_str().map(String::from))?
            && act != "silu"
        {
            return Err(bad("hidden_act", format!("is `{act}`; plumb's SwiGLU layer computes silu")));
        }
        let hidden_size = req_size(&m, "hidden_size")?;
        let num_attention_heads = req_size(&m, "num_attention_heads")?;
        let head_dim = size(&m, "head_dim")?.unwrap_or(hidden_size / num_attention_heads.max(1));
        let (rope_theta, rope_scaling) = rope(&m)?;
        let rope_dim = match partial_rotary_factor(&m)? {
            // transformers: int(head_dim * partial_rotary_factor).
            Some(f) => (head_dim as f64 * f) as usize,
            None if QUARTER_ROTARY.contains(&text_arch) => head_dim / 4,
            None => head_dim,
        };
        // Qwen3.5-MoE has no dense MLP and its config no `intermediate_size`: the experts' width
        // stands in for it (the parameter-count reports read it).
        let intermediate_size = match (size(&m, "intermediate_size")?, text_arch) {
            (None, "Qwen3_5MoeForCausalLM") => req_size(&m, "moe_intermediate_size")?,
            // DeepSeek V4 names its expert width only `moe_intermediate_size` (transformers maps
            // `intermediate_size` onto it).
            (_, "DeepseekV4ForCausalLM") => req_size(&m, "moe_intermediate_size")?,
            (s, _) => s.ok_or_else(|| bad("intermediate_size", "is missing"))?,
        };
        let config = ModelConfig {
            architecture: architecture.clone(),
            hidden_size,
            intermediate_size,
            num_hidden_layers: req_size(&m, "num_hidden_layers")?,
            num_attention_heads,
            num_key_value_heads: size(&m, "num_key_value_heads")?.unwrap_or(num_attention_heads),
            head_dim,
            vocab_size: req_size(&m, "vocab_size")?,
            max_position_embeddings: req_size(&m, "max_position_embeddings")?,
            rms_norm_eps: opt(&m, "rms_norm_eps", "a number", Value::as_f64)?.unwrap_or(1e-6),
            rope_theta,
            rope_dim,
            rope_scaling,
            tie_word_embeddings: opt(&m, "tie_word_embeddings", "true or false", Value::as_bool)?.unwrap_or(false),
            rope_layout: RopeLayout::RotateHalf,
        };
        config.validate().map_err(|why| bad("(hyper-parameters)", why))?;
        Ok(config)
    }
}

/// A vision-language config (`VISION_LANGUAGE`) → its text config, under the vision-language
/// architecture name (the family loader knows the nested weight layout by it); others unchanged.
fn text_part(mut m: Map<String, Value>) -> Result<Map<String, Value>, CheckpointError> {
    let arch = m.get("architectures").and_then(Value::as_array).and_then(|a| a.first()).and_then(Value::as_str);
    let Some(&(vl_arch, vl_type, _)) = VISION_LANGUAGE.iter().find(|(a, _, _)| Some(*a) == arch) else {
        return Ok(m);
    };
    if let Some(t) = m.get("model_type").and_then(Value::as_str)
        && t != vl_type
    {
        return Err(bad("model_type", format!("is `{t}`, which contradicts architecture {vl_arch}")));
    }
    let Some(Value::Object(mut text)) = m.remove("text_config") else {
        return Err(bad("text_config", format!("is missing or not an object; {vl_arch} nests its text model there")));
    };
    for (k, v) in m {
        if k == "architectures" {
            continue;
        }
        if text.get(&k).is_some_and(|t| *t != v) && k != "model_type" && k != "dtype" && k != "transformers_version" {
            return Err(bad(&k, format!("is {v} at the top level but {} in text_config", text[&k])));
        }
        if !COMMON_KEYS.contains(&k.as_str()) && !VISION_LANGUAGE_KEYS.contains(&k.as_str()) {
            return Err(bad(&k, format!("is not a {vl_arch} setting plumb knows; refusing to ignore it")));
        }
        if k == "tie_word_embeddings" {
            text.insert(k, v);
        }
    }
    text.insert("architectures".into(), Value::from(vec![vl_arch]));
    text.remove("model_type");
    Ok(text)
}

/// `partial_rotary_factor` from `rope_parameters` (transformers 5) or the top level, in (0, 1].
fn partial_rotary_factor(m: &Map<String, Value>) -> Result<Option<f64>, CheckpointError> {
    let nested = m
        .get("rope_parameters")
        .and_then(Value::as_object)
        .map(|rp| opt(rp, "partial_rotary_factor", "a number", Value::as_f64));
    let f = match (nested.transpose()?.flatten(), opt(m, "partial_rotary_factor", "a number", Value::as_f64)?) {
        (Some(a), Some(b)) if a != b => {
            return Err(bad(
                "partial_rotary_factor",
                format!("is {b}, but rope_parameters.partial_rotary_factor is {a}"),
            ));
        }
        (Some(f), _) | (None, Some(f)) => f,
        (None, None) => return Ok(None),
    };
    if !(f > 0.0 && f <= 1.0) {
        return Err(bad("partial_rotary_factor", format!("is {f}; it must be in (0, 1]")));
    }
    Ok(Some(f))
}

/// Values of family keys that select behaviour plumb does not implement.
fn check_family_values(m: &Map<String, Value>, architecture: &str) -> Result<(), CheckpointError> {
    if let Some(tp) = opt(m, "pretraining_tp", "an integer", Value::as_u64)?
        && tp != 1
    {
        return Err(bad("pretraining_tp", format!("is {tp}; only 1 (no split projections) is supported")));
    }
    if architecture == "MistralForCausalLM"
        && let Some(window) = size(m, "sliding_window")?
        && window < req_size(m, "max_position_embeddings")?
    {
        return Err(bad("sliding_window", format!("is {window}; plumb's llama family attends over the whole context")));
    }
    if architecture == "Qwen3ForCausalLM" || architecture == "Qwen3MoeForCausalLM" {
        let sliding = opt(m, "use_sliding_window", "true or false", Value::as_bool)?.unwrap_or(false);
        if sliding {
            return Err(bad("use_sliding_window", "is true; plumb's qwen3 families run full attention in every layer"));
        }
        let layers = req_size(m, "num_hidden_layers")?;
        let types = opt(m, "layer_types", "a list of strings", |v| {
            v.as_array()?.iter().map(|t| t.as_str().map(String::from)).collect::<Option<Vec<_>>>()
        })?;
        if let Some(types) = types {
            if types.len() != layers {
                return Err(bad("layer_types", format!("has {} entries for {layers} layers", types.len())));
            }
            if let Some(t) = types.iter().find(|t| *t != "full_attention") {
                return Err(bad("layer_types", format!("holds `{t}`, which contradicts use_sliding_window = false")));
            }
        }
    }
    Ok(())
}

/// (rope_theta, scaling) from `rope_parameters` (transformers 5) or `rope_theta` + `rope_scaling`;
/// both present and disagreeing is a contradiction.
fn rope(m: &Map<String, Value>) -> Result<(f64, Option<RopeScaling>), CheckpointError> {
    let params = opt(m, "rope_parameters", "an object", |v| v.as_object().cloned())?;
    let legacy_scaling = opt(m, "rope_scaling", "an object", |v| v.as_object().cloned())?;
    let top_theta = opt(m, "rope_theta", "a number", Value::as_f64)?;
    let (key, rp) = match (&params, &legacy_scaling) {
        (Some(_), Some(_)) => return Err(bad("rope_scaling", "and rope_parameters are both set; keep one")),
        (Some(p), None) => ("rope_parameters", p.clone()),
        (None, Some(s)) => ("rope_scaling", s.clone()),
        (None, None) => ("rope_parameters", Map::new()),
    };
    let theta = match (opt(&rp, "rope_theta", "a number", Value::as_f64)?, top_theta) {
        (Some(a), Some(b)) if a != b => {
            return Err(bad("rope_theta", format!("is {b}, but {key}.rope_theta is {a}")));
        }
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => 10_000.0,
    };
    let f = |k: &str| opt(&rp, k, "a number", Value::as_f64);
    let kind = match opt(&rp, "rope_type", "a string", |v| v.as_str().map(String::from))? {
        Some(k) => k,
        None => opt(&rp, "type", "a string", |v| v.as_str().map(String::from))?.unwrap_or_default(),
    };
    let orig = opt(&rp, "original_max_position_embeddings", "an integer", Value::as_u64)?.unwrap_or(0);
    let scaling = match kind.as_str() {
        "" | "default" => None,
        "linear" => Some(RopeScaling::Linear { factor: f("factor")?.unwrap_or(1.0) }),
        "yarn" => {
            Some(RopeScaling::Yarn { factor: f("factor")?.unwrap_or(1.0), original_max_position_embeddings: orig })
        }
        "llama3" => Some(RopeScaling::Llama3 {
            factor: f("factor")?.unwrap_or(1.0),
            low_freq_factor: f("low_freq_factor")?.unwrap_or(1.0),
            high_freq_factor: f("high_freq_factor")?.unwrap_or(4.0),
            original_max_position_embeddings: orig,
        }),
        other => return Err(bad(&format!("{key}.rope_type"), format!("is `{other}`, which plumb does not implement"))),
    };
    Ok((theta, scaling))
}

#[cfg(test)]
mod tests {
    use super::*;

    const QWEN3: &str = r#"{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3","hidden_size":64,
        "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
        "head_dim":16,"vocab_size":384,"max_position_embeddings":512,"rms_norm_eps":1e-6,
        "rope_parameters":{"rope_theta":1000000.0,"rope_type":"default"},"tie_word_embeddings":false,
        "use_sliding_window":false,"sliding_window":null,"layer_types":["full_attention","full_attention"],
        "hidden_act":"silu","attention_bias":false,"dtype":"float32","transformers_version":"5.24.0"}"#;

    fn with(edit: impl FnOnce(&mut Map<String, Value>)) -> Result<ModelConfig, CheckpointError> {
        let Value::Object(mut m) = serde_json::from_str(QWEN3).unwrap() else { unreachable!() };
        edit(&mut m);
        ModelConfig::from_hf_json(&Value::Object(m).to_string())
    }

    #[test]
    fn reads_qwen3_with_rope_parameters() {
        let c = with(|_| {}).unwrap();
        assert_eq!((c.head_dim, c.rope_theta, c.rope_layout), (16, 1e6, RopeLayout::RotateHalf));
        assert!(!c.tie_word_embeddings);
    }

    #[test]
    fn reads_transformers_4_rope_theta() {
        let c = with(|m| {
            m.remove("rope_parameters");
            m.insert("rope_theta".into(), 5e5.into());
        })
        .unwrap();
        assert_eq!(c.rope_theta, 5e5);
    }

    #[test]
    fn refuses_unknown_and_contradictory_fields() {
        type Edit = Box<dyn FnOnce(&mut Map<String, Value>)>;
        let cases: Vec<(Edit, &str)> = vec![
            (Box::new(|m| drop(m.insert("num_experts".into(), 8.into()))), "`num_experts` is not a Qwen3ForCausalLM"),
            (Box::new(|m| drop(m.insert("model_type".into(), "llama".into()))), "contradicts architecture"),
            (Box::new(|m| drop(m.insert("use_sliding_window".into(), true.into()))), "use_sliding_window"),
            (
                Box::new(|m| {
                    drop(m.insert("layer_types".into(), serde_json::json!(["full_attention", "sliding_attention"])))
                }),
                "contradicts use_sliding_window",
            ),
            (
                Box::new(|m| drop(m.insert("rope_theta".into(), 10000.0.into()))),
                "rope_parameters.rope_theta is 1000000",
            ),
            (Box::new(|m| drop(m.insert("hidden_act".into(), "gelu".into()))), "hidden_act"),
            (Box::new(|m| drop(m.insert("num_key_value_heads".into(), 3.into()))), "cannot be grouped"),
            (Box::new(|m| drop(m.insert("hidden_size".into(), "64".into()))), "`hidden_size` is \"64\", expected"),
            (Box::new(|m| drop(m.remove("vocab_size"))), "`vocab_size` is missing"),
            (
                Box::new(|m| drop(m.insert("rope_parameters".into(), serde_json::json!({"rope_type": "dynamic"})))),
                "does not implement",
            ),
        ];
        for (edit, want) in cases {
            let err = with(edit).unwrap_err().to_string();
            assert!(err.contains(want), "{err:?} should contain {want:?}");
        }
        assert!(ModelConfig::from_hf_json("{not json").unwrap_err().to_string().contains("not JSON"));
    }

    #[test]
    fn refuses_a_mistral_sliding_window_shorter_than_the_context() {
        let text = r#"{"architectures":["MistralForCausalLM"],"hidden_size":64,"intermediate_size":128,
            "num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"max_position_embeddings":8192,
            "sliding_window":4096}"#;
        let err = ModelConfig::from_hf_json(text).unwrap_err().to_string();
        assert!(err.contains("`sliding_window` is 4096"), "{err}");
        assert!(ModelConfig::from_hf_json(&text.replace("4096", "null")).is_ok());
    }

    #[test]
    fn reads_llama_config_json() {
        let text = r#"{"architectures":["LlamaForCausalLM"],"hidden_size":576,"intermediate_size":1536,
            "num_hidden_layers":30,"num_attention_heads":9,"num_key_value_heads":3,"vocab_size":49152,
            "max_position_embeddings":8192,"rms_norm_eps":1e-5,"rope_theta":100000.0,"tie_word_embeddings":true,
            "rope_scaling":null}"#;
        let c = ModelConfig::from_hf_json(text).unwrap();
        assert_eq!((c.head_dim, c.num_key_value_heads, c.rope_scaling), (64, 3, None));
        assert!(c.tie_word_embeddings);
    }

    const QWEN3_5: &str = r#"{"architectures":["Qwen3_5ForCausalLM"],"model_type":"qwen3_5_text","hidden_size":64,
        "intermediate_size":128,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,
        "vocab_size":384,"max_position_embeddings":1024,"rms_norm_eps":1e-6,"layer_types":["linear_attention",
        "linear_attention","linear_attention","full_attention"],"linear_conv_kernel_dim":4,"linear_key_head_dim":16,
        "linear_num_key_heads":2,"linear_num_value_heads":4,"linear_value_head_dim":16,"rope_parameters":{
        "partial_rotary_factor":0.25,"rope_theta":10000.0,"rope_type":"default","mrope_section":[11,11,10],
        "mrope_interleaved":true}}"#;

    #[test]
    fn qwen3_5_reads_partial_rotary_flat_and_nested_in_a_vision_language_config() {
        let flat = ModelConfig::from_hf_json(QWEN3_5).unwrap();
        assert_eq!((flat.head_dim, flat.rope_dim, flat.architecture.as_str()), (32, 8, "Qwen3_5ForCausalLM"));
        let text: Value = serde_json::from_str(QWEN3_5).unwrap();
        let vl = serde_json::json!({"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
            "text_config": text, "vision_config": {}, "image_token_id": 9, "tie_word_embeddings": false});
        let nested = ModelConfig::from_hf_json(&vl.to_string()).unwrap();
        assert_eq!(nested.architecture, "Qwen3_5ForConditionalGeneration");
        assert_eq!(ModelConfig { architecture: flat.architecture.clone(), ..nested }, flat);
        // An unknown key, at either level, is refused rather than ignored.
        let mut unknown = vl.clone();
        unknown["text_config"]["linear_mystery"] = 1.into();
        assert!(ModelConfig::from_hf_json(&unknown.to_string()).unwrap_err().to_string().contains("linear_mystery"));
        let mut unknown = vl.clone();
        unknown["audio_config"] = 1.into();
        assert!(ModelConfig::from_hf_json(&unknown.to_string()).unwrap_err().to_string().contains("audio_config"));
        let mut missing = vl;
        missing.as_object_mut().unwrap().remove("text_config");
        assert!(ModelConfig::from_hf_json(&missing.to_string()).unwrap_err().to_string().contains("text_config"));
    }

    #[test]
    fn the_hybrid_moe_architectures_read_their_own_keys_and_refuse_the_others() {
        let mut moe: Value = serde_json::from_str(QWEN3_5).unwrap();
        let m = moe.as_object_mut().unwrap();
        m.insert("architectures".into(), serde_json::json!(["Qwen3_5MoeForCausalLM"]));
        m.insert("model_type".into(), "qwen3_5_moe_text".into());
        m.remove("intermediate_size");
        m.remove("rope_parameters");
        for (k, v) in [("num_experts", 8), ("num_experts_per_tok", 2), ("moe_intermediate_size", 16)] {
            m.insert(k.into(), v.into());
        }
        m.insert("shared_expert_intermediate_size".into(), 32.into());
        let c = ModelConfig::from_hf_json(&moe.to_string()).unwrap();
        // No intermediate_size: the experts' width; no partial_rotary_factor: transformers' 0.25.
        assert_eq!((c.intermediate_size, c.rope_dim), (16, 8));
        let mut vl = serde_json::json!({"architectures": ["Qwen3_5MoeForConditionalGeneration"],
            "model_type": "qwen3_5_moe", "text_config": moe.clone(), "vision_config": {}});
        assert_eq!(ModelConfig::from_hf_json(&vl.to_string()).unwrap().rope_dim, 8);
        // Qwen3-Next's options are not Qwen3.5-MoE settings.
        vl["text_config"]["mlp_only_layers"] = serde_json::json!([]);
        assert!(ModelConfig::from_hf_json(&vl.to_string()).unwrap_err().to_string().contains("mlp_only_layers"));
        let mut next = moe;
        next["architectures"] = serde_json::json!(["Qwen3NextForCausalLM"]);
        next["model_type"] = "qwen3_next".into();
        next["partial_rotary_factor"] = 0.5.into();
        next["mlp_only_layers"] = serde_json::json!([1]);
        next["intermediate_size"] = 48.into();
        let c = ModelConfig::from_hf_json(&next.to_string()).unwrap();
        assert_eq!((c.intermediate_size, c.rope_dim), (48, 16));
        next["model_type"] = "qwen3_5_moe_text".into();
        assert!(ModelConfig::from_hf_json(&next.to_string()).unwrap_err().to_string().contains("contradicts"));
    }
}

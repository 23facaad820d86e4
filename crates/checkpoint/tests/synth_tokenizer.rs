//! The tokenizer `plumb synth` writes, read by plumb's own Hugging Face loader: it covers the
//! config's whole vocabulary (every id the model can emit decodes), any UTF-8 text round-trips,
//! merges shorten English text, the special tokens are where the config and generation files say,
//! the chat template renders into those special tokens, and the ids equal Hugging Face
//! `tokenizers`' on the same files (fixtures/synth, from tools/fixtures/synth_tok.py).

use plumb_checkpoint::source::NoProgress;
use plumb_checkpoint::synth::{SynthOptions, SynthPlan, presets};
use plumb_tokenizer::{ChatMessage, ChatTemplate, Tokenizer, TokenizerSpec};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn tokenizer_of(dir: &Path) -> Tokenizer {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let spec =
        TokenizerSpec::from_hf_files(&read("tokenizer.json"), Some(&read("tokenizer_config.json")), None).unwrap();
    Tokenizer::new(spec).unwrap()
}

/// Writes preset `name` and returns its folder and tokenizer.
fn synth(name: &str) -> (tempfile::TempDir, Tokenizer) {
    let dir = tempfile::tempdir().unwrap();
    SynthPlan::preset(name, SynthOptions::default()).unwrap().write(dir.path(), &NoProgress).unwrap();
    let tok = tokenizer_of(dir.path());
    (dir, tok)
}

/// Deterministic text of `n` characters drawn from ASCII, Latin-1, CJK, emoji, controls and
/// the special tokens' own text.
fn mixed_text(seed: u64, n: usize) -> String {
    let pieces = [
        "a",
        "Z",
        " ",
        "  ",
        "\n",
        "\t",
        "7",
        "é",
        "ß",
        "中",
        "文",
        "🦀",
        "👍🏽",
        "\u{0}",
        "\u{7f}",
        "'s",
        "<|im_end|>",
        "<|eot_id|>",
        "ー",
        "،",
    ];
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            pieces[(state >> 33) as usize % pieces.len()]
        })
        .collect()
}

#[test]
fn any_text_round_trips_and_english_is_shortened() {
    for preset in ["tiny-llama", "tiny-qwen3"] {
        let (_dir, tok) = synth(preset);
        assert_eq!(tok.vocab_size(), 512, "{preset}: the config's vocab_size");
        for seed in 0..50 {
            let text = mixed_text(seed, 1 + seed as usize * 7);
            let ids = tok.encode(&text, false, false);
            assert_eq!(tok.decode(&ids, false).unwrap(), text, "{preset}: {text:?}");
        }
        let english = "the cat sat on the mat and then it ate";
        let ids = tok.encode(english, false, false);
        assert!(ids.len() < english.len(), "{preset}: merges shorten {english:?} to {} ids", ids.len());
        for id in 0..tok.vocab_size() as u32 {
            tok.token_bytes(id).unwrap();
        }
    }
}

#[test]
fn a_real_vocabulary_is_filled_to_the_config_size() {
    let dir = tempfile::tempdir().unwrap();
    let plan = SynthPlan::preset("qwen3-0.6b", SynthOptions::default()).unwrap();
    std::fs::write(dir.path().join("tokenizer.json"), plan.tokenizer.tokenizer_json()).unwrap();
    std::fs::write(dir.path().join("tokenizer_config.json"), plan.tokenizer.tokenizer_config_json(40960)).unwrap();
    let tok = tokenizer_of(dir.path());
    assert_eq!(tok.vocab_size(), 151_936);
    let text = mixed_text(1, 2000);
    assert_eq!(tok.decode(&tok.encode(&text, false, false), false).unwrap(), text);
}

#[test]
fn special_tokens_agree_across_the_files_and_the_template_renders() {
    for (preset, eos, template_tokens) in [
        ("tiny-qwen3", "<|im_end|>", &["<|im_start|>", "<|im_end|>"][..]),
        ("tiny-llama", "<|eot_id|>", &["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"][..]),
    ] {
        let (dir, tok) = synth(preset);
        let spec = tok.spec();
        let eos_id = spec.eos_id.unwrap();
        assert_eq!(spec.tokens[eos_id as usize], eos, "{preset}");
        assert!(tok.is_special(eos_id) && tok.is_eog(eos_id), "{preset}");
        let json = |name: &str| -> serde_json::Value {
            serde_json::from_str(&std::fs::read_to_string(dir.path().join(name)).unwrap()).unwrap()
        };
        let stops = json("generation_config.json")["eos_token_id"].clone();
        assert!(stops.as_array().unwrap().contains(&eos_id.into()), "{preset}: {stops}");
        assert_eq!(json("config.json")["eos_token_id"], stops, "{preset}");
        match spec.bos_id {
            Some(bos) => {
                assert_eq!(json("config.json")["bos_token_id"], bos, "{preset}");
                assert_eq!(tok.encode("hi", true, false)[0], bos, "{preset}: BOS is added");
            }
            None => assert!(!spec.add_bos, "{preset}"),
        }

        let template = ChatTemplate::new(spec.chat_template.as_deref().unwrap(), "", eos).unwrap();
        let text = template.render(&[ChatMessage::new("user", "Hello there")], true).unwrap();
        let ids = tok.encode(&text, false, true);
        for t in template_tokens {
            let id = spec.tokens.iter().position(|x| x == t).unwrap() as u32;
            assert!(ids.contains(&id), "{preset}: {t} in the rendered prompt {text:?}");
        }
        assert_eq!(tok.decode(&ids, false).unwrap(), text, "{preset}");
    }
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

#[test]
fn ids_equal_hugging_face_tokenizers() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/synth/tokenizer_cases.json");
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for m in fixture["models"].as_array().unwrap() {
        let (preset, vocab) = (m["preset"].as_str().unwrap(), m["vocab_size"].as_u64().unwrap());
        let mut config = (presets::preset(preset).unwrap().config)();
        config["vocab_size"] = vocab.into();
        let plan = SynthPlan::new(&config.to_string(), preset, SynthOptions::default()).unwrap();
        let json = plan.tokenizer.tokenizer_json();
        let sha = format!("{:x}", Sha256::digest(json.as_bytes()));
        assert_eq!(
            sha, m["tokenizer_json_sha256"],
            "{preset} ({vocab}): the writer changed; regenerate with tools/fixtures/synth_tok.py"
        );
        let config_json = plan.tokenizer.tokenizer_config_json(2048);
        let tok = Tokenizer::new(TokenizerSpec::from_hf_files(&json, Some(&config_json), None).unwrap()).unwrap();
        let mut failures = Vec::new();
        let cases = m["cases"].as_array().unwrap();
        for case in cases {
            let text = case["text"].as_str().unwrap();
            for (key, got) in [
                ("ids", tok.encode(text, false, true)),
                ("ids_split_special", tok.encode(text, false, false)),
                ("ids_with_specials", tok.encode(text, true, true)),
            ] {
                if got != ids(&case[key]) {
                    failures.push(format!("{text:?} {key}: got {got:?}, want {}", case[key]));
                }
            }
            let decoded = tok.decode(&ids(&case["ids"]), false).unwrap();
            if decoded != case["decoded"].as_str().unwrap() {
                failures.push(format!("decode {text:?}: got {decoded:?}"));
            }
        }
        assert!(cases.len() >= 200, "{preset}: {} cases", cases.len());
        assert!(failures.is_empty(), "{preset} ({vocab}): {} differ:\n{}", failures.len(), failures.join("\n"));
    }
}

//! plumb's byte-level BPE driven by a Hugging Face `tokenizer.json` gives transformers' ids on the
//! Qwen3 fixture (fixtures/qwen3: Qwen2's pre-tokenizer, ChatML special tokens), and malformed or
//! unsupported tokenizer files are refused with an error naming the part.

use plumb_tokenizer::{ChatMessage, ChatTemplate, Normalizer, Tokenizer, TokenizerError, TokenizerSpec};
use serde_json::Value;
use std::path::PathBuf;

fn fixture(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/qwen3").join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn qwen3_spec() -> TokenizerSpec {
    TokenizerSpec::from_hf_files(
        &fixture("hf/tokenizer.json"),
        Some(&fixture("hf/tokenizer_config.json")),
        Some(&fixture("hf/chat_template.jinja")),
    )
    .unwrap()
}

#[test]
fn ids_equal_transformers_on_the_qwen3_fixture() {
    let tok = Tokenizer::new(qwen3_spec()).unwrap();
    let cases: Value = serde_json::from_str(&fixture("tokenizer_cases.json")).unwrap();
    let cases = cases["cases"].as_array().unwrap();
    assert!(cases.len() > 200);
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = case["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        // transformers matches special tokens written in the text (split_special_tokens=False).
        assert_eq!(tok.encode(text, false, true), want, "{text:?}");
        assert_eq!(tok.decode(&want, false).unwrap(), text, "decode {text:?}");
    }
}

/// The NFC normalizer and `ignore_merges`, each switched on in the Qwen3 fixture's tokenizer
/// (fixtures/tokenizer/hf_features, from tools/fixtures/tok_features.py): transformers' ids.
#[test]
fn nfc_and_ignore_merges_give_transformers_ids() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/tokenizer/hf_features");
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    for variant in ["nfc", "ignore_merges"] {
        let spec = TokenizerSpec::from_hf_files(&read(&format!("{variant}.tokenizer.json")), None, None).unwrap();
        assert_eq!(
            (spec.normalizer == Normalizer::Nfc, spec.ignore_merges),
            (variant == "nfc", variant == "ignore_merges")
        );
        let tok = Tokenizer::new(spec).unwrap();
        let doc: Value = serde_json::from_str(&read(&format!("{variant}.cases.json"))).unwrap();
        // The fixture is built so that the feature changes the ids of some texts.
        assert!(doc["ids_changed_by_the_feature"].as_u64().unwrap() >= 5);
        for case in doc["cases"].as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            let want: Vec<u32> = case["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
            assert_eq!(tok.encode(text, false, true), want, "{variant}: {text:?}");
            assert_eq!(
                tok.decode(&want, false).unwrap(),
                case["decoded"].as_str().unwrap(),
                "{variant}: decode {text:?}"
            );
        }
    }
}

#[test]
fn special_tokens_and_chat_template_come_from_the_folder() {
    let spec = qwen3_spec();
    assert_eq!((spec.bos_id, spec.eos_id, spec.pad_id), (None, Some(2), Some(0)));
    assert!(!spec.add_bos);
    assert_eq!(spec.eog_ids, vec![0, 2], "<|endoftext|> and <|im_end|> end generation");
    let template = ChatTemplate::new(spec.chat_template.as_deref().unwrap(), "", "<|im_end|>").unwrap();
    let text = template.render(&[ChatMessage::new("user", "hi")], true).unwrap();
    assert_eq!(text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

fn edited(edit: impl FnOnce(&mut Value)) -> Result<TokenizerSpec, TokenizerError> {
    let mut t: Value = serde_json::from_str(&fixture("hf/tokenizer.json")).unwrap();
    edit(&mut t);
    TokenizerSpec::from_hf_files(&t.to_string(), None, None)
}

#[test]
fn bad_tokenizer_files_are_refused_with_a_reason() {
    let err = TokenizerSpec::from_hf_files("{\"model\": ", None, None).unwrap_err().to_string();
    assert!(err.contains("tokenizer.json is not JSON"), "{err}");
    let err = TokenizerSpec::from_hf_files("{}", None, None).unwrap_err().to_string();
    assert!(err.contains("no `model`"), "{err}");
    type Edit = Box<dyn FnOnce(&mut Value)>;
    let cases: Vec<(Edit, &str)> = vec![
        (Box::new(|t| t["model"]["type"] = "Unigram".into()), "Unigram"),
        (Box::new(|t| t["normalizer"] = serde_json::json!({"type": "NFKC"})), "normalizer"),
        (Box::new(|t| t["normalizer"] = serde_json::json!({"type": "Sequence", "normalizers": []})), "only NFC"),
        (Box::new(|t| t["model"]["byte_fallback"] = true.into()), "byte_fallback"),
        (Box::new(|t| t["model"]["ignore_merges"] = "yes".into()), "model.ignore_merges is \"yes\""),
        (Box::new(|t| t["model"]["continuing_subword_prefix"] = "##".into()), "continuing_subword_prefix"),
        (Box::new(|t| t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+".into()), "pre-tokenizer"),
        (Box::new(|t| t["model"]["merges"][3] = 7.into()), "merge rule 3"),
        (Box::new(|t| t["model"]["merges"][5] = "zzz qqq".into()), "merge rule 5"),
        (Box::new(|t| t["model"]["vocab"]["!"] = 100000.into()), "no token has id"),
        (Box::new(|t| t["added_tokens"][0]["id"] = 5.into()), "id 5 is both"),
    ];
    for (edit, want) in cases {
        let err = match edited(edit) {
            Ok(spec) => Tokenizer::new(spec).unwrap_err().to_string(),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(want), "{err:?} should contain {want:?}");
    }
    let err = TokenizerSpec::from_hf_files(&fixture("hf/tokenizer.json"), Some("{\"eos_token\": \"<nope>\"}"), None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("`eos_token` `<nope>` is not in the vocabulary"), "{err}");
}

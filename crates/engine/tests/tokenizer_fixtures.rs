//! Tokenizer ids, decoding and chat renderings equal Hugging Face's on the fixture corpora:
//! the default model (byte-level BPE, `smollm` pre-tokenizer) and a tiny SentencePiece model.

#[path = "support/smollm2.rs"]
mod smollm2;

use plumb_checkpoint::GgufFile;
use plumb_engine::load;
use plumb_tokenizer::{ChatMessage, ChatTemplate, StreamDecoder};
use serde_json::Value;
use smollm2::{default_model, fixtures, ids};

fn read_json(rel: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join(rel)).unwrap()).unwrap()
}

#[test]
fn smollm2_ids_equal_hugging_face() {
    let file = default_model();
    let tok = load::tokenizer(&file).unwrap();
    let fx = read_json("tokenizer/smollm2.json");
    let cases = fx["cases"].as_array().unwrap();
    assert!(cases.len() >= 200);
    let mut failures = Vec::new();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want = ids(&case["ids"]);
        let got = tok.encode(text, false, true);
        if got != want {
            failures.push(format!("{text:?}: got {got:?}, want {want:?}"));
        }
        let want_split = ids(&case["ids_split_special"]);
        let got_split = tok.encode(text, false, false);
        if got_split != want_split {
            failures.push(format!("{text:?} (specials as text): got {got_split:?}, want {want_split:?}"));
        }
        let decoded = tok.decode(&want, false).unwrap();
        if decoded != case["decoded"].as_str().unwrap() {
            failures.push(format!("decode {want:?}: got {decoded:?}, want {:?}", case["decoded"]));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
    assert_eq!(tok.spec().bos_id, Some(fx["bos_id"].as_u64().unwrap() as u32));
    assert_eq!(tok.spec().eos_id, Some(fx["eos_id"].as_u64().unwrap() as u32));
    assert!(!tok.spec().add_bos, "the default model adds no BOS");
}

#[test]
fn sentencepiece_ids_equal_sentencepiece() {
    let file = GgufFile::open(fixtures().join("tokenizer/spm/tiny-spm.gguf")).unwrap();
    let tok = load::tokenizer(&file).unwrap();
    let fx = read_json("tokenizer/spm/spm.json");
    let cases = fx["cases"].as_array().unwrap();
    let mut failures = Vec::new();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want = ids(&case["ids"]);
        let got = tok.encode(text, false, false);
        if got != want {
            failures.push(format!("{text:?}: got {got:?}, want {want:?}"));
        }
        let decoded = tok.decode(&want, true).unwrap();
        if decoded != case["decoded"].as_str().unwrap() {
            failures.push(format!("decode {want:?}: got {decoded:?}, want {:?}", case["decoded"]));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
    // The GGUF asks for BOS: encode with special tokens adds it.
    assert_eq!(tok.encode("hi", true, false)[0], 1);
}

#[test]
fn streaming_decode_never_splits_a_character() {
    let file = default_model();
    let tok = load::tokenizer(&file).unwrap();
    let text = "naïve café — 東京 🚀👩‍👩‍👧 ok";
    let ids = tok.encode(text, false, false);
    let mut d = StreamDecoder::new(&tok, false);
    let mut out = String::new();
    for &id in &ids {
        let piece = d.push(id).unwrap();
        assert!(!piece.contains('\u{FFFD}'), "partial character emitted for {id}");
        out.push_str(&piece);
    }
    out.push_str(&d.finish());
    assert_eq!(out, text);
}

#[test]
fn chat_renderings_equal_transformers() {
    let fx = read_json("chat/templates.json");
    let cases = fx["cases"].as_array().unwrap();
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let t = ChatTemplate::new(
            case["template"].as_str().unwrap(),
            case["bos_token"].as_str().unwrap_or(""),
            case["eos_token"].as_str().unwrap_or(""),
        );
        let messages: Vec<ChatMessage> = serde_json::from_value(case["messages"].clone()).unwrap();
        let add = case["add_generation_prompt"].as_bool().unwrap();
        let got = t.and_then(|t| t.render(&messages, add));
        match (case.get("rendered").and_then(Value::as_str), got) {
            (Some(want), Ok(got)) if got == want => {}
            (None, Err(_)) => {}
            (want, got) => failures.push(format!("case {i} ({}): got {got:?}, want {want:?}", case["template_name"])),
        }
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

#[test]
fn default_model_chat_template_matches_its_fixture() {
    let file = default_model();
    let tok = load::tokenizer(&file).unwrap();
    let t = load::chat_template(&tok).unwrap().expect("the default model has a chat template");
    let got = t.render(&[ChatMessage::new("user", "What is the capital of France?")], true).unwrap();
    assert_eq!(
        got,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
         <|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn llama_cpp_converted_qwen3_tokenizer_equals_transformers() {
    // fixtures/qwen3/gguf: the tiny Qwen3 converted by llama.cpp's converter; its GGUF vocabulary,
    // merges and pre-tokenizer must give the ids transformers gives from tokenizer.json.
    let fx = read_json("qwen3/tokenizer_cases.json");
    let cases = fx["cases"].as_array().unwrap();
    assert!(!cases.is_empty());
    for name in ["model-f32.gguf", "model-q8_0.gguf"] {
        let file = GgufFile::open(fixtures().join("qwen3/gguf").join(name)).unwrap();
        let tok = load::tokenizer(&file).unwrap();
        for case in cases {
            let text = case["text"].as_str().unwrap();
            assert_eq!(tok.encode(text, false, true), ids(&case["ids"]), "{name}: {text:?}");
        }
    }
}

#[test]
fn llama_cpp_converted_qwen3_moe_tokenizer_equals_the_folders() {
    // fixtures/qwen3_moe/gguf: a synth Qwen3-MoE folder and its llama.cpp conversions; the GGUF's
    // tokenizer gives the ids the folder's tokenizer.json gives, on the whole tokenizer corpus.
    let dir = fixtures().join("qwen3_moe/gguf");
    let hf = plumb_checkpoint::HfCheckpoint::open(dir.join("hf")).unwrap();
    let folder = plumb_tokenizer::Tokenizer::new(load::hf_tokenizer_spec(&hf).unwrap()).unwrap();
    let fx = read_json("qwen3/tokenizer_cases.json");
    for name in ["model-f32.gguf", "model-q8_0.gguf"] {
        let tok = load::tokenizer(&GgufFile::open(dir.join(name)).unwrap()).unwrap();
        for case in fx["cases"].as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            assert_eq!(tok.encode(text, false, true), folder.encode(text, false, true), "{name}: {text:?}");
        }
    }
}

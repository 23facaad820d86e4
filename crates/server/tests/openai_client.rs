//! The official OpenAI Python client (pinned in tools/server-tests/requirements.txt) drives the real
//! server: chat, streamed chat, completions, log-probabilities, n > 1, stop sequences, seeded
//! sampling, prompt lists. Every answer must equal the engine's own answer to the same request,
//! token for token (texts and log-probability bits).

#[path = "support/python.rs"]
mod python;
#[path = "support/server.rs"]
mod server;

use plumb_sampling::SamplingParams;
use plumb_tokenizer::ChatMessage;
use serde_json::Value;
use server::*;

fn greedy() -> SamplingParams {
    SamplingParams::greedy()
}

fn seeded(temperature: f32, seed: u64) -> SamplingParams {
    SamplingParams { temperature, seed, ..SamplingParams::default() }
}

#[test]
fn openai_client_answers_equal_the_engine() {
    let bin = python::pyenv_bin();
    let s = TestServer::start(Opts::default());
    s.wait_ready();
    let script = python::root().join("tools/server-tests/openai_client.py");
    let out = std::process::Command::new(bin.join("python")).arg(&script).arg(&s.url).arg(MODEL).output().unwrap();
    assert!(out.status.success(), "the client script failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();

    let tok = tokenizer();
    let template = plumb_engine::load::chat_template(&tok).unwrap().unwrap();
    let messages = [
        ChatMessage::new("system", "You are a concise assistant."),
        ChatMessage::new("user", "What is the capital of France?"),
    ];
    let chat_prompt = tok.encode(&template.render(&messages, true).unwrap(), true, true);
    let text_prompt = |t: &str| tok.encode(t, true, false);

    // 1-2: chat, whole and streamed.
    let d = direct(&tok, chat_prompt.clone(), greedy(), 24, &[], false);
    let c = &got["chat"];
    assert_eq!(c["text"], d.text.as_str());
    assert_eq!(c["finish"], d.finish);
    assert_eq!(c["role"], "assistant");
    assert_eq!(c["object"], "chat.completion");
    let usage = [chat_prompt.len(), d.tokens.len(), chat_prompt.len() + d.tokens.len()];
    assert_eq!(c["usage"], serde_json::json!(usage));
    assert!(c["fingerprint"].as_str().unwrap().starts_with("plumb-"));
    let cs = &got["chat_stream"];
    assert_eq!(cs["text"], d.text.as_str());
    assert_eq!(cs["finish"], d.finish);
    assert_eq!(cs["usage"], serde_json::json!(usage));
    assert_eq!(cs["roles"], serde_json::json!(["assistant"]));
    assert!(cs["num_pieces"].as_u64().unwrap() > 1, "the answer was streamed in pieces");

    // 3: seeded sampling, twice.
    let d = direct(&tok, text_prompt("The capital of France is"), seeded(0.8, 42), 16, &[], false);
    assert_eq!(got["completion_seeded"]["text"], d.text.as_str());
    assert_eq!(got["completion_seeded_again"]["text"], d.text.as_str());
    assert_eq!(got["completion_seeded"]["object"], "text_completion");

    // 4: completion log-probabilities, compared as exact numbers.
    let d = direct(&tok, text_prompt("Once upon a time"), greedy(), 8, &[], true);
    let lp = &got["completion_logprobs"];
    assert_eq!(lp["text"], d.text.as_str());
    let logprobs: Vec<f64> = lp["token_logprobs"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(
        logprobs.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        d.logprobs.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    assert!(lp["num_top"].as_array().unwrap().iter().all(|n| n.as_u64().unwrap() >= 1));
    let joined: String = lp["tokens"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(joined, d.text);

    // 5: chat log-probabilities; the chosen token's bytes, in order, are the answer.
    let d = direct(&tok, chat_prompt.clone(), greedy(), 8, &[], true);
    let clp = &got["chat_logprobs"];
    assert_eq!(clp["text"], d.text.as_str());
    let logprobs: Vec<u64> =
        clp["logprobs"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap().to_bits()).collect();
    assert_eq!(logprobs, d.logprobs.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    let bytes: Vec<u8> = clp["bytes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|b| b.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u8))
        .collect();
    assert_eq!(String::from_utf8(bytes).unwrap(), d.text);
    for (top, chosen) in clp["top"].as_array().unwrap().iter().zip(&d.logprobs) {
        let top: Vec<f64> = top.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        assert_eq!(top.len(), 2);
        assert_eq!(top[0].to_bits(), chosen.to_bits(), "greedy picks the most likely token");
        assert!(top[0] >= top[1]);
    }

    // 6: n = 3, each answer with its own derived seed.
    let texts: Vec<String> = (0..3)
        .map(|i| direct(&tok, chat_prompt.clone(), seeded(1.0, plumb_server::choice_seed(7, i)), 12, &[], false).text)
        .collect();
    assert_eq!(got["chat_n"]["texts"], serde_json::json!(texts));
    assert!(texts[0] != texts[1] || texts[1] != texts[2], "n answers differ: {texts:?}");
    assert_eq!(got["chat_n"]["usage"][0], chat_prompt.len());

    // 7: stop sequences cut the text, streamed or not, and never leak.
    let d = direct(&tok, text_prompt("The capital of France is"), greedy(), 40, &[" the", "\n\n"], false);
    assert_eq!(got["completion_stop_stream"]["text"], d.text.as_str());
    assert_eq!(got["completion_stop_stream"]["finish"], d.finish);
    assert!(!d.text.contains(" the"));
    let d1 = direct(&tok, text_prompt("The capital of France is"), greedy(), 40, &[" the"], false);
    assert_eq!(got["completion_stop"]["text"], d1.text.as_str());
    assert_eq!(got["completion_stop"]["finish"], d1.finish);

    // 8: a list of prompts.
    let texts: Vec<String> = ["One, two,", "Red, green,"]
        .iter()
        .map(|p| direct(&tok, text_prompt(p), greedy(), 6, &[], false).text)
        .collect();
    assert_eq!(got["completion_list"]["texts"], serde_json::json!(texts));
    assert_eq!(got["models"], serde_json::json!([MODEL]));
}

//! Arbitrary JSON bodies (random shapes built from the routes' own field names and random values)
//! never produce a 500 or a panic: every answer is 200 or a 4xx in OpenAI's error shape.

#[path = "support/server.rs"]
mod server;

use proptest::prelude::*;
use serde_json::{Value, json};
use server::*;

const FIELDS: &[&str] = &[
    "model",
    "messages",
    "prompt",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "n",
    "logprobs",
    "top_logprobs",
    "echo",
    "stream",
    "stream_options",
    "logit_bias",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "user",
    "role",
    "content",
    "type",
    "text",
    "best_of",
    "tools",
    "response_format",
    "include_usage",
    "suffix",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-3i64..600).prop_map(Value::from),
        any::<f64>().prop_filter("JSON numbers are finite", |f| f.is_finite()).prop_map(Value::from),
        (-3.0f64..3.0).prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
        Just(json!(MODEL)),
        Just(json!("user")),
        Just(json!("text")),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::vec((prop::sample::select(FIELDS), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    })
}

/// A body that is mostly well-formed: the model and a plausible skeleton, then random fields.
fn body() -> impl Strategy<Value = Value> {
    (prop::collection::vec((prop::sample::select(FIELDS), value()), 0..8), any::<bool>(), any::<bool>()).prop_map(
        |(fields, with_model, chat)| {
            let mut b = if chat {
                json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
            } else {
                json!({"prompt": "Hi", "max_tokens": 2})
            };
            if with_model {
                b["model"] = json!(MODEL);
            }
            for (k, v) in fields {
                b[k] = v;
            }
            b
        },
    )
}

#[test]
fn arbitrary_json_never_gets_a_500() {
    let s = TestServer::start(Opts::default());
    s.wait_ready();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let client = reqwest::Client::new();
    let ok = std::cell::Cell::new(0usize);
    // A fixed seed: the same 600 bodies every run (how many reach the engine is then fixed too).
    let config = ProptestConfig {
        cases: 300,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(20_261_130),
        ..ProptestConfig::default()
    };
    proptest!(config, |(b in body(), chat in any::<bool>(), raw in value())| {
        let path = if chat { "/v1/chat/completions" } else { "/v1/completions" };
        for payload in [&b, &raw] {
            let (status, text) = rt.block_on(async {
                let r = client.post(format!("{}{path}", s.url)).json(payload).send().await.unwrap();
                (r.status().as_u16(), r.text().await.unwrap())
            });
            prop_assert!(status == 200 || (400..500).contains(&status), "{status} for {payload}: {text}");
            ok.set(ok.get() + usize::from(status == 200));
            if status != 200 {
                let v: Value = serde_json::from_str(&text).unwrap();
                prop_assert!(v["error"]["message"].is_string() && v["error"]["type"].is_string(), "{text}");
            }
        }
    });
    assert!(ok.get() >= 5, "only {} bodies reached the engine: the generator is too far off", ok.get());
    eprintln!("{} of 600 bodies were answered 200", ok.get());
    // Still serving.
    let r = rt.block_on(client.get(format!("{}/health", s.url)).send()).unwrap();
    assert_eq!(r.status(), 200);
}

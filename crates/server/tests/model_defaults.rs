//! A model's own sampling defaults (`generation_config.json`) fill the parameters a request
//! leaves unset, and a parameter the request sets wins over them.

#[path = "support/server.rs"]
mod server;

use plumb_sampling::SamplingDefaults;
use serde_json::{Value, json};
use server::*;

async fn completion(url: &str, extra: Value) -> String {
    let mut body = json!({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 12, "seed": 7});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let r = reqwest::Client::new().post(format!("{url}/v1/completions")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    v["choices"][0]["text"].as_str().unwrap().to_string()
}

/// The texts of: no temperature, temperature 0, temperature 1.5, on a server with `sampling`.
fn answers(sampling: SamplingDefaults) -> [String; 3] {
    let s = TestServer::start(Opts { sampling, ..Opts::default() });
    s.wait_ready();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let out = rt.block_on(async {
        [
            completion(&s.url, json!({})).await,
            completion(&s.url, json!({"temperature": 0})).await,
            completion(&s.url, json!({"temperature": 1.5})).await,
        ]
    });
    s.shutdown().unwrap();
    out
}

#[test]
fn the_models_defaults_fill_unset_parameters() {
    // A greedy model default (`do_sample: false`): no temperature in the request = greedy.
    let greedy = answers(SamplingDefaults { temperature: Some(0.0), ..Default::default() });
    assert_eq!(greedy[0], greedy[1]);
    // The request's own temperature still wins.
    assert_ne!(greedy[2], greedy[1], "temperature 1.5 sampled the greedy answer");
    // Without model defaults, OpenAI's temperature 1 applies: the same seed samples another text.
    let plain = answers(SamplingDefaults::default());
    assert_eq!(plain[1], greedy[1]);
    assert_ne!(plain[0], plain[1], "temperature 1 with seed 7 sampled the greedy answer");
}

//! Every error status the server answers with, against the real server, with its exact body shape
//! (`{"error": {"message", "type", "param", "code"}}`): 400, 401, 404, 405, 413, 429, 500, 503 —
//! and the server keeps serving after each.

#[path = "support/server.rs"]
mod server;

use serde_json::{Value, json};
use server::*;
use std::time::Duration;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

async fn post(url: &str, path: &str, body: &str, key: Option<&str>) -> (u16, Value) {
    let mut req = reqwest::Client::new().post(format!("{url}{path}")).header("content-type", "application/json");
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let r = req.body(body.to_string()).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Asserts OpenAI's error shape exactly: four keys, with the type, param and code given.
fn assert_error(body: &Value, kind: &str, param: Option<&str>, code: Option<&str>) {
    let e = body["error"].as_object().unwrap_or_else(|| panic!("not an error body: {body}"));
    let mut keys: Vec<&str> = e.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["code", "message", "param", "type"], "{body}");
    assert!(body.as_object().unwrap().len() == 1, "{body}");
    assert!(!e["message"].as_str().unwrap().is_empty());
    assert_eq!(e["type"], kind, "{body}");
    assert_eq!(e["param"], param.map_or(Value::Null, |p| json!(p)), "{body}");
    assert_eq!(e["code"], code.map_or(Value::Null, |c| json!(c)), "{body}");
}

fn chat(extra: Value) -> String {
    let mut body =
        json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body.to_string()
}

#[test]
fn bad_requests_are_400_and_name_the_field() {
    let s = TestServer::start(Opts::default());
    s.wait_ready();
    rt().block_on(async {
        let url = &s.url;
        let (st, b) = post(url, "/v1/chat/completions", "{\"model\": ", None).await;
        assert_eq!(st, 400);
        assert_error(&b, "invalid_request_error", None, Some("malformed_json"));
        let (st, b) = post(url, "/v1/chat/completions", "[1, 2]", None).await;
        assert_eq!(st, 400);
        assert_error(&b, "invalid_request_error", None, None);
        let (st, b) = post(url, "/v1/chat/completions", &chat(json!({"temperature": 3.5})), None).await;
        assert_eq!(st, 400);
        assert_error(&b, "invalid_request_error", Some("temperature"), None);
        let (st, b) = post(url, "/v1/chat/completions", &chat(json!({"top_p": "high"})), None).await;
        assert_eq!(st, 400);
        assert_error(&b, "invalid_request_error", Some("top_p"), None);
        let (st, b) = post(url, "/v1/chat/completions", &json!({"model": MODEL}).to_string(), None).await;
        assert_eq!(st, 400);
        assert!(b["error"]["message"].as_str().unwrap().contains("messages"), "{b}");
        let (st, b) = post(url, "/v1/chat/completions", &chat(json!({"logit_bias": {"999999": 5}})), None).await;
        assert_eq!(st, 400);
        assert_error(&b, "invalid_request_error", Some("logit_bias"), None);
        let (st, b) = post(url, "/v1/chat/completions", &chat(json!({"n": 0})), None).await;
        assert_eq!(st, 400);
        assert_error(&b, "invalid_request_error", Some("n"), None);
        for (field, value) in [
            ("tools", json!([{"type": "function", "function": {"name": "f"}}])),
            ("tool_choice", json!("auto")),
            ("response_format", json!({"type": "json_object"})),
            ("audio", json!({"voice": "alloy"})),
        ] {
            let (st, b) = post(url, "/v1/chat/completions", &chat(json!({field: value})), None).await;
            assert_eq!(st, 400, "{field}");
            assert_error(&b, "invalid_request_error", Some(field), Some("unsupported_parameter"));
        }
        let image = json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}]);
        let (st, b) = post(url, "/v1/chat/completions", &chat(json!({"messages": image})), None).await;
        assert_eq!(st, 400);
        assert_error(&b, "invalid_request_error", Some("messages[0].content[0].type"), Some("unsupported_parameter"));
        // Over the context: the numbers are in the message.
        let (st, b) = post(url, "/v1/chat/completions", &chat(json!({"max_tokens": CTX})), None).await;
        assert_eq!(st, 400);
        assert_error(&b, "invalid_request_error", Some("messages"), Some("context_length_exceeded"));
        let msg = b["error"]["message"].as_str().unwrap();
        assert!(msg.contains(&CTX.to_string()) && msg.contains(&format!("asks for {CTX} more")), "{msg}");
        let long = "word ".repeat(CTX);
        let body = json!({"model": MODEL, "prompt": long}).to_string();
        let (st, b) = post(url, "/v1/completions", &body, None).await;
        assert_eq!(st, 400);
        assert_error(&b, "invalid_request_error", Some("messages"), Some("context_length_exceeded"));
        // Unknown fields are ignored, as OpenAI does; the server still answers.
        let (st, b) = post(url, "/v1/chat/completions", &chat(json!({"frobnicate": true})), None).await;
        assert_eq!(st, 200, "{b}");
        assert_eq!(b["object"], "chat.completion");
    });
}

#[test]
fn unknown_model_route_and_method_are_404_and_405() {
    let s = TestServer::start(Opts::default());
    s.wait_ready();
    rt().block_on(async {
        let (st, b) = post(&s.url, "/v1/chat/completions", &chat(json!({"model": "gpt-9"})), None).await;
        assert_eq!(st, 404);
        assert_error(&b, "not_found_error", Some("model"), Some("model_not_found"));
        let r = reqwest::get(format!("{}/v1/nothing", s.url)).await.unwrap();
        assert_eq!(r.status(), 404);
        assert_error(&r.json().await.unwrap(), "not_found_error", None, None);
        let r = reqwest::get(format!("{}/v1/chat/completions", s.url)).await.unwrap();
        assert_eq!(r.status(), 405);
        assert_error(&r.json().await.unwrap(), "invalid_request_error", None, None);
    });
}

#[test]
fn api_key_is_required_when_set() {
    let s = TestServer::start(Opts { api_key: Some("s3cret".into()), ..Opts::default() });
    s.wait_ready();
    rt().block_on(async {
        for key in [None, Some("wrong"), Some("s3cre"), Some("s3cret0")] {
            let (st, b) = post(&s.url, "/v1/chat/completions", &chat(json!({})), key).await;
            assert_eq!(st, 401, "{key:?}");
            assert_error(&b, "authentication_error", None, Some("invalid_api_key"));
        }
        let r = reqwest::get(format!("{}/v1/models", s.url)).await.unwrap();
        assert_eq!(r.status(), 401);
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
        let (st, _) = post(&s.url, "/v1/chat/completions", &chat(json!({})), Some("s3cret")).await;
        assert_eq!(st, 200);
        // Health and metrics stay open for probes.
        assert_eq!(reqwest::get(format!("{}/health", s.url)).await.unwrap().status(), 200);
    });
}

#[test]
fn oversize_body_is_413() {
    let s = TestServer::start(Opts { max_body_bytes: 4096, ..Opts::default() });
    s.wait_ready();
    rt().block_on(async {
        let big = chat(json!({"user": "x".repeat(8000)}));
        let (st, b) = post(&s.url, "/v1/chat/completions", &big, None).await;
        assert_eq!(st, 413);
        assert_error(&b, "invalid_request_error", None, Some("request_too_large"));
        // Without a content length (chunked), the limit still holds.
        let stream = futures_util::stream::iter((0..10).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1000])));
        let r = reqwest::Client::new()
            .post(format!("{}/v1/chat/completions", s.url))
            .body(reqwest::Body::wrap_stream(stream))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 413);
        let (st, _) = post(&s.url, "/v1/chat/completions", &chat(json!({})), None).await;
        assert_eq!(st, 200);
    });
}

#[test]
fn a_full_queue_is_429_and_frees_up() {
    let s = TestServer::start(Opts { max_queue: 1, max_lanes: 1, ..Opts::default() });
    s.wait_ready();
    rt().block_on(async {
        let body = json!({"model": MODEL, "prompt": "Once", "max_tokens": 200, "temperature": 0, "stream": true});
        let hold = reqwest::Client::new().post(format!("{}/v1/completions", s.url)).json(&body).send().await.unwrap();
        assert_eq!(hold.status(), 200);
        let (st, b) = post(&s.url, "/v1/chat/completions", &chat(json!({})), None).await;
        assert_eq!(st, 429);
        assert_error(&b, "rate_limit_error", None, Some("queue_full"));
        drop(hold); // the client goes away: its request is cancelled and its slot freed
        let mut ok = false;
        for _ in 0..100 {
            let (st, _) = post(&s.url, "/v1/chat/completions", &chat(json!({})), None).await;
            if st == 200 {
                ok = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(ok, "the slot was never freed");
    });
}

#[test]
fn an_engine_fault_is_500_and_the_server_keeps_serving() {
    let s = TestServer::start(Opts { faulty: true, ..Opts::default() });
    s.wait_ready();
    rt().block_on(async {
        let body = json!({"model": MODEL, "prompt": [1, 2, POISON], "max_tokens": 3}).to_string();
        let (st, b) = post(&s.url, "/v1/completions", &body, None).await;
        assert_eq!(st, 500);
        assert_error(&b, "server_error", None, None);
        assert!(b["error"]["message"].as_str().unwrap().contains("injected fault"), "{b}");
        let (st, b) = post(&s.url, "/v1/chat/completions", &chat(json!({})), None).await;
        assert_eq!(st, 200, "{b}");
        // Streamed: the failure arrives as an error event, then [DONE].
        let body = json!({"model": MODEL, "prompt": [POISON], "max_tokens": 3, "stream": true});
        let r = reqwest::Client::new().post(format!("{}/v1/completions", s.url)).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        assert!(text.contains("\"server_error\"") && text.trim_end().ends_with("data: [DONE]"), "{text}");
    });
}

#[test]
fn loading_is_503_then_ready() {
    let s = TestServer::start(Opts { load_delay: Some(Duration::from_millis(1500)), ..Opts::default() });
    rt().block_on(async {
        let r = reqwest::get(format!("{}/health", s.url)).await.unwrap();
        assert_eq!(r.status(), 503);
        assert_eq!(r.json::<Value>().await.unwrap()["status"], "loading");
        let (st, b) = post(&s.url, "/v1/chat/completions", &chat(json!({})), None).await;
        assert_eq!(st, 503);
        assert_error(&b, "unavailable_error", None, None);
    });
    s.wait_ready();
    rt().block_on(async {
        let (st, _) = post(&s.url, "/v1/chat/completions", &chat(json!({})), None).await;
        assert_eq!(st, 200);
    });
}

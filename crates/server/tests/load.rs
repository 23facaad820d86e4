//! A bounded load test on loopback: 64 concurrent streaming clients, several rounds, some
//! disconnecting midway. Zero errors; every completed answer equals the same request made alone;
//! afterwards no lane, block or in-flight request is left (read through /metrics).

#[path = "support/server.rs"]
mod server;

use futures_util::StreamExt;
use serde_json::{Value, json};
use server::*;
use std::time::Duration;

const CLIENTS: usize = 64;
const ROUNDS: usize = 3;

/// Eight different requests: both routes, greedy and seeded, different lengths, stops, n.
fn spec(i: usize) -> (&'static str, Value) {
    let chat = |content: &str, extra: Value| {
        let mut b = json!({"model": MODEL, "messages": [{"role": "user", "content": content}], "stream": true});
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        ("/v1/chat/completions", b)
    };
    let completion = |prompt: &str, extra: Value| {
        let mut b = json!({"model": MODEL, "prompt": prompt, "stream": true});
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        ("/v1/completions", b)
    };
    match i % 8 {
        0 => chat("What is the capital of France?", json!({"max_tokens": 12, "temperature": 0})),
        1 => chat("Name three colors.", json!({"max_tokens": 16, "temperature": 0.9, "seed": 11})),
        2 => completion("Once upon a time", json!({"max_tokens": 10, "temperature": 0})),
        3 => completion(
            "The capital of France is",
            json!({"max_tokens": 14, "temperature": 0.7, "seed": 5, "stop": [" the"]}),
        ),
        4 => chat("Write a haiku about rain.", json!({"max_tokens": 8, "temperature": 1.0, "seed": 3, "top_k": 40})),
        5 => completion("1, 2, 3,", json!({"max_tokens": 12, "temperature": 0, "n": 2})),
        6 => chat("Hello!", json!({"max_tokens": 6, "temperature": 0.5, "seed": 99, "top_p": 0.9})),
        _ => completion("def add(a, b):", json!({"max_tokens": 9, "temperature": 0, "frequency_penalty": 0.5})),
    }
}

/// One streamed answer: each choice's text and finish reason, or where it stopped reading.
#[derive(Debug, PartialEq)]
struct Answer {
    texts: Vec<String>,
    finishes: Vec<Option<String>>,
    done: bool,
}

/// Streams a request; with `leave_after`, drops the connection after that many events.
async fn stream(url: &str, path: &str, body: &Value, leave_after: Option<usize>) -> Result<Answer, String> {
    let r = reqwest::Client::new().post(format!("{url}{path}")).json(body).send().await.map_err(|e| e.to_string())?;
    if r.status() != 200 {
        return Err(format!("status {}: {}", r.status(), r.text().await.unwrap_or_default()));
    }
    let mut a = Answer { texts: vec![String::new(); 2], finishes: vec![None; 2], done: false };
    let (mut buf, mut events) = (String::new(), 0);
    let mut bytes = r.bytes_stream();
    while let Some(chunk) = bytes.next().await {
        buf.push_str(std::str::from_utf8(&chunk.map_err(|e| e.to_string())?).unwrap());
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            let data = event.trim().strip_prefix("data: ").ok_or(format!("not an SSE data line: {event}"))?;
            events += 1;
            if data == "[DONE]" {
                a.done = true;
                return Ok(a);
            }
            let v: Value = serde_json::from_str(data).map_err(|e| format!("{e}: {data}"))?;
            if v.get("error").is_some() {
                return Err(format!("error event: {v}"));
            }
            for c in v["choices"].as_array().unwrap() {
                let i = c["index"].as_u64().unwrap() as usize;
                let piece = c.get("text").or_else(|| c["delta"].get("content")).and_then(Value::as_str).unwrap_or("");
                a.texts[i].push_str(piece);
                if let Some(f) = c["finish_reason"].as_str() {
                    a.finishes[i] = Some(f.into());
                }
            }
            if leave_after.is_some_and(|n| events >= n) {
                return Ok(a);
            }
        }
    }
    Err("the stream ended without [DONE]".into())
}

async fn metrics(url: &str) -> std::collections::HashMap<String, f64> {
    let text = reqwest::get(format!("{url}/metrics")).await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' ').map(|(k, v)| (k.to_string(), v.parse().unwrap_or(f64::NAN))))
        .collect()
}

#[test]
fn sixty_four_streaming_clients_leak_nothing_and_match_solo() {
    let s = TestServer::start(Opts { max_lanes: 16, kv_tokens: 16 * CTX, ..Opts::default() });
    s.wait_ready();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let url = s.url.clone();
        let mut solo = Vec::new();
        for i in 0..8 {
            let (path, body) = spec(i);
            solo.push(stream(&url, path, &body, None).await.unwrap());
        }
        let mut left = 0;
        for round in 0..ROUNDS {
            let tasks: Vec<_> = (0..CLIENTS)
                .map(|c| {
                    let url = url.clone();
                    // Every fifth client (a different set each round) leaves after two events.
                    let leave = ((c + round) % 5 == 0).then_some(2);
                    tokio::spawn(async move {
                        let (path, body) = spec(c);
                        (c, leave, stream(&url, path, &body, leave).await)
                    })
                })
                .collect();
            for t in tasks {
                let (c, leave, got) = t.await.unwrap();
                let got = got.unwrap_or_else(|e| panic!("round {round} client {c}: {e}"));
                match leave {
                    Some(_) => left += 1,
                    None => {
                        assert_eq!(got, solo[c % 8], "round {round} client {c} differs from the same request alone")
                    }
                }
            }
        }
        // Everything drains: no lane, block or request is left behind.
        let mut m = metrics(&url).await;
        for _ in 0..100 {
            if m["plumb_requests_in_flight"] == 0.0 && m["plumb_kv_blocks_in_use"] == 0.0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            m = metrics(&url).await;
        }
        for gauge in ["plumb_requests_in_flight", "plumb_lanes_busy", "plumb_queue_depth", "plumb_kv_blocks_in_use"] {
            assert_eq!(m[gauge], 0.0, "{gauge} after the load");
        }
        let completed = 8 + ROUNDS * CLIENTS - left;
        let finished = m["plumb_requests_total{outcome=\"stop\"}"] + m["plumb_requests_total{outcome=\"length\"}"];
        let cancelled = m["plumb_requests_total{outcome=\"cancelled\"}"];
        assert_eq!(m["plumb_requests_total{outcome=\"failed\"}"], 0.0);
        assert_eq!(m["plumb_requests_total{outcome=\"rejected\"}"], 0.0);
        // A client that leaves may still have been sent its whole answer already.
        assert!(finished >= completed as f64 && finished + cancelled == (8 + ROUNDS * CLIENTS) as f64, "{m:?}");
        assert!(m["plumb_prefix_cache_hit_rate"] > 0.0, "repeated prompts hit the prefix cache");
    });
}

#[test]
fn a_client_that_hangs_up_on_a_whole_answer_frees_its_lane() {
    let s = TestServer::start(Opts::default());
    s.wait_ready();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let body = json!({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 400, "temperature": 0});
        let url = format!("{}/v1/completions", s.url);
        let request = tokio::spawn(async move { reqwest::Client::new().post(url).json(&body).send().await });
        // The client hangs up once the answer has begun: a fixed timeout would race the device
        // (an H200 writes all 400 tokens in half a second).
        let mut m = metrics(&s.url).await;
        for _ in 0..2000 {
            if m["plumb_generated_tokens_total"] > 0.0 || request.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            m = metrics(&s.url).await;
        }
        assert!(!request.is_finished(), "the answer was whole before the client could hang up: {m:?}");
        assert!(m["plumb_generated_tokens_total"] > 0.0, "the answer never began: {m:?}");
        request.abort();
        assert!(request.await.unwrap_err().is_cancelled(), "the client hung up before the answer was whole");
        let mut m = metrics(&s.url).await;
        for _ in 0..100 {
            if m["plumb_requests_in_flight"] == 0.0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            m = metrics(&s.url).await;
        }
        assert_eq!(m["plumb_requests_in_flight"], 0.0);
        assert_eq!(m["plumb_kv_blocks_in_use"], 0.0);
        assert_eq!(m["plumb_requests_total{outcome=\"cancelled\"}"], 1.0);
        assert!(m["plumb_generated_tokens_total"] < 400.0, "{m:?}");
    });
}

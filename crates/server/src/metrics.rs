//! `/metrics`: the server's counters and latency histograms, plus the engine's own counters
//! (lanes, queue, KV blocks, prefix cache), in Prometheus' text format. Counters only grow;
//! gauges are read at scrape time from the engine's last published step.

use plumb_engine::EngineStats;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How a generation request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every choice ended at a stop token or stop sequence.
    Stop,
    /// Some choice ran into max_tokens or the context.
    Length,
    /// The client went away first.
    Cancelled,
    /// The engine failed.
    Failed,
    /// Refused before it started (4xx).
    Rejected,
}

impl Outcome {
    const ALL: [Outcome; 5] = [Outcome::Stop, Outcome::Length, Outcome::Cancelled, Outcome::Failed, Outcome::Rejected];

    fn label(self) -> &'static str {
        match self {
            Outcome::Stop => "stop",
            Outcome::Length => "length",
            Outcome::Cancelled => "cancelled",
            Outcome::Failed => "failed",
            Outcome::Rejected => "rejected",
        }
    }
}

/// A cumulative histogram with fixed bucket bounds (seconds).
#[derive(Debug)]
struct Histogram {
    bounds: &'static [f64],
    inner: Mutex<(Vec<u64>, f64, u64)>,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram { bounds, inner: Mutex::new((vec![0; bounds.len()], 0.0, 0)) }
    }

    fn observe(&self, secs: f64) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for (count, &le) in g.0.iter_mut().zip(self.bounds) {
            if secs <= le {
                *count += 1;
            }
        }
        g.1 += secs;
        g.2 += 1;
    }

    fn render(&self, name: &str, help: &str, out: &mut String) {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (count, le) in g.0.iter().zip(self.bounds) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}\n{name}_sum {}\n{name}_count {}", g.2, g.1, g.2);
    }
}

const TTFT_BOUNDS: &[f64] = &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
const ITL_BOUNDS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// Everything `/metrics` reports that the server itself counts.
#[derive(Debug)]
pub struct Metrics {
    outcomes: [AtomicU64; 5],
    prompt_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    ttft: Histogram,
    itl: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            outcomes: Default::default(),
            prompt_tokens: AtomicU64::new(0),
            generated_tokens: AtomicU64::new(0),
            ttft: Histogram::new(TTFT_BOUNDS),
            itl: Histogram::new(ITL_BOUNDS),
        }
    }
}

impl Metrics {
    pub fn finished(&self, outcome: Outcome) {
        let i = Outcome::ALL.iter().position(|&o| o == outcome).expect("every outcome is listed");
        self.outcomes[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn prompt_tokens(&self, n: usize) {
        self.prompt_tokens.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn token(&self, since_previous: Option<Duration>, since_start: Duration) {
        self.generated_tokens.fetch_add(1, Ordering::Relaxed);
        match since_previous {
            None => self.ttft.observe(since_start.as_secs_f64()),
            Some(d) => self.itl.observe(d.as_secs_f64()),
        }
    }

    /// The Prometheus text exposition; `engine` is None while the model loads.
    pub fn render(&self, engine: Option<&EngineStats>) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP plumb_requests_total Generation requests by outcome.\n# TYPE plumb_requests_total counter"
        );
        for (o, n) in Outcome::ALL.iter().zip(&self.outcomes) {
            let _ = writeln!(out, "plumb_requests_total{{outcome=\"{}\"}} {}", o.label(), n.load(Ordering::Relaxed));
        }
        counter(
            &mut out,
            "plumb_prompt_tokens_total",
            "Prompt tokens of accepted requests.",
            self.prompt_tokens.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "plumb_generated_tokens_total",
            "Tokens generated.",
            self.generated_tokens.load(Ordering::Relaxed),
        );
        self.ttft.render("plumb_time_to_first_token_seconds", "From arrival to a choice's first token.", &mut out);
        self.itl.render("plumb_inter_token_latency_seconds", "Between a choice's consecutive tokens.", &mut out);
        let ready = engine.is_some();
        gauge(&mut out, "plumb_model_ready", "1 once the model is loaded.", ready as u64 as f64);
        let Some(e) = engine else {
            return out;
        };
        let s = &e.scheduler;
        gauge(&mut out, "plumb_requests_in_flight", "Engine requests running or waiting.", e.requests_in_flight as f64);
        gauge(&mut out, "plumb_queue_depth", "Requests waiting for a lane.", s.num_waiting as f64);
        gauge(&mut out, "plumb_lanes_busy", "Requests holding a lane.", s.num_running as f64);
        gauge(&mut out, "plumb_kv_blocks_total", "KV-cache blocks in the pool.", s.num_blocks as f64);
        gauge(&mut out, "plumb_kv_blocks_in_use", "KV-cache blocks held by requests.", s.num_blocks_in_use as f64);
        gauge(
            &mut out,
            "plumb_kv_blocks_cached",
            "KV-cache blocks holding a prefix-cache entry.",
            s.num_blocks_cached as f64,
        );
        counter(
            &mut out,
            "plumb_prefix_cache_queried_tokens_total",
            "Prompt tokens looked up in the prefix cache.",
            s.prefix_cache_queried_tokens,
        );
        counter(
            &mut out,
            "plumb_prefix_cache_hit_tokens_total",
            "Of those, tokens found cached.",
            s.prefix_cache_hit_tokens,
        );
        let rate = if s.prefix_cache_queried_tokens == 0 {
            0.0
        } else {
            s.prefix_cache_hit_tokens as f64 / s.prefix_cache_queried_tokens as f64
        };
        gauge(&mut out, "plumb_prefix_cache_hit_rate", "Hit tokens / queried tokens since start.", rate);
        counter(&mut out, "plumb_preemptions_total", "Requests preempted (recomputed later).", s.num_preemptions_total);
        counter(&mut out, "plumb_engine_steps_total", "Engine steps.", e.steps_total);
        let d = &e.drafts;
        counter(&mut out, "plumb_draft_verify_steps_total", "Lane-steps that verified drafts.", d.num_verify_steps);
        counter(&mut out, "plumb_draft_tokens_total", "Draft tokens verified.", d.num_draft_tokens);
        counter(&mut out, "plumb_draft_accepted_tokens_total", "Draft tokens accepted.", d.num_accepted_tokens);
        gauge(
            &mut out,
            "plumb_draft_acceptance_rate",
            "Accepted / verified draft tokens since start.",
            d.acceptance_rate(),
        );
        gauge(
            &mut out,
            "plumb_draft_tokens_per_verify_step",
            "Tokens a lane keeps per verify step (accepted drafts + 1) since start.",
            d.tokens_per_verify_step(),
        );
        out
    }
}

fn counter(out: &mut String, name: &str, help: &str, v: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
}

fn gauge(out: &mut String, name: &str, help: &str, v: f64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_counts_add_up() {
        let m = Metrics::default();
        m.token(None, Duration::from_millis(30));
        m.token(Some(Duration::from_millis(3)), Duration::from_millis(33));
        m.finished(Outcome::Stop);
        let text = m.render(None);
        assert!(text.contains("plumb_time_to_first_token_seconds_bucket{le=\"0.025\"} 0"), "{text}");
        assert!(text.contains("plumb_time_to_first_token_seconds_bucket{le=\"0.05\"} 1"));
        assert!(text.contains("plumb_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1"));
        assert!(text.contains("plumb_inter_token_latency_seconds_count 1"));
        assert!(text.contains("plumb_generated_tokens_total 2"));
        assert!(text.contains("plumb_requests_total{outcome=\"stop\"} 1"));
        assert!(text.contains("plumb_model_ready 0"));
    }
}

//! A small SVG line chart for benchmark receipts: aggregate tokens/s and inter-token latency
//! against concurrency, plumb beside a peer. No dependencies; the figures come from receipts.

use serde_json::Value;
use std::fmt::Write;

/// (concurrency, value) points of `levels[*][key][sub]`.
fn series(figures: &Value, key: &str, sub: Option<&str>) -> Vec<(f64, f64)> {
    figures["levels"]
        .as_array()
        .map(|levels| {
            levels
                .iter()
                .filter_map(|l| {
                    let v = match sub {
                        Some(s) => l[key][s].as_f64(),
                        None => l[key].as_f64(),
                    };
                    Some((l["concurrency"].as_f64()?, v?))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A named, coloured line of (x, y) points.
type Line<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

/// One panel: axes, ticks and a polyline per series, at (x0, y0) of size w × h.
fn panel(svg: &mut String, x0: f64, title: &str, lines: &[Line<'_>]) {
    let (y0, w, h) = (40.0, 380.0, 260.0);
    let all: Vec<(f64, f64)> = lines.iter().flat_map(|l| l.2.iter().copied()).collect();
    let xmax = all.iter().map(|p| p.0).fold(1.0, f64::max);
    let ymax = all.iter().map(|p| p.1).fold(1e-9, f64::max) * 1.1;
    let px = |x: f64| x0 + 50.0 + (x / xmax) * (w - 60.0);
    let py = |y: f64| y0 + h - 30.0 - (y / ymax) * (h - 50.0);
    let _ =
        writeln!(svg, r#"<text x="{}" y="{}" font-size="14" font-weight="bold">{title}</text>"#, x0 + 50.0, y0 - 10.0);
    let _ = writeln!(svg, r##"<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#333"/>"##, px(0.0), py(0.0), py(ymax));
    let _ = writeln!(svg, r##"<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="#333"/>"##, px(0.0), py(0.0), px(xmax));
    for i in 0..=4 {
        let y = ymax * i as f64 / 4.0;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" font-size="10" text-anchor="end">{y:.0}</text>"#,
            px(0.0) - 4.0,
            py(y) + 3.0
        );
    }
    let mut xs: Vec<f64> = all.iter().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    for x in xs {
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" font-size="10" text-anchor="middle">{x}</text>"#,
            px(x),
            py(0.0) + 14.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" font-size="11" text-anchor="middle">concurrent requests</text>"#,
        px(xmax / 2.0),
        py(0.0) + 28.0
    );
    for (i, (name, color, pts)) in lines.iter().enumerate() {
        let points: Vec<String> = pts.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
        let _ =
            writeln!(svg, r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#, points.join(" "));
        for &(x, y) in pts {
            let _ = writeln!(svg, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#, px(x), py(y));
        }
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" font-size="11" fill="{color}">{name}</text>"#,
            px(0.0) + 10.0,
            y0 + 14.0 * i as f64 + 4.0
        );
    }
}

/// Throughput and p50 inter-token latency against concurrency, for plumb and an optional peer
/// (`name`, its receipt's figures). Throughput is every generated token over the wall time, or,
/// when the peer reports only decoding (llama-batched-bench, whose prompts prefill apart), the
/// decode rate of both engines; a line without latencies is left out of that panel.
pub fn concurrency_svg(plumb: &Value, peer: Option<(&str, &Value)>) -> String {
    let mut svg =
        String::from(r#"<svg xmlns="http://www.w3.org/2000/svg" width="820" height="320" font-family="sans-serif">"#);
    svg.push('\n');
    let decode_only = peer.is_some_and(|(_, p)| series(p, "aggregate_tokens_per_s", None).is_empty());
    let (key, title) = if decode_only {
        ("aggregate_decode_tokens_per_s", "decode tokens/s")
    } else {
        ("aggregate_tokens_per_s", "aggregate tokens/s")
    };
    let mut tput = vec![("plumb", "#1f77b4", series(plumb, key, None))];
    let mut itl = vec![("plumb", "#1f77b4", series(plumb, "itl_ms", Some("p50")))];
    if let Some((name, peer)) = peer {
        tput.push((name, "#d62728", series(peer, key, None)));
        let lat = series(peer, "itl_ms", Some("p50"));
        if !lat.is_empty() {
            itl.push((name, "#d62728", lat));
        }
    }
    panel(&mut svg, 0.0, title, &tput);
    panel(&mut svg, 410.0, "inter-token latency p50, ms", &itl);
    svg.push_str("</svg>\n");
    svg
}

/// The name a peer receipt's engine goes by in a plot.
pub fn peer_name(receipt: &Value) -> &'static str {
    if receipt["peer"].as_str().is_some_and(|p| p.contains("llama-server")) { "llama-server" } else { "llama.cpp" }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_plot_draws_every_point_of_both_engines() {
        let plumb = serde_json::json!({"levels": [
            {"concurrency": 1, "aggregate_tokens_per_s": 200.0, "itl_ms": {"p50": 5.0}},
            {"concurrency": 8, "aggregate_tokens_per_s": 500.0, "itl_ms": {"p50": 16.0}}]});
        let peer = serde_json::json!({"levels": [{"concurrency": 8, "aggregate_tokens_per_s": 170.0, "itl_ms": {"p50": 40.0}}]});
        let svg = super::concurrency_svg(&plumb, Some(("llama-server", &peer)));
        assert_eq!(svg.matches("<circle").count(), 6);
        assert!(svg.contains("llama-server") && svg.contains("aggregate tokens/s") && svg.ends_with("</svg>\n"));
    }

    #[test]
    fn a_decode_only_peer_is_drawn_against_plumbs_decode_rate() {
        let plumb = serde_json::json!({"levels": [
            {"concurrency": 1, "aggregate_tokens_per_s": 120.0, "aggregate_decode_tokens_per_s": 130.0, "itl_ms": {"p50": 7.0}},
            {"concurrency": 8, "aggregate_tokens_per_s": 800.0, "aggregate_decode_tokens_per_s": 900.0, "itl_ms": {"p50": 8.0}}]});
        let peer = serde_json::json!({"levels": [
            {"concurrency": 1, "aggregate_decode_tokens_per_s": 200.0},
            {"concurrency": 8, "aggregate_decode_tokens_per_s": 1000.0}]});
        let svg = super::concurrency_svg(&plumb, Some(("llama.cpp", &peer)));
        // Two throughput lines of two points, and plumb's latencies alone.
        assert_eq!(svg.matches("<circle").count(), 6);
        assert!(svg.contains("decode tokens/s") && svg.contains("llama.cpp"));
        assert_eq!(super::peer_name(&serde_json::json!({"peer": "llama.cpp llama-batched-bench"})), "llama.cpp");
    }
}

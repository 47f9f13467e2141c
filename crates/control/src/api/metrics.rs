//! Prometheus text metrics: API requests and latencies (recorded by a middleware), and
//! instances, services and operations by state (read from the store at scrape time).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

/// Latency histogram bucket bounds, seconds.
const BUCKETS: [f64; 10] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

/// Request counts by (method, route, status).
type Counters = BTreeMap<(String, String, u16), u64>;

/// API request counters.
#[derive(Default)]
pub struct ApiMetrics {
    inner: Mutex<(Counters, BTreeMap<String, Histogram>)>,
}

impl ApiMetrics {
    /// Counts one request of `method` on `route` answered with `status` after `secs`.
    pub fn record(&self, method: &str, route: &str, status: u16, secs: f64) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        *g.0.entry((method.to_string(), route.to_string(), status))
            .or_default() += 1;
        let h = g.1.entry(route.to_string()).or_default();
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                h.counts[i] += 1;
            }
        }
        h.sum += secs;
        h.count += 1;
    }

    /// Appends the request metrics in text exposition format.
    pub fn render(&self, out: &mut String) {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        out.push_str("# HELP nfx_api_requests_total REST requests by method, route and status.\n# TYPE nfx_api_requests_total counter\n");
        for ((m, r, s), n) in &g.0 {
            let _ = writeln!(
                out,
                "nfx_api_requests_total{{method=\"{m}\",route=\"{}\",status=\"{s}\"}} {n}",
                escape(r)
            );
        }
        out.push_str("# HELP nfx_api_request_duration_seconds REST request latency.\n# TYPE nfx_api_request_duration_seconds histogram\n");
        for (r, h) in &g.1 {
            let r = escape(r);
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "nfx_api_request_duration_seconds_bucket{{route=\"{r}\",le=\"{b}\"}} {}",
                    h.counts[i]
                );
            }
            let _ = writeln!(
                out,
                "nfx_api_request_duration_seconds_bucket{{route=\"{r}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "nfx_api_request_duration_seconds_sum{{route=\"{r}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "nfx_api_request_duration_seconds_count{{route=\"{r}\"}} {}",
                h.count
            );
        }
    }
}

/// Appends one gauge family with a label.
pub fn gauge(
    out: &mut String,
    name: &str,
    help: &str,
    label: &str,
    values: &BTreeMap<String, u64>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
    for (k, v) in values {
        let _ = writeln!(out, "{name}{{{label}=\"{}\"}} {v}", escape(k));
    }
}

/// Escapes a label value.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histograms() {
        let m = ApiMetrics::default();
        m.record("GET", "/a", 200, 0.002);
        m.record("GET", "/a", 200, 3.0);
        let mut s = String::new();
        m.render(&mut s);
        assert!(s.contains("nfx_api_requests_total{method=\"GET\",route=\"/a\",status=\"200\"} 2"));
        assert!(s.contains("route=\"/a\",le=\"0.0025\"} 1"));
        assert!(s.contains("route=\"/a\",le=\"+Inf\"} 2"));
        let mut g = String::new();
        gauge(
            &mut g,
            "x",
            "h",
            "state",
            &BTreeMap::from([("a\"b".to_string(), 3)]),
        );
        assert!(g.contains("x{state=\"a\\\"b\"} 3"), "{g}");
    }
}

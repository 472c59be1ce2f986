//! Node performance from Prometheus scrapes: two scrapes of a node's `/metrics` an interval
//! apart give its GET/PUT operations per second, throughput, GET latency percentiles, cache
//! hit ratio, errors, disk utilization and running jobs. `grist show performance` and the
//! proxy's dashboard overview compute the same numbers with this.

use std::collections::HashMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// One scrape: samples by series (`name{labels}` as written), and when it was taken.
pub struct Scrape {
    at: Instant,
    samples: Vec<(String, String, f64)>,
}

impl Scrape {
    pub fn parse(text: &str) -> Self {
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                let value: f64 = value.parse().ok()?;
                let (name, labels) = match series.split_once('{') {
                    Some((n, rest)) => (n, rest.trim_end_matches('}')),
                    None => (series, ""),
                };
                Some((name.to_owned(), labels.to_owned(), value))
            })
            .collect();
        Self {
            at: Instant::now(),
            samples,
        }
    }

    /// When it was taken.
    pub fn at(&self) -> Instant {
        self.at
    }

    /// The sum of `name`'s samples whose labels pass `keep`.
    pub fn sum(&self, name: &str, keep: impl Fn(&str) -> bool) -> f64 {
        self.samples
            .iter()
            .filter(|(n, l, _)| n == name && keep(l))
            .map(|(_, _, v)| v)
            .sum()
    }
}

fn op_in(ops: &'static [&'static str]) -> impl Fn(&str) -> bool {
    move |labels: &str| {
        ops.iter()
            .any(|op| labels.contains(&format!("op=\"{op}\"")))
    }
}

const GETS: &[&str] = &["get", "GetObject"];
const PUTS: &[&str] = &["put", "PutObject", "UploadPart"];

/// One node over one interval.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodePerf {
    pub node: String,
    pub role: String,
    pub get_ops: f64,
    pub put_ops: f64,
    /// Response and request body bytes per second.
    pub out_bytes_per_s: f64,
    pub in_bytes_per_s: f64,
    /// GET latency percentiles over the interval (seconds; bucket upper bounds).
    pub get_p50_s: Option<f64>,
    pub get_p99_s: Option<f64>,
    /// Cache hits / (hits + misses) of remote-bucket GETs over the interval (targets).
    pub cache_hit_ratio: Option<f64>,
    pub errors_per_s: f64,
    /// The busiest mountpath's utilization (0..1) over the interval (targets).
    pub disk_util: Option<f64>,
    pub running_jobs: u64,
}

/// A report: every node over the same interval.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub interval_s: f64,
    pub nodes: Vec<NodePerf>,
}

/// A percentile from the growth of a histogram's cumulative buckets.
fn percentile(
    before: &Scrape,
    after: &Scrape,
    name: &str,
    ops: &'static [&'static str],
    q: f64,
) -> Option<f64> {
    let keep = op_in(ops);
    let mut buckets: HashMap<String, f64> = HashMap::new();
    for (n, l, v) in &after.samples {
        if n != name || !keep(l) {
            continue;
        }
        let Some(le) = l.split(',').find_map(|kv| kv.strip_prefix("le=\"")) else {
            continue;
        };
        let le = le.trim_end_matches('"').to_owned();
        let old: f64 = before
            .samples
            .iter()
            .filter(|(bn, bl, _)| bn == n && bl == l)
            .map(|(_, _, v)| v)
            .sum();
        *buckets.entry(le).or_default() += v - old;
    }
    let mut bounds: Vec<(f64, f64)> = buckets
        .into_iter()
        .map(|(le, c)| {
            let b = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::INFINITY)
            };
            (b, c)
        })
        .collect();
    bounds.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = bounds.last()?.1;
    if total <= 0.0 {
        return None;
    }
    bounds
        .iter()
        .find(|(_, c)| *c >= q * total)
        .map(|(b, _)| *b)
}

pub fn node_perf(node: &str, role: &str, a: &Scrape, b: &Scrape) -> NodePerf {
    let dt = b.at.duration_since(a.at).as_secs_f64().max(1e-3);
    let delta =
        |name: &str, keep: &dyn Fn(&str) -> bool| (b.sum(name, keep) - a.sum(name, keep)).max(0.0);
    let all = |_: &str| true;
    let not_metrics = |l: &str| !l.contains("op=\"metrics\"");
    let hits = delta("grist_cache_hits_total", &all);
    let misses = delta("grist_cache_misses_total", &all);
    let io = |s: &Scrape| -> HashMap<String, f64> {
        s.samples
            .iter()
            .filter(|(n, _, _)| n == "grist_mountpath_io_time_seconds_total")
            .map(|(_, l, v)| (l.clone(), *v))
            .collect()
    };
    let (io_a, io_b) = (io(a), io(b));
    let disk_util = io_b
        .iter()
        .map(|(l, v)| ((v - io_a.get(l).copied().unwrap_or(*v)) / dt).clamp(0.0, 1.0))
        .reduce(f64::max);
    NodePerf {
        node: node.to_owned(),
        role: role.to_owned(),
        get_ops: delta("grist_requests_total", &op_in(GETS)) / dt,
        put_ops: delta("grist_requests_total", &op_in(PUTS)) / dt,
        out_bytes_per_s: delta("grist_response_body_bytes_total", &not_metrics) / dt,
        in_bytes_per_s: delta("grist_request_body_bytes_total", &not_metrics) / dt,
        get_p50_s: percentile(a, b, "grist_request_duration_seconds_bucket", GETS, 0.5),
        get_p99_s: percentile(a, b, "grist_request_duration_seconds_bucket", GETS, 0.99),
        cache_hit_ratio: (hits + misses > 0.0).then(|| hits / (hits + misses)),
        errors_per_s: delta("grist_errors_total", &all) / dt,
        disk_util,
        running_jobs: b.sum("grist_jobs_running", all).max(0.0) as u64,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rates_and_percentiles_from_two_scrapes() {
        let a = Scrape::parse(
            "grist_requests_total{op=\"get\"} 10\n\
             grist_request_duration_seconds_bucket{op=\"get\",le=\"0.001\"} 5\n\
             grist_request_duration_seconds_bucket{op=\"get\",le=\"0.01\"} 10\n\
             grist_request_duration_seconds_bucket{op=\"get\",le=\"+Inf\"} 10\n\
             grist_cache_hits_total{provider=\"aws\"} 1\n",
        );
        let mut b = Scrape::parse(
            "grist_requests_total{op=\"get\"} 110\n\
             grist_requests_total{op=\"GetObject\"} 50\n\
             grist_request_duration_seconds_bucket{op=\"get\",le=\"0.001\"} 55\n\
             grist_request_duration_seconds_bucket{op=\"get\",le=\"0.01\"} 108\n\
             grist_request_duration_seconds_bucket{op=\"get\",le=\"+Inf\"} 110\n\
             grist_cache_hits_total{provider=\"aws\"} 4\n\
             grist_cache_misses_total{provider=\"aws\",reason=\"absent\"} 1\n\
             grist_jobs_running{kind=\"rebalance\"} 1\n",
        );
        b.at = a.at + Duration::from_secs(2);
        let p = node_perf("t1", "target", &a, &b);
        assert_eq!(p.get_ops, 75.0);
        assert_eq!(p.get_p50_s, Some(0.001));
        assert_eq!(p.get_p99_s, Some(f64::INFINITY));
        assert_eq!(p.cache_hit_ratio, Some(3.0 / 4.0));
        assert_eq!(p.running_jobs, 1);
    }
}

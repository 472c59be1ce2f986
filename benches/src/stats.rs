//! Latency histograms and counters per operation kind, and how they are printed.
//!
//! Each worker records into its own [`Recorder`] (an uncontended mutex); the reporter drains
//! all recorders every interval into the run's totals, so recording costs one histogram
//! increment and there is no shared hot counter.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latencies are recorded in microseconds, 1 µs .. 1 h, 3 significant digits.
const MAX_LATENCY_US: u64 = 3_600_000_000;

/// Operation kinds the generator issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    Get,
    Put,
}

impl Op {
    pub const ALL: [Op; 2] = [Op::Get, Op::Put];

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Get => "GET",
            Op::Put => "PUT",
        }
    }
}

/// Counters and latency histogram of one operation kind.
#[derive(Debug, Clone)]
pub struct OpStats {
    pub hist: Histogram<u64>,
    pub ops: u64,
    pub bytes: u64,
    pub errors: u64,
}

impl Default for OpStats {
    fn default() -> Self {
        Self {
            hist: Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid histogram bounds"),
            ops: 0,
            bytes: 0,
            errors: 0,
        }
    }
}

impl OpStats {
    fn record(&mut self, latency: Duration, bytes: u64) {
        let us = (latency.as_micros() as u64).clamp(1, MAX_LATENCY_US);
        self.hist.saturating_record(us);
        self.ops += 1;
        self.bytes += bytes;
    }

    fn merge(&mut self, other: &OpStats) {
        // Same bounds on both sides: adding cannot fail.
        let _ = self.hist.add(&other.hist);
        self.ops += other.ops;
        self.bytes += other.bytes;
        self.errors += other.errors;
    }

    fn reset(&mut self) {
        self.hist.reset();
        self.ops = 0;
        self.bytes = 0;
        self.errors = 0;
    }

    /// The numbers printed for this kind over `elapsed`.
    pub fn summary(&self, phase: &str, op: Op, elapsed: Duration) -> Summary {
        let secs = elapsed.as_secs_f64().max(1e-9);
        let lat = |q: f64| {
            if self.ops == 0 {
                0
            } else {
                self.hist.value_at_quantile(q)
            }
        };
        Summary {
            phase: phase.to_owned(),
            op: op.as_str(),
            elapsed_s: round3(elapsed.as_secs_f64()),
            ops: self.ops,
            ops_per_s: round3(self.ops as f64 / secs),
            bytes: self.bytes,
            mib_per_s: round3(self.bytes as f64 / secs / (1 << 20) as f64),
            mb_per_s: round3(self.bytes as f64 / secs / 1e6),
            lat_us: Latency {
                min: if self.ops == 0 { 0 } else { self.hist.min() },
                p50: lat(0.5),
                p90: lat(0.9),
                p99: lat(0.99),
                max: if self.ops == 0 { 0 } else { self.hist.max() },
                mean: round3(if self.ops == 0 { 0.0 } else { self.hist.mean() }),
            },
            errors: self.errors,
            client_cpu_s: None,
        }
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub min: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
    pub mean: f64,
}

/// One printed line: an interval or a phase's final numbers for one operation kind.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// `interval`, `populate` or `final`.
    pub phase: String,
    pub op: &'static str,
    pub elapsed_s: f64,
    pub ops: u64,
    pub ops_per_s: f64,
    pub bytes: u64,
    pub mib_per_s: f64,
    pub mb_per_s: f64,
    pub lat_us: Latency,
    pub errors: u64,
    /// CPU time the load generator itself used during the phase (user + system, all threads;
    /// Linux only), on `populate` and `final` lines: tells whether the client bounds a number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cpu_s: Option<f64>,
}

impl Summary {
    /// Header matching [`Summary::text`].
    pub fn text_header() -> String {
        format!(
            "{:<8} {:>8} {:<3} {:>9} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6}",
            "phase",
            "time",
            "op",
            "ops",
            "ops/s",
            "MiB/s",
            "min",
            "p50",
            "p90",
            "p99",
            "max",
            "errors"
        )
    }

    /// One fixed-width line; latencies in milliseconds.
    pub fn text(&self) -> String {
        let ms = |us: u64| format!("{:.3}", us as f64 / 1000.0);
        format!(
            "{:<8} {:>7.1}s {:<3} {:>9} {:>10.1} {:>10.1} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6}",
            self.phase,
            self.elapsed_s,
            self.op,
            self.ops,
            self.ops_per_s,
            self.mib_per_s,
            ms(self.lat_us.min),
            ms(self.lat_us.p50),
            ms(self.lat_us.p90),
            ms(self.lat_us.p99),
            ms(self.lat_us.max),
            self.errors
        )
    }
}

/// What one worker has recorded since the reporter last drained it.
#[derive(Debug, Default)]
pub struct Recorder {
    inner: Mutex<Recorded>,
}

#[derive(Debug, Default)]
struct Recorded {
    get: OpStats,
    put: OpStats,
    /// Error class (`http 404`, `transport`, `verify`, ...) → count.
    error_kinds: BTreeMap<String, u64>,
}

impl Recorded {
    fn op(&mut self, op: Op) -> &mut OpStats {
        match op {
            Op::Get => &mut self.get,
            Op::Put => &mut self.put,
        }
    }
}

impl Recorder {
    pub fn success(&self, op: Op, latency: Duration, bytes: u64) {
        let mut r = self.inner.lock().expect("recorder lock");
        r.op(op).record(latency, bytes);
    }

    pub fn error(&self, op: Op, class: &str) {
        let mut r = self.inner.lock().expect("recorder lock");
        r.op(op).errors += 1;
        *r.error_kinds.entry(class.to_owned()).or_default() += 1;
    }

    /// Moves everything recorded so far into `into`, leaving this recorder empty.
    pub fn drain_into(&self, into: &mut Totals) {
        let mut r = self.inner.lock().expect("recorder lock");
        into.get.merge(&r.get);
        into.put.merge(&r.put);
        for (k, v) in std::mem::take(&mut r.error_kinds) {
            *into.error_kinds.entry(k).or_default() += v;
        }
        r.get.reset();
        r.put.reset();
    }
}

/// Aggregated numbers of a phase (or of one interval).
#[derive(Debug, Default, Clone)]
pub struct Totals {
    pub get: OpStats,
    pub put: OpStats,
    pub error_kinds: BTreeMap<String, u64>,
}

impl Totals {
    pub fn op(&self, op: Op) -> &OpStats {
        match op {
            Op::Get => &self.get,
            Op::Put => &self.put,
        }
    }

    pub fn merge(&mut self, other: &Totals) {
        self.get.merge(&other.get);
        self.put.merge(&other.put);
        for (k, v) in &other.error_kinds {
            *self.error_kinds.entry(k.clone()).or_default() += v;
        }
    }

    pub fn errors(&self) -> u64 {
        self.get.errors + self.put.errors
    }

    /// Summaries of the kinds that saw any operation (GET alone when nothing ran at all).
    pub fn summaries(&self, phase: &str, elapsed: Duration) -> Vec<Summary> {
        let mut out: Vec<Summary> = Op::ALL
            .iter()
            .filter(|&&op| self.op(op).ops + self.op(op).errors > 0)
            .map(|&op| self.op(op).summary(phase, op, elapsed))
            .collect();
        if out.is_empty() {
            out.push(self.get.summary(phase, Op::Get, elapsed));
        }
        out
    }
}

/// CPU seconds (user + system) this process has used so far, from `/proc/self/stat`; `None`
/// where that file does not exist.
pub fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may contain spaces) start at `state` (field 3);
    // utime and stime are fields 14 and 15, in clock ticks (USER_HZ, 100 on Linux).
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_drain_and_summarize() {
        let r = Recorder::default();
        for ms in 1..=100 {
            r.success(Op::Get, Duration::from_millis(ms), 1 << 20);
        }
        r.error(Op::Put, "http 500");
        let mut t = Totals::default();
        r.drain_into(&mut t);
        let mut again = Totals::default();
        r.drain_into(&mut again);
        assert_eq!(again.get.ops, 0, "drain empties the recorder");

        let s = t.get.summary("final", Op::Get, Duration::from_secs(2));
        assert_eq!(s.ops, 100);
        assert_eq!(s.ops_per_s, 50.0);
        assert_eq!(s.mib_per_s, 50.0);
        assert!(
            (49_000..=51_000).contains(&s.lat_us.p50),
            "{}",
            s.lat_us.p50
        );
        assert!((98_000..=100_100).contains(&s.lat_us.p99));
        assert_eq!(t.errors(), 1);
        assert_eq!(t.error_kinds["http 500"], 1);
        let lines = t.summaries("final", Duration::from_secs(2));
        assert_eq!(lines.len(), 2);
        assert!(lines[0].text().contains("GET"));
    }

    #[test]
    fn own_cpu_time_is_readable_on_linux() {
        if cfg!(target_os = "linux") {
            let t = process_cpu_seconds().unwrap();
            assert!(t >= 0.0);
        }
    }
}

//! Command-line options of `grist-bench` and their validation into a [`Config`]: combinations
//! that cannot mean what they say (a PUT of an archive member, verifying a get-batch archive
//! against one object's bytes) are refused with a clear message rather than measured.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use gristmill_core::Bck;

/// How requests reach the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Native API through the proxy, following its 307 redirect to the owning target.
    Proxy,
    /// Native API straight to the owning target, computed by HRW from the cluster map.
    Direct,
    /// Plain `GET <endpoint>/<name>` (nginx and other HTTP baselines); GET only.
    Http,
    /// S3 API of the endpoint (path-style `<endpoint>/<bucket>/<name>`), every request signed
    /// with SigV4 (`--s3-access-key`, `--s3-secret-key`); native buckets only.
    S3,
}

/// In which order each pass visits the fixed object set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Order {
    /// Every pass visits every object once, in a shuffled order (a new shuffle per pass).
    Random,
    /// Every pass visits the objects in name order.
    Seq,
}

/// aisloader-style load generator for Gristmill (and plain HTTP baselines).
///
/// The object set is fixed: `--objects N` names `<prefix>00000000` ... with deterministic
/// sizes and contents (a function of the name), so GETs can be verified (`--verify`) and the
/// same files can be written to disk for other servers (`--write-files`).
///
/// Exit status: 0 when every operation succeeded, 2 when some failed (counted as errors), 1 on
/// a setup error.
#[derive(Debug, Parser)]
#[command(name = "grist-bench", version)]
pub struct Args {
    /// Base URL: the proxy (proxy/direct modes) or the HTTP server (http mode).
    #[arg(long, env = "GRIST_ENDPOINT", default_value = "http://127.0.0.1:8080")]
    pub endpoint: String,
    /// Bucket (`name`, `ais://name`, or a remote `s3://name` for GETs); unused in http mode.
    #[arg(long, default_value = "bench")]
    pub bucket: String,
    /// proxy: through the proxy's redirect; direct: HRW in the client; http: GET <endpoint>/<name>.
    #[arg(long, value_enum, default_value_t = Mode::Proxy)]
    pub mode: Mode,
    /// Percentage of operations that are PUTs (0..=100); the rest are GETs.
    #[arg(long, default_value_t = 0)]
    pub pct_put: u32,
    /// Object size, e.g. 16KiB, 1MiB, 4096 (K/Ki = 1024, KB = 1000). Overrides --min/--max-size.
    #[arg(long)]
    pub size: Option<String>,
    /// Smallest object size when sizes vary per object (deterministic per name).
    #[arg(long)]
    pub min_size: Option<String>,
    /// Largest object size when sizes vary per object.
    #[arg(long)]
    pub max_size: Option<String>,
    /// Number of objects in the fixed set.
    #[arg(long, default_value_t = 1000)]
    pub objects: usize,
    /// Name prefix of the object set (characters A-Z a-z 0-9 . _ - /).
    #[arg(long, default_value = "grist-bench/")]
    pub prefix: String,
    /// Concurrent requests in flight.
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Runtime threads of the load generator (default: the number of CPUs).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Stop after this long (e.g. 10s, 500ms, 2m). Default 10s when neither --count nor
    /// --epochs is given.
    #[arg(long)]
    pub duration: Option<String>,
    /// Stop after this many operations.
    #[arg(long)]
    pub count: Option<u64>,
    /// Stop after this many passes over the object set.
    #[arg(long)]
    pub epochs: Option<u64>,
    /// Visiting order of each pass.
    #[arg(long, value_enum, default_value_t = Order::Random)]
    pub order: Order,
    /// Check every GET's bytes against the object's deterministic content.
    #[arg(long)]
    pub verify: bool,
    /// Create the bucket first (an existing bucket is fine).
    #[arg(long)]
    pub create_bucket: bool,
    /// PUT every object of the set once before the timed phase (reported as `populate`).
    #[arg(long)]
    pub put_first: bool,
    /// One JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print a line every interval (e.g. 1s); 0 turns periodic lines off.
    #[arg(long, default_value = "10s")]
    pub interval: String,
    /// Per-request timeout.
    #[arg(long, default_value = "60s")]
    pub timeout: String,
    /// Seed of the shuffles and of the PUT/GET mix (default: random, printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write the object set as files `<DIR>/<name>` (same bytes as the PUTs) and exit: the
    /// files a baseline server (nginx) serves.
    #[arg(long, value_name = "DIR")]
    pub write_files: Option<PathBuf>,

    /// S3 access key (`--mode s3`); default: the key a cluster with auth off accepts.
    #[arg(long, env = "AWS_ACCESS_KEY_ID", default_value = gristmill_core::api::s3_default::ACCESS_KEY)]
    pub s3_access_key: String,
    /// S3 secret key (`--mode s3`).
    #[arg(long, env = "AWS_SECRET_ACCESS_KEY", default_value = gristmill_core::api::s3_default::SECRET_KEY, hide_env_values = true)]
    pub s3_secret_key: String,
    /// Region the S3 signatures name.
    #[arg(long, env = "AWS_REGION", default_value = "us-east-1")]
    pub s3_region: String,
    /// Read this member of every object instead of the object (each object is an archive:
    /// a shard); GETs only, byte counts without --verify.
    #[arg(long)]
    pub archpath: Option<String>,
    /// Every GET is one get-batch request (`/v1/ml/moss`) for this many objects of the set,
    /// answered as one streamed archive; GETs only (proxy mode), without --verify.
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Evict the remote bucket's cached objects (keeping the bucket) before the timed phase,
    /// so it measures cold GETs.
    #[arg(long)]
    pub evict_first: bool,
}

/// SigV4 credentials of `--mode s3`.
#[derive(Debug, Clone)]
pub struct S3Keys {
    pub access_key: String,
    pub secret_key: String,
    pub region: String,
}

/// Validated options.
#[derive(Debug, Clone)]
pub struct Config {
    pub mode: Mode,
    /// Endpoint without a trailing slash.
    pub endpoint: String,
    pub bucket: Bck,
    pub pct_put: u32,
    pub min_size: u64,
    pub max_size: u64,
    pub objects: usize,
    pub prefix: String,
    pub workers: usize,
    pub threads: usize,
    pub duration: Option<Duration>,
    /// Operation limit from --count and/or --epochs (the smaller).
    pub limit: Option<u64>,
    pub order: Order,
    pub verify: bool,
    pub create_bucket: bool,
    pub put_first: bool,
    pub json: bool,
    pub interval: Option<Duration>,
    pub timeout: Duration,
    pub seed: u64,
    pub write_files: Option<PathBuf>,
    /// `--mode s3`: the signing keys.
    pub s3: Option<S3Keys>,
    pub archpath: Option<String>,
    pub batch_size: Option<usize>,
    pub evict_first: bool,
}

/// Longest object this tool generates (its content pool lives in memory).
const MAX_OBJECT_SIZE: u64 = 4 << 30;

impl Args {
    pub fn validate(self) -> anyhow::Result<Config> {
        let writes = self.pct_put > 0 || self.put_first;
        if let Some(member) = &self.archpath {
            if member.is_empty() {
                bail!("--archpath names a member: give its path inside each archive");
            }
            if writes || self.verify || self.batch_size.is_some() {
                bail!(
                    "--archpath reads members: no --pct-put, --put-first, --verify or --batch-size"
                );
            }
            if !matches!(self.mode, Mode::Proxy | Mode::Direct) {
                bail!("--archpath works with --mode proxy or direct (the native API)");
            }
        }
        if let Some(n) = self.batch_size {
            if n == 0 {
                bail!("--batch-size must be at least 1");
            }
            if writes || self.verify {
                bail!("--batch-size is GETs only, without --verify (the answer is an archive)");
            }
            if self.mode != Mode::Proxy {
                bail!("--batch-size works with --mode proxy (get-batch goes through the proxy)");
            }
        }
        if self.pct_put > 100 {
            bail!("--pct-put must be 0..=100, got {}", self.pct_put);
        }
        if self.mode == Mode::Http {
            if self.pct_put > 0 || self.put_first {
                bail!("--mode http is GET only (no --pct-put, no --put-first)");
            }
            if self.create_bucket {
                bail!("--mode http has no buckets (drop --create-bucket)");
            }
        }
        if self.objects == 0 {
            bail!("--objects must be at least 1");
        }
        if self.workers == 0 {
            bail!("--workers must be at least 1");
        }
        validate_prefix(&self.prefix)?;
        let (min_size, max_size) = match (&self.size, &self.min_size, &self.max_size) {
            (Some(s), _, _) => {
                let s = parse_size(s).context("--size")?;
                (s, s)
            }
            (None, Some(a), Some(b)) => (
                parse_size(a).context("--min-size")?,
                parse_size(b).context("--max-size")?,
            ),
            (None, None, None) => (1 << 20, 1 << 20),
            _ => bail!("give --size, or both --min-size and --max-size"),
        };
        if min_size > max_size {
            bail!("--min-size {min_size} is larger than --max-size {max_size}");
        }
        if max_size > MAX_OBJECT_SIZE {
            bail!("objects larger than {MAX_OBJECT_SIZE} bytes are not supported");
        }
        let duration = self
            .duration
            .as_deref()
            .map(parse_duration)
            .transpose()
            .context("--duration")?;
        let epoch_limit = self.epochs.map(|e| e.saturating_mul(self.objects as u64));
        let limit = match (self.count, epoch_limit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let duration = match (duration, limit) {
            (None, None) => Some(Duration::from_secs(10)),
            (d, _) => d,
        };
        let interval = parse_duration(&self.interval).context("--interval")?;
        let timeout = parse_duration(&self.timeout).context("--timeout")?;
        if self.mode == Mode::Http && self.evict_first {
            bail!("--mode http has no buckets (drop --evict-first)");
        }
        let bucket = if self.mode == Mode::Http {
            // Unused, but keep the type simple.
            Bck::parse_uri("ais://http")?.0
        } else {
            let (bck, rest) = Bck::parse_uri(&self.bucket)
                .map_err(|e| anyhow::anyhow!("--bucket {}: {}", self.bucket, e.message))?;
            if !rest.is_empty() {
                bail!("--bucket names a bucket, not an object: {}", self.bucket);
            }
            if self.mode == Mode::S3 && bck.provider.is_remote() {
                bail!(
                    "--mode s3 reads native buckets (ais://) only, got {}",
                    self.bucket
                );
            }
            if self.evict_first && !bck.provider.is_remote() {
                bail!(
                    "--evict-first evicts a remote bucket's cache; {} is native",
                    self.bucket
                );
            }
            // Remote buckets (s3://, ht://) are read through Gristmill's cache: GETs only,
            // since a PUT would write through to the remote and there is nothing to create.
            if bck.provider.is_remote()
                && (self.pct_put > 0 || self.put_first || self.create_bucket)
            {
                bail!(
                    "--bucket {}: remote buckets are read-only here (no --pct-put, --put-first, --create-bucket)",
                    self.bucket
                );
            }
            bck
        };
        let threads = self.threads.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
        });
        Ok(Config {
            mode: self.mode,
            endpoint: self.endpoint.trim_end_matches('/').to_owned(),
            bucket,
            pct_put: self.pct_put,
            min_size,
            max_size,
            objects: self.objects,
            prefix: self.prefix,
            workers: self.workers,
            threads: threads.max(1),
            duration,
            limit,
            order: self.order,
            verify: self.verify,
            create_bucket: self.create_bucket,
            put_first: self.put_first,
            json: self.json,
            interval: (!interval.is_zero()).then_some(interval),
            timeout,
            seed: self.seed.unwrap_or_else(rand::random),
            write_files: self.write_files,
            s3: (self.mode == Mode::S3).then_some(S3Keys {
                access_key: self.s3_access_key,
                secret_key: self.s3_secret_key,
                region: self.s3_region,
            }),
            archpath: self.archpath,
            batch_size: self.batch_size,
            evict_first: self.evict_first,
        })
    }
}

/// Object names go into URL paths and file paths verbatim, so keep them to safe characters.
fn validate_prefix(prefix: &str) -> anyhow::Result<()> {
    let ok = prefix
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c));
    if !ok || prefix.starts_with('/') || prefix.split('/').any(|s| s == "." || s == "..") {
        bail!(
            "--prefix {prefix:?}: use A-Z a-z 0-9 . _ - / only, no leading '/', no '.' or '..' segments"
        );
    }
    Ok(())
}

/// `16KiB`, `1MiB`, `1.5M`, `4096`, `100KB`: binary units for K/Ki/M/Mi/G/Gi (with or
/// without a trailing `B`), decimal for KB/MB/GB.
pub fn parse_size(s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let num: f64 = num
        .parse()
        .with_context(|| format!("invalid size {s:?} (try 16KiB or 1MiB)"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" | "b" => 1,
        "K" | "k" | "KiB" | "Ki" | "kiB" | "KIB" => 1 << 10,
        "M" | "m" | "MiB" | "Mi" | "MIB" => 1 << 20,
        "G" | "g" | "GiB" | "Gi" | "GIB" => 1 << 30,
        "KB" | "kB" | "kb" => 1_000,
        "MB" | "mb" => 1_000_000,
        "GB" | "gb" => 1_000_000_000,
        other => bail!("invalid size unit {other:?} in {s:?} (use B, KiB, MiB, GiB, KB, MB, GB)"),
    };
    let v = num * mult as f64;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        bail!("size {s:?} out of range");
    }
    Ok(v.round() as u64)
}

/// `10s`, `500ms`, `2m`, `1h`, `1.5s`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let num: f64 = num
        .parse()
        .with_context(|| format!("invalid duration {s:?} (try 10s or 500ms)"))?;
    let secs = match unit.trim() {
        "" | "s" => num,
        "ms" => num / 1e3,
        "us" | "µs" => num / 1e6,
        "m" | "min" => num * 60.0,
        "h" => num * 3600.0,
        other => bail!("invalid duration unit {other:?} in {s:?} (use ms, s, m, h)"),
    };
    Duration::try_from_secs_f64(secs).with_context(|| format!("duration {s:?} out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let mut v = vec!["grist-bench"];
        v.extend_from_slice(extra);
        Args::try_parse_from(v).unwrap()
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("16KiB").unwrap(), 16 * 1024);
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("100KB").unwrap(), 100_000);
        assert_eq!(parse_size("1.5k").unwrap(), 1536);
        assert!(parse_size("1XB").is_err());
        assert!(parse_size("MiB").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("1w").is_err());
    }

    #[test]
    fn limits_and_defaults() {
        let c = args(&[]).validate().unwrap();
        assert_eq!(c.duration, Some(Duration::from_secs(10)));
        assert_eq!(c.limit, None);
        assert_eq!((c.min_size, c.max_size), (1 << 20, 1 << 20));
        let c = args(&["--objects", "10", "--epochs", "3", "--count", "50"])
            .validate()
            .unwrap();
        assert_eq!(c.limit, Some(30));
        assert_eq!(c.duration, None);
        let c = args(&["--bucket", "ais://b1", "--count", "5", "--duration", "1s"])
            .validate()
            .unwrap();
        assert_eq!(c.bucket.name, "b1");
        assert_eq!(c.limit, Some(5));
        assert_eq!(c.duration, Some(Duration::from_secs(1)));
        let c = args(&["--bucket", "s3://remote", "--epochs", "1"])
            .validate()
            .unwrap();
        assert!(c.bucket.provider.is_remote());
    }

    #[test]
    fn contradictory_options_are_refused() {
        for extra in [
            &["--mode", "s3", "--bucket", "s3://x"][..],
            &["--archpath", "a/b.jpg", "--verify"],
            &["--archpath", "a/b.jpg", "--pct-put", "10"],
            &["--archpath", "a/b.jpg", "--mode", "s3"],
            &["--archpath", ""],
            &["--batch-size", "8", "--verify"],
            &["--batch-size", "8", "--mode", "direct"],
            &["--batch-size", "0"],
            &["--evict-first"],
            &["--evict-first", "--mode", "http"],
            &["--mode", "http", "--pct-put", "10"],
            &["--mode", "http", "--create-bucket"],
            &["--pct-put", "101"],
            &["--prefix", "../x"],
            &["--prefix", "a b"],
            &["--min-size", "2MiB", "--max-size", "1MiB"],
            &["--min-size", "2MiB"],
            &["--bucket", "s3://x", "--pct-put", "10"],
            &["--bucket", "s3://x", "--create-bucket"],
        ] {
            let err = args(extra).validate().unwrap_err();
            assert!(!err.to_string().is_empty(), "{extra:?}");
        }
    }

    #[test]
    fn new_modes_are_accepted() {
        let c = args(&["--mode", "s3", "--pct-put", "50"])
            .validate()
            .unwrap();
        assert_eq!(c.s3.unwrap().region, "us-east-1");
        let c = args(&["--archpath", "a/b.jpg", "--mode", "direct"])
            .validate()
            .unwrap();
        assert_eq!(c.archpath.as_deref(), Some("a/b.jpg"));
        let c = args(&["--batch-size", "16"]).validate().unwrap();
        assert_eq!(c.batch_size, Some(16));
        let c = args(&["--evict-first", "--bucket", "s3://x"])
            .validate()
            .unwrap();
        assert!(c.evict_first);
    }
}

//! Request and connection limits every node enforces before a request reaches a handler.
//!
//! Each limit has a default that serves ordinary clients (the AWS SDKs, boto3, s5cmd, the
//! Python SDK, PyTorch loaders) with room to spare, answers with a clear status when it is
//! crossed, and can be changed per node (`[limits]` in the config file, or `GRISTD_*`
//! variables, read by `gristd`). `docs/security.md` lists them all with their statuses.
//!
//! | limit                   | default  | when crossed                                      |
//! |-------------------------|----------|---------------------------------------------------|
//! | header count            | 128      | 431 (hyper refuses the request head)              |
//! | request head bytes      | ~400 KiB | 431 (hyper's read buffer)                         |
//! | header bytes (total)    | 64 KiB   | 431                                               |
//! | URL bytes               | 16 KiB   | 414                                               |
//! | header read timeout     | 30 s     | connection closed (also bounds idle keep-alive)   |
//! | body read gap           | 120 s    | 408, request aborted                              |
//! | stalled connection      | 120 s    | connection closed (no request running, no I/O)    |
//! | connections per client  | 1024     | 429 and close                                     |
//! | connections in all      | 16384    | 503 and close                                     |
//!
//! Object-name length (1024 bytes, 400), list page size (clamped to 100,000 native, 1,000
//! S3), S3 XML bodies (2 MiB, 400 `MaxMessageLengthExceeded`) and multipart part numbers
//! (1..=10,000, 400) are checked where those requests are parsed.

use std::time::Duration;

/// Largest S3 XML request body (CompleteMultipartUpload with 10,000 parts is ~800 KiB;
/// DeleteObjects with 1,000 keys of 1 KiB is ~1.1 MiB).
pub const MAX_XML_BODY: usize = 2 << 20;

/// Largest S3 PUT body sent with `Transfer-Encoding: chunked` and no length: the S3 front reads
/// such a body before checking its signature (which needs the length). Larger uploads must
/// declare their length (Content-Length, or aws-chunked's decoded length).
pub const MAX_UNFRAMED_PUT: usize = 16 << 20;

/// Most parts one multipart upload may have (S3's limit).
pub const MAX_PARTS: usize = 10_000;

/// The header count hyper parses without a heap allocation (its default limit).
pub const HYPER_MAX_HEADERS: usize = 100;

/// Per-node limits on connections and request heads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Most header fields in one request (hyper answers 431 above it).
    pub max_headers: usize,
    /// Most bytes of all header names and values together (431).
    pub max_header_bytes: usize,
    /// Longest request target (path and query), in bytes (414).
    pub max_url_bytes: usize,
    /// Time a client has to send a complete request head; a connection idle between
    /// requests is closed after it too. Defeats slowloris clients.
    pub header_read_timeout: Duration,
    /// Longest wait for the next piece of a request body while a handler reads it (408).
    /// Defeats clients that open an upload and stop sending.
    pub body_read_timeout: Duration,
    /// A connection with no request running and no byte moved in either direction for this
    /// long is closed (a client that stopped reading its response).
    pub idle_timeout: Duration,
    /// Most open connections from one client address (429 above it).
    pub max_conns_per_client: usize,
    /// Most open connections in all (503 above it).
    pub max_conns: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            // hyper's own default: up to 100 the parser's tables live on the stack; any other
            // limit makes it allocate them for every request.
            max_headers: HYPER_MAX_HEADERS,
            max_header_bytes: 64 << 10,
            max_url_bytes: 16 << 10,
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(120),
            max_conns_per_client: 1024,
            max_conns: 16384,
        }
    }
}

/// One tunable limit: its config key (also `GRISTD_<KEY>` upper-cased) and how to set it.
struct Knob {
    key: &'static str,
    help: &'static str,
    set: fn(&mut Limits, &str) -> Result<(), String>,
}

fn count(v: &str) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{v:?} is not a positive number")),
    }
}

fn bytes(v: &str) -> Result<usize, String> {
    match crate::time::parse_size(v) {
        Ok(n) if n > 0 => Ok(n as usize),
        Ok(_) => Err("must be positive".into()),
        Err(e) => Err(e.message),
    }
}

fn duration(v: &str) -> Result<Duration, String> {
    match crate::time::parse_duration(v) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err("must be positive".into()),
        Err(e) => Err(e.message),
    }
}

const KNOBS: &[Knob] = &[
    Knob {
        key: "max_headers",
        help: "most header fields in one request (431 above it); default 100",
        set: |l, v| {
            l.max_headers = count(v)?;
            Ok(())
        },
    },
    Knob {
        key: "max_header_bytes",
        help: "most bytes of all header names and values (431); default 64KiB",
        set: |l, v| {
            l.max_header_bytes = bytes(v)?;
            Ok(())
        },
    },
    Knob {
        key: "max_url_bytes",
        help: "longest request target, path and query (414); default 16KiB",
        set: |l, v| {
            l.max_url_bytes = bytes(v)?;
            Ok(())
        },
    },
    Knob {
        key: "header_read_timeout",
        help: "time to send a complete request head; also closes idle keep-alive connections; default 30s",
        set: |l, v| {
            l.header_read_timeout = duration(v)?;
            Ok(())
        },
    },
    Knob {
        key: "body_read_timeout",
        help: "longest wait for the next piece of a request body (408); default 120s",
        set: |l, v| {
            l.body_read_timeout = duration(v)?;
            Ok(())
        },
    },
    Knob {
        key: "idle_timeout",
        help: "a connection with no request running and no I/O this long is closed; default 120s",
        set: |l, v| {
            l.idle_timeout = duration(v)?;
            Ok(())
        },
    },
    Knob {
        key: "max_conns_per_client",
        help: "most open connections from one client address (429); default 1024",
        set: |l, v| {
            l.max_conns_per_client = count(v)?;
            Ok(())
        },
    },
    Knob {
        key: "max_conns",
        help: "most open connections in all (503); default 16384",
        set: |l, v| {
            l.max_conns = count(v)?;
            Ok(())
        },
    },
];

impl Limits {
    /// The config keys of the `[limits]` section.
    pub fn keys() -> impl Iterator<Item = &'static str> {
        KNOBS.iter().map(|k| k.key)
    }

    /// The config keys with a line saying what each limits (for the settings table).
    pub fn described() -> impl Iterator<Item = (&'static str, &'static str)> {
        KNOBS.iter().map(|k| (k.key, k.help))
    }

    /// Sets one limit by its config key; sizes take units (`64KiB`), durations too (`30s`).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let knob = KNOBS
            .iter()
            .find(|k| k.key == key)
            .ok_or_else(|| format!("unknown limit {key:?}"))?;
        (knob.set)(self, value).map_err(|e| format!("limits.{key}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_parse_units_and_refuse_nonsense() {
        let mut l = Limits::default();
        l.set("max_header_bytes", "32KiB").unwrap();
        assert_eq!(l.max_header_bytes, 32 << 10);
        l.set("header_read_timeout", "5s").unwrap();
        assert_eq!(l.header_read_timeout, Duration::from_secs(5));
        l.set("max_conns_per_client", "7").unwrap();
        assert_eq!(l.max_conns_per_client, 7);
        assert!(l.set("max_headers", "0").is_err());
        assert!(l.set("max_headers", "lots").is_err());
        assert!(l.set("idle_timeout", "0s").is_err());
        assert!(l.set("nope", "1").is_err());
        assert_eq!(Limits::keys().count(), KNOBS.len());
    }
}

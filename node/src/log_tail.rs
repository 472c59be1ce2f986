//! The node's recent log in memory (`GET /v1/daemon?what=log&lines=N`, `grist log show NODE`):
//! every line the node logs goes to stderr as before and into a ring of the latest
//! [`MAX_BYTES`], so an operator reads a node's log through the API without a shell on its
//! machine. Older lines are dropped first; the ring holds whole lines only.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{LazyLock, Mutex};

/// Most bytes of log kept in memory.
pub const MAX_BYTES: usize = 4 << 20;

/// Lines answered when the request does not say.
pub const DEFAULT_LINES: usize = 200;

#[derive(Default)]
struct Ring {
    lines: VecDeque<String>,
    bytes: usize,
}

static RING: LazyLock<Mutex<Ring>> = LazyLock::new(Mutex::default);

fn ring() -> std::sync::MutexGuard<'static, Ring> {
    RING.lock().unwrap_or_else(|e| e.into_inner())
}

fn keep(text: &str) {
    let mut r = ring();
    for line in text.lines().filter(|l| !l.is_empty()) {
        r.bytes += line.len();
        r.lines.push_back(line.to_owned());
    }
    while r.bytes > MAX_BYTES {
        match r.lines.pop_front() {
            Some(old) => r.bytes -= old.len(),
            None => break,
        }
    }
}

/// The last `n` lines, oldest first, each ending in a newline.
pub fn tail(n: usize) -> String {
    let r = ring();
    let skip = r.lines.len().saturating_sub(n);
    let mut out = String::new();
    for line in r.lines.iter().skip(skip) {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// A `tracing_subscriber` writer (`MakeWriter` as a function): each event is written to
/// stderr as it comes and kept in the ring once complete.
pub fn writer() -> Tee {
    Tee { event: Vec::new() }
}

/// Writes one log event to stderr and, when dropped, keeps it in the ring.
pub struct Tee {
    event: Vec<u8>,
}

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.event.extend_from_slice(buf);
        std::io::stderr().write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        if !self.event.is_empty() {
            keep(&String::from_utf8_lossy(&self.event));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_latest_whole_lines() {
        for i in 0..5 {
            let mut w = writer();
            writeln!(w, "line {i}").unwrap();
        }
        let last = tail(2);
        assert!(last.ends_with("line 3\nline 4\n"), "{last:?}");
        let big = "x".repeat(MAX_BYTES / 2 + 1);
        keep(&big);
        keep(&big);
        let r = ring();
        assert!(r.bytes <= MAX_BYTES);
        assert_eq!(r.lines.back().map(String::len), Some(big.len()));
    }
}

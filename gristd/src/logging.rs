//! The node's log: `tracing` to stderr as text or JSON lines, each line also kept in memory
//! for `grist log show` (`gristmill_node::log_tail`), with a filter that changes while the
//! node runs (`grist config set log.level=debug`).

use std::sync::Mutex;

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

/// The filter in force, as given (`RUST_LOG`, the default, or the latest change).
static CURRENT: Mutex<String> = Mutex::new(String::new());

/// Changes the log filter of a running node.
#[derive(Clone)]
pub struct LogLevel(reload::Handle<EnvFilter, Registry>);

impl LogLevel {
    /// Sets a `RUST_LOG`-style filter (`debug`, `info,gristmill_target=debug`).
    pub fn set(&self, filter: &str) -> Result<(), String> {
        let parsed =
            EnvFilter::try_new(filter).map_err(|e| format!("log.level = {filter}: {e}"))?;
        self.0.reload(parsed).map_err(|e| e.to_string())?;
        *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = filter.to_owned();
        Ok(())
    }
}

/// The filter in force.
pub fn current_level() -> String {
    CURRENT.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Sets up `tracing` from `RUST_LOG` (else the `default` filter), logging to stderr as text
/// or (`json`) one JSON object per line with the current spans (the request id).
pub fn init(default: &str, format: &str) -> LogLevel {
    let given = std::env::var("RUST_LOG")
        .ok()
        .filter(|f| EnvFilter::try_new(f).is_ok())
        .unwrap_or_else(|| default.to_owned());
    let (filter, handle) = reload::Layer::new(EnvFilter::new(&given));
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = given;
    let writer = gristmill_node::log_tail::writer;
    let json = format == "json";
    let json_lines = json.then(|| {
        tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(writer)
            .json()
            .with_current_span(false)
            .with_span_list(true)
            .map_event_format(|inner| WithRequestId { inner })
    });
    let text_lines = (!json).then(|| {
        tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(writer)
            .with_target(false)
            .map_event_format(|inner| WithRequestId { inner })
    });
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(json_lines)
        .with(text_lines)
        .try_init();
    LogLevel(handle)
}

/// A line's format with the id of the request being served, when there is one: a
/// `request_id` member of a JSON line, an `request_id=…` field at the end of a text line.
///
/// The id comes from the task serving the request (`gristmill_node::metrics`), not from a
/// span: a span per request cost about 3 % of a warm 16 KiB GET's CPU, and most requests log
/// nothing.
struct WithRequestId<F> {
    inner: F,
}

impl<S, N, F> FormatEvent<S, N> for WithRequestId<F>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let Some(id) = gristmill_node::metrics::current_request_id() else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        let newline = line.ends_with('\n');
        if newline {
            line.pop();
        }
        // A JSON line is an object; a text line starts with its time or level, never `{`.
        // Ids are visible ASCII (checked where they are taken); JSON still needs quotes and
        // backslashes escaped.
        if line.starts_with('{') {
            let quoted = serde_json::to_string(&*id).map_err(|_| std::fmt::Error)?;
            let member = format!("\"request_id\":{quoted}");
            let sep = if line.len() > 2 { "," } else { "" };
            line.insert_str(1, &format!("{member}{sep}"));
        } else {
            line.push_str(" request_id=");
            line.push_str(&id);
        }
        if newline {
            line.push('\n');
        }
        writer.write_str(&line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// What the layer wrote, line by line.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn logged(json: bool) -> Vec<String> {
        let lines = Lines::default();
        let out = lines.clone();
        let make = move || out.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(make);
        let subscriber: Box<dyn tracing::Subscriber + Send + Sync> = if json {
            Box::new(
                tracing_subscriber::registry().with(
                    layer
                        .json()
                        .map_event_format(|inner| WithRequestId { inner }),
                ),
            )
        } else {
            Box::new(
                tracing_subscriber::registry()
                    .with(layer.map_event_format(|inner| WithRequestId { inner })),
            )
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        tracing::subscriber::with_default(subscriber, || {
            rt.block_on(async {
                tracing::warn!(n = 1, "outside");
                gristmill_node::metrics::serving(Arc::from("rid-\"7\""), async {
                    tracing::warn!(n = 2, "inside");
                })
                .await;
            })
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn lines_logged_while_serving_a_request_name_it() {
        let json = logged(true);
        assert_eq!(json.len(), 2, "{json:?}");
        let outside: serde_json::Value = serde_json::from_str(&json[0]).unwrap();
        let inside: serde_json::Value = serde_json::from_str(&json[1]).unwrap();
        assert!(outside.get("request_id").is_none(), "{outside}");
        assert_eq!(inside["request_id"], "rid-\"7\"", "{inside}");
        assert_eq!(inside["fields"]["message"], "inside", "{inside}");
        assert_eq!(inside["fields"]["n"], 2, "{inside}");

        let text = logged(false);
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(!text[0].contains("request_id"), "{}", text[0]);
        assert!(
            text[1].contains("inside") && text[1].ends_with(" request_id=rid-\"7\""),
            "{}",
            text[1]
        );
    }
}

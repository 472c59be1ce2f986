//! A node's configuration as operators see and change it while it runs (AIStore's
//! `ais config node|cluster`):
//! - `GET /v1/daemon?what=config`: the effective settings, flattened to the config file's
//!   dotted keys (`space.high_wm`), secrets hidden, with the keys that can change at run time
//!   and the changes this node keeps;
//! - `PUT /v1/daemon/set-config?key=value&...`: changes run-time settings; the node keeps
//!   them in its state dir (`config.local.json`) and applies them again at start, over the
//!   file and the flags, unless `transient=true`.
//!
//! The daemon publishes what it resolved ([`publish`]) and registers what can change
//! ([`register`]): parsing and checking stay where the settings are defined (`gristd`), and
//! a change is checked as a whole before any of it applies. One registry per process, like
//! the access-log switch: a process is one node.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};

use axum::extract::Query;
use axum::response::{IntoResponse, Response};
use gristmill_core::ApiError;
use serde_json::{Value, json};

/// Applies changes of one group of keys (all of them given, already known to the group):
/// checks them together with the group's other settings, then swaps them in, or changes
/// nothing and says why.
pub type Apply = Box<dyn Fn(&BTreeMap<String, String>) -> Result<(), String> + Send + Sync>;

/// The file where a node keeps its run-time changes, in its state dir.
pub const LOCAL_FILE: &str = "config.local.json";

/// The query parameter that makes a change last only until the node restarts.
pub const TRANSIENT: &str = "transient";

struct Group {
    keys: Vec<&'static str>,
    apply: Apply,
}

#[derive(Default)]
struct Registry {
    shown: BTreeMap<String, Value>,
    groups: Vec<Group>,
    local_file: Option<PathBuf>,
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Mutex::default);

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Publishes the effective settings (dotted keys, secrets already hidden) and where changes
/// are kept.
pub fn publish(shown: BTreeMap<String, Value>, local_file: PathBuf) {
    let mut r = registry();
    r.shown = shown;
    r.local_file = Some(local_file);
}

/// Makes `keys` changeable at run time through `apply`.
pub fn register(keys: &[&'static str], apply: Apply) {
    registry().groups.push(Group {
        keys: keys.to_vec(),
        apply,
    });
}

/// The changes kept in `file` (none when it is missing or unreadable: a node must start).
pub fn load_local(file: &Path) -> BTreeMap<String, String> {
    let Ok(bytes) = std::fs::read(file) else {
        return BTreeMap::new();
    };
    serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        tracing::warn!(file = %file.display(), error = %e, "ignoring unreadable run-time config");
        BTreeMap::new()
    })
}

/// How a value given as text is shown: a number or a boolean when it reads as one.
pub fn shown_value(text: &str) -> Value {
    if let Ok(n) = text.parse::<u64>() {
        return json!(n);
    }
    match text {
        "true" => json!(true),
        "false" => json!(false),
        _ => json!(text),
    }
}

/// This node's settings: `{"config": {key: value}, "runtime": [keys], "local": {key: value}}`.
pub fn show() -> Value {
    let r = registry();
    let runtime: Vec<&str> = r
        .groups
        .iter()
        .flat_map(|g| g.keys.iter().copied())
        .collect();
    let local = r.local_file.as_deref().map(load_local).unwrap_or_default();
    json!({"config": r.shown, "runtime": runtime, "local": local})
}

/// Applies `changes` (a key may be given once), keeping them unless `transient`. Unknown
/// keys, keys fixed at start and values a group refuses change nothing: 400 with the reason.
pub fn set(changes: BTreeMap<String, String>, transient: bool) -> Result<(), ApiError> {
    if changes.is_empty() {
        return Err(ApiError::bad_request(
            "nothing to set: give key=value query parameters (for example space.high_wm=85)",
        ));
    }
    let mut r = registry();
    let mut by_group: Vec<BTreeMap<String, String>> = vec![BTreeMap::new(); r.groups.len()];
    for (key, value) in &changes {
        let Some(i) = r.groups.iter().position(|g| g.keys.contains(&key.as_str())) else {
            let runtime: Vec<&str> = r
                .groups
                .iter()
                .flat_map(|g| g.keys.iter().copied())
                .collect();
            let why = if r.shown.contains_key(key) {
                "is fixed while the node runs: set it in the config file and restart"
            } else {
                "is not a setting"
            };
            return Err(ApiError::bad_request(format!(
                "{key} {why} (settings that change at run time: {})",
                runtime.join(", ")
            )));
        };
        by_group[i].insert(key.clone(), value.clone());
    }
    for (group, changes) in r.groups.iter().zip(&by_group) {
        if !changes.is_empty() {
            (group.apply)(changes).map_err(ApiError::bad_request)?;
        }
    }
    for (key, value) in &changes {
        r.shown.insert(key.clone(), shown_value(value));
    }
    tracing::info!(?changes, transient, "configuration changed");
    if transient {
        return Ok(());
    }
    let Some(file) = r.local_file.clone() else {
        return Ok(());
    };
    let mut local = load_local(&file);
    local.extend(changes);
    persist(&file, &local).map_err(|e| {
        ApiError::internal(format!(
            "applied, but not kept for restarts: writing {}: {e}",
            file.display()
        ))
    })
}

fn persist(file: &Path, local: &BTreeMap<String, String>) -> std::io::Result<()> {
    let tmp = file.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(local)?)?;
    std::fs::rename(&tmp, file)
}

/// `PUT /v1/daemon/set-config?key=value&...[&transient=true]`.
pub async fn set_endpoint(Query(mut params): Query<HashMap<String, String>>) -> Response {
    let transient = params
        .remove(TRANSIENT)
        .is_some_and(|v| v == "true" || v == "1");
    match set(params.into_iter().collect(), transient) {
        Ok(()) => axum::http::StatusCode::OK.into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /v1/daemon?what=config` and `?what=log[&lines=N]`, answered alike by every node;
/// `None` for other queries.
pub fn daemon_query(
    what: &str,
    params: &HashMap<String, String>,
) -> Option<Result<Response, ApiError>> {
    match what {
        "config" => Some(Ok(axum::Json(show()).into_response())),
        "log" => Some(match params.get("lines").map(|n| n.parse::<usize>()) {
            None => Ok(crate::log_tail::tail(crate::log_tail::DEFAULT_LINES).into_response()),
            Some(Ok(n)) => Ok(crate::log_tail::tail(n).into_response()),
            Some(Err(_)) => Err(ApiError::bad_request("lines: expected a number of lines")),
        }),
        _ => None,
    }
}

/// Replaces the values of keys that hold secrets.
pub fn hide_secrets(shown: &mut BTreeMap<String, Value>) {
    for (key, value) in shown.iter_mut() {
        let secret = ["password", "secret", "users", "token", "key_file"]
            .iter()
            .any(|s| key.contains(s));
        if secret && !value.is_null() && key != "auth.secret_file" {
            *value = json!("********");
        }
    }
}

/// Flattens a JSON object to dotted keys (`{"space": {"high_wm": 90}}` → `space.high_wm`).
pub fn flatten(value: &Value) -> BTreeMap<String, Value> {
    fn walk(prefix: &str, v: &Value, out: &mut BTreeMap<String, Value>) {
        match v {
            Value::Object(map) if !map.is_empty() => {
                for (k, v) in map {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, v, out);
                }
            }
            _ => {
                out.insert(prefix.to_owned(), v.clone());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk("", value, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flattening_hides_secrets_and_keeps_file_keys() {
        let mut shown = flatten(&json!({
            "space": {"high_wm": 90, "dont_evict_time": "2h"},
            "proxy": {"admin_password": "hunter2"},
            "s3": {"users": "ak:sk", "listen": null},
            "auth": {"secret_file": "/etc/secret"},
        }));
        hide_secrets(&mut shown);
        assert_eq!(shown["space.high_wm"], json!(90));
        assert_eq!(shown["space.dont_evict_time"], json!("2h"));
        assert_eq!(shown["proxy.admin_password"], json!("********"));
        assert_eq!(shown["s3.users"], json!("********"));
        assert_eq!(shown["s3.listen"], Value::Null);
        assert_eq!(shown["auth.secret_file"], json!("/etc/secret"));
    }

    #[test]
    fn values_show_as_numbers_and_booleans_when_they_read_as_one() {
        assert_eq!(shown_value("85"), json!(85));
        assert_eq!(shown_value("true"), json!(true));
        assert_eq!(shown_value("debug"), json!("debug"));
    }
}

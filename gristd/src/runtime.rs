//! What a node shows of its configuration and what may change while it runs (`grist config
//! show|set`, served by `gristmill_node::settings`):
//! - every node: `log.level` (a `RUST_LOG`-style filter) and `log.access` (the access log);
//! - targets: the `space.*` settings (watermarks, `dont_evict_time`, the cache limit).
//!
//! Changes are kept in the state dir (`config.local.json`) and applied at start over the file
//! and the flags ([`apply_local`]), so a node that restarts keeps what an operator set.
//! Everything else is fixed at start; `show` still lists it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use gristmill_node::settings;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::{FileConfig, SpaceSettings};
use crate::logging::LogLevel;

/// Keys every node changes at run time.
pub const LOG_KEYS: &[&str] = &["log.level", "log.access"];

/// Keys a target changes at run time.
pub const SPACE_KEYS: &[&str] = &[
    "space.high_wm",
    "space.low_wm",
    "space.out_of_space_wm",
    "space.dont_evict_time",
    "space.check_interval",
    "space.max_cache_bytes",
];

/// `section` with the changes whose keys are `prefix.<field>` put over it; a value of the wrong
/// type is an error naming the key.
pub fn overlay<T: Serialize + DeserializeOwned>(
    section: &T,
    prefix: &str,
    changes: &BTreeMap<String, String>,
) -> Result<T, String> {
    let mut value = serde_json::to_value(section).map_err(|e| e.to_string())?;
    let fields = value
        .as_object_mut()
        .ok_or_else(|| format!("{prefix} is not a section"))?;
    let mut keys = Vec::new();
    for (key, text) in changes {
        if let Some(field) = key.strip_prefix(prefix).and_then(|k| k.strip_prefix('.')) {
            fields.insert(field.to_owned(), settings::shown_value(text));
            keys.push(key.as_str());
        }
    }
    serde_json::from_value(value).map_err(|e| format!("{}: {e}", keys.join(", ")))
}

/// The changes kept in `state_dir` for `keys`, put over `c` before it is resolved. The log keys
/// are applied by [`register_log`].
pub fn apply_local(c: &mut FileConfig, state_dir: &Path) -> anyhow::Result<()> {
    let file = state_dir.join(settings::LOCAL_FILE);
    let local = settings::load_local(&file);
    if local.keys().any(|k| k.starts_with("space.")) {
        // Kept changes that no longer fit the file's settings are ignored, not fatal: a node
        // must start (its log says which, and `config show` lists the values in force).
        match overlay(&c.space, "space", &local)
            .and_then(|s| s.resolve().map(|_| s).map_err(|e| e.to_string()))
        {
            Ok(space) => c.space = space,
            Err(e) => tracing::warn!(file = %file.display(), error = %e,
                "ignoring kept space settings that do not fit the configuration"),
        }
    }
    Ok(())
}

/// Sections of the file each kind of node reads.
const PROXY_SECTIONS: &[&str] = &["node", "auth", "tls", "proxy", "s3", "limits"];
const TARGET_SECTIONS: &[&str] = &[
    "node", "auth", "tls", "target", "space", "backend", "etl", "limits",
];

/// Publishes `c` as the node's shown configuration (the sections this kind of node reads,
/// secrets hidden), with the log settings and, on targets, the space settings in force.
/// Unset settings show as null: their defaults are in docs/operations.md.
pub fn publish(
    c: &FileConfig,
    space: Option<&gristmill_target::SpaceConfig>,
    state_dir: &Path,
    log_format: &str,
) {
    let sections = if space.is_some() {
        TARGET_SECTIONS
    } else {
        PROXY_SECTIONS
    };
    let mut shown = settings::flatten(&serde_json::to_value(c).unwrap_or_default());
    shown.retain(|k, v| {
        let section = k.split('.').next().unwrap_or_default();
        sections.contains(&section) && !v.as_object().is_some_and(|o| o.is_empty())
    });
    settings::hide_secrets(&mut shown);
    if let Some(s) = space {
        let secs = |d: std::time::Duration| format!("{}s", d.as_secs());
        for (key, value) in [
            ("space.high_wm", s.high_wm.into()),
            ("space.low_wm", s.low_wm.into()),
            ("space.out_of_space_wm", s.out_of_space.into()),
            ("space.dont_evict_time", secs(s.dont_evict_time).into()),
            ("space.check_interval", secs(s.check_interval).into()),
            ("space.max_cache_bytes", s.max_cache_bytes.into()),
        ] {
            shown.insert(key.to_owned(), value);
        }
    }
    shown.insert("log.format".into(), log_format.into());
    shown.insert(
        "log.access".into(),
        gristmill_node::metrics::access_log().into(),
    );
    shown.insert("log.level".into(), crate::logging::current_level().into());
    settings::publish(shown, state_dir.join(settings::LOCAL_FILE));
}

/// Makes the log settings changeable, applying the kept ones first.
pub fn register_log(level: LogLevel, state_dir: &Path) {
    let local = settings::load_local(&state_dir.join(settings::LOCAL_FILE));
    let apply = move |changes: &BTreeMap<String, String>| -> Result<(), String> {
        let access = match changes.get("log.access").map(String::as_str) {
            None => None,
            Some("true" | "1" | "on") => Some(true),
            Some("false" | "0" | "off") => Some(false),
            Some(other) => return Err(format!("log.access = {other}: expected true or false")),
        };
        if let Some(filter) = changes.get("log.level") {
            level.set(filter)?;
        }
        if let Some(on) = access {
            gristmill_node::metrics::set_access_log(on);
        }
        Ok(())
    };
    let kept: BTreeMap<String, String> = local
        .into_iter()
        .filter(|(k, _)| LOG_KEYS.contains(&k.as_str()))
        .collect();
    if !kept.is_empty()
        && let Err(e) = apply(&kept)
    {
        tracing::warn!(error = %e, "ignoring kept log settings");
    }
    settings::register(LOG_KEYS, Box::new(apply));
}

/// Makes a target's space settings changeable: checked as a whole, then swapped in.
pub fn register_space(file: SpaceSettings, live: gristmill_target::SharedSpaceConfig) {
    let file = Arc::new(Mutex::new(file));
    settings::register(
        SPACE_KEYS,
        Box::new(move |changes| {
            let mut current = file.lock().unwrap_or_else(|e| e.into_inner());
            let next = overlay(&*current, "space", changes)?;
            let resolved = next.resolve().map_err(|e| e.to_string())?;
            live.set(resolved)?;
            *current = next;
            Ok(())
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_parses_values_by_the_field_type_and_names_bad_keys() {
        let base = SpaceSettings::default();
        let changes = BTreeMap::from([
            ("space.high_wm".to_owned(), "85".to_owned()),
            ("space.dont_evict_time".to_owned(), "10m".to_owned()),
            ("space.max_cache_bytes".to_owned(), "1GiB".to_owned()),
            ("log.level".to_owned(), "debug".to_owned()),
        ]);
        let s = overlay(&base, "space", &changes).unwrap();
        assert_eq!(s.high_wm, Some(85));
        assert_eq!(s.dont_evict_time.unwrap().0.as_secs(), 600);
        assert_eq!(s.max_cache_bytes.unwrap().0, 1 << 30);
        let bad = BTreeMap::from([("space.high_wm".to_owned(), "300".to_owned())]);
        let e = overlay(&base, "space", &bad).unwrap_err();
        assert!(e.contains("space.high_wm"), "{e}");
    }
}

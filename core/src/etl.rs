//! ETL definitions: a named transform the cluster runs next to the data. Defined once (kept in
//! the bucket metadata, so every node gets it with the usual metadata push) and started by
//! every target on its own objects.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ApiError;

/// How a transform runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// The user's Python module (`transform(data, path, args) -> bytes`) in a pool of
    /// `gristmill.etl_worker` processes.
    Python,
    /// Any executable: per object (object on stdin, result on stdout) or long-lived speaking
    /// the worker's framed protocol (`framed: true`).
    Command,
    /// An external HTTP service: the object is POSTed, the answer is the result.
    Http,
}

/// An ETL definition (what `grist etl init` and the SDK send).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtlSpec {
    pub name: String,
    pub runtime: Runtime,
    /// Python: the module source.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub code: String,
    /// Command: the program and its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Command: a long-lived process speaking the framed protocol (else one process per object).
    #[serde(default)]
    pub framed: bool,
    /// Http: the service's base URL; each object is POSTed to `<url>/<object name>`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// Extra environment for the workers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Python: packages the code imports, as pip requirements (`numpy>=1.26`, `pillow`, a
    /// path to a wheel). Each target installs them into a virtual environment of its own
    /// (shared by ETLs with the same list) before starting the workers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<String>,
    /// Worker processes per target (python, framed command); 0 = 2.
    #[serde(default)]
    pub workers: usize,
    /// Longest one object may take; 0 = 30 s.
    #[serde(default)]
    pub timeout_secs: u64,
    /// Address-space limit of each worker process, bytes; 0 = 1 GiB.
    #[serde(default)]
    pub memory_limit: u64,
    /// Whether targets run it (`grist etl stop|start`).
    #[serde(default = "running")]
    pub running: bool,
}

fn running() -> bool {
    true
}

/// Most pip requirements one ETL may list.
pub const MAX_DEPENDENCIES: usize = 100;

/// Largest object an ETL transforms (objects pass through memory).
pub const MAX_ETL_OBJECT: u64 = 512 << 20;

impl EtlSpec {
    pub fn workers(&self) -> usize {
        if self.workers == 0 {
            2
        } else {
            self.workers.min(64)
        }
    }

    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(if self.timeout_secs == 0 {
            30
        } else {
            self.timeout_secs
        })
    }

    pub fn memory_limit(&self) -> u64 {
        if self.memory_limit == 0 {
            1 << 30
        } else {
            self.memory_limit
        }
    }

    /// Checks a definition before it is stored.
    pub fn validate(&self) -> Result<(), ApiError> {
        let bad = |why: &str| ApiError::bad_request(format!("ETL {:?}: {why}", self.name));
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !name_ok {
            return Err(bad("names are 1-64 characters of [A-Za-z0-9_-]"));
        }
        if !self.dependencies.is_empty() && self.runtime != Runtime::Python {
            return Err(bad("dependencies are for the python runtime"));
        }
        if self.dependencies.len() > MAX_DEPENDENCIES {
            return Err(bad(&format!("at most {MAX_DEPENDENCIES} dependencies")));
        }
        for d in &self.dependencies {
            // Requirements only: a leading '-' would be a pip option (another index, a
            // requirements file on the target, ...).
            if d.trim().is_empty() || d.trim_start().starts_with('-') || d.len() > 1024 {
                return Err(bad(&format!(
                    "dependency {d:?} is not a pip requirement (a name with an optional version, or a wheel path)"
                )));
            }
        }
        match self.runtime {
            Runtime::Python if self.code.trim().is_empty() => Err(bad("python needs code")),
            Runtime::Command if self.command.is_empty() => Err(bad("command needs a program")),
            Runtime::Http
                if !self.url.starts_with("http://") && !self.url.starts_with("https://") =>
            {
                Err(bad("http needs a http(s):// url"))
            }
            _ => Ok(()),
        }
    }
}

/// Splits `etl_name=a,b` (or `etl_pipeline`) into the ETLs to apply, in order.
pub fn pipeline(names: &str) -> Vec<String> {
    names
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A destination name with its extension mapped: `{"jpg": "npy"}` turns `a/b.jpg` into
/// `a/b.npy`; names with other (or no) extensions are kept.
pub fn map_extension(name: &str, ext: &BTreeMap<String, String>) -> String {
    let base_start = name.rfind('/').map_or(0, |i| i + 1);
    match name[base_start..].rfind('.') {
        Some(dot) => {
            let dot = base_start + dot;
            match ext.get(&name[dot + 1..]) {
                Some(to) => format!("{}.{}", &name[..dot], to.trim_start_matches('.')),
                None => name.to_owned(),
            }
        }
        None => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extension_map_and_pipeline() {
        let m: BTreeMap<String, String> = [("jpg".into(), "npy".into())].into();
        assert_eq!(map_extension("a/b.jpg", &m), "a/b.npy");
        assert_eq!(map_extension("a.x/b", &m), "a.x/b");
        assert_eq!(map_extension("b.png", &m), "b.png");
        assert_eq!(pipeline("a, b,"), ["a", "b"]);
    }

    #[test]
    fn dependencies_are_requirements_of_python_etls() {
        let spec = |runtime, deps: &[&str]| EtlSpec {
            name: "e".into(),
            runtime,
            code: "def transform(d, p, a): return d".into(),
            command: vec!["cat".into()],
            framed: false,
            url: String::new(),
            env: BTreeMap::new(),
            dependencies: deps.iter().map(|d| d.to_string()).collect(),
            workers: 0,
            timeout_secs: 0,
            memory_limit: 0,
            running: true,
        };
        assert!(
            spec(
                Runtime::Python,
                &["numpy>=1.2", "/w/x-1.0-py3-none-any.whl"]
            )
            .validate()
            .is_ok()
        );
        assert!(spec(Runtime::Command, &["numpy"]).validate().is_err());
        for bad in ["--index-url=http://evil", " -r /etc/shadow", ""] {
            let e = spec(Runtime::Python, &[bad]).validate().unwrap_err();
            assert!(e.message.contains("pip requirement"), "{}", e.message);
        }
    }
}

//! The crate graph keeps its promises (checked over `cargo metadata`, as resolved for this
//! workspace, so features other packages enable count too):
//! - `gristmill-core` has no server plumbing in its normal dependency tree;
//! - the client side — the package of `grist`, the SDK (`gristmill-client`) and the load
//!   generator (`gristmill-bench`, dev-dependencies included) — needs no server crate:
//!   neither `gristmill-target` (Linux-only: the warm-GET path uses preadv2), nor
//!   `gristmill-proxy`, nor `gristmill-node`;
//! - library crates read no environment variables: settings reach them as typed configs from
//!   `gristd` (or `grist`), which own the variables (`gristd/src/config/`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// One dependency edge: the dependency's id and the kinds it is needed as (`None` = normal,
/// `Some("build")`, `Some("dev")`).
type Edge = (String, Vec<Option<String>>);

/// The resolved workspace.
struct Graph {
    /// Package id → name.
    names: BTreeMap<String, String>,
    /// Package id → its dependency edges.
    deps: BTreeMap<String, Vec<Edge>>,
    /// Binary name → id of the package that builds it.
    bins: BTreeMap<String, String>,
}

/// Which edges a walk follows.
#[derive(Clone, Copy)]
enum Edges {
    /// Normal dependencies only.
    Normal,
    /// Normal and build dependencies, and the root's own dev-dependencies (a dependency's
    /// dev-dependencies are never built for it).
    AllOfRoot,
}

fn resolved() -> Graph {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(root)
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut names = BTreeMap::new();
    let mut bins = BTreeMap::new();
    for p in meta["packages"].as_array().unwrap() {
        let id = p["id"].as_str().unwrap().to_owned();
        names.insert(id.clone(), p["name"].as_str().unwrap().to_owned());
        for t in p["targets"].as_array().unwrap() {
            if t["kind"].as_array().unwrap().iter().any(|k| k == "bin") {
                let bin = t["name"].as_str().unwrap().to_owned();
                if let Some(other) = bins.insert(bin.clone(), id.clone()) {
                    panic!("binary {bin} built by {other} and {id}");
                }
            }
        }
    }
    let mut deps = BTreeMap::new();
    for node in meta["resolve"]["nodes"].as_array().unwrap() {
        let edges = node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let kinds = d["dep_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|k| k["kind"].as_str().map(str::to_owned))
                    .collect();
                (d["pkg"].as_str().unwrap().to_owned(), kinds)
            })
            .collect();
        deps.insert(node["id"].as_str().unwrap().to_owned(), edges);
    }
    Graph { names, deps, bins }
}

impl Graph {
    fn id(&self, package: &str) -> String {
        self.names
            .iter()
            .find(|(_, name)| *name == package)
            .map(|(id, _)| id.clone())
            .unwrap_or_else(|| panic!("no package {package} in the workspace"))
    }

    /// Every package in `root`'s tree (itself included), by name, each with a shortest path
    /// of package names from `root`.
    fn tree(&self, root: &str, edges: Edges) -> BTreeMap<String, Vec<String>> {
        let mut paths: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut queue = VecDeque::from([(root.to_owned(), vec![self.names[root].clone()])]);
        let mut seen = BTreeSet::from([root.to_owned()]);
        while let Some((id, path)) = queue.pop_front() {
            for (dep, kinds) in self.deps.get(&id).into_iter().flatten() {
                let followed = kinds.iter().any(|k| match (edges, k.as_deref()) {
                    (_, None) => true,
                    (Edges::Normal, _) => false,
                    (Edges::AllOfRoot, Some("dev")) => id == root,
                    (Edges::AllOfRoot, _) => true,
                });
                if followed && seen.insert(dep.clone()) {
                    let mut p = path.clone();
                    p.push(self.names[dep].clone());
                    queue.push_back((dep.clone(), p));
                }
            }
            paths.entry(self.names[&id].clone()).or_insert(path);
        }
        paths
    }
}

/// Every package name in `package`'s normal dependency tree (itself included).
pub(crate) fn normal_tree(package: &str) -> BTreeSet<String> {
    let g = resolved();
    g.tree(&g.id(package), Edges::Normal).into_keys().collect()
}

#[test]
fn core_has_no_server_plumbing() {
    let tree = normal_tree("gristmill-core");
    for banned in [
        "axum",
        "hyper",
        "reqwest",
        "rustls",
        "tokio-rustls",
        "gristmill-node",
    ] {
        assert!(
            !tree.contains(banned),
            "gristmill-core depends on {banned} (normal tree: {tree:?})"
        );
    }
    // And the check sees what it should: the node crate has them.
    let node = normal_tree("gristmill-node");
    for needed in ["axum", "hyper", "reqwest", "rustls", "gristmill-core"] {
        assert!(node.contains(needed), "gristmill-node lacks {needed}");
    }
}

/// The crates the client side must not need.
const SERVER_CRATES: &[&str] = &["gristmill-target", "gristmill-proxy", "gristmill-node"];

#[test]
fn client_side_needs_no_server_crate() {
    let g = resolved();
    let checked = [
        ("`grist`", g.bins["grist"].clone(), Edges::Normal),
        ("gristmill-client", g.id("gristmill-client"), Edges::Normal),
        ("gristmill-bench", g.id("gristmill-bench"), Edges::AllOfRoot),
    ];
    let mut wrong = Vec::new();
    for (what, id, edges) in &checked {
        let tree = g.tree(id, *edges);
        for banned in SERVER_CRATES {
            if let Some(path) = tree.get(*banned) {
                wrong.push(format!("{what} needs {banned}: {}", path.join(" -> ")));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // The walk finds what is there: `gristd` needs all three (else the check is vacuous),
    // and it is transitive (`grist` reaches hyper only through reqwest).
    let daemon = g.tree(&g.bins["gristd"], Edges::Normal);
    for banned in SERVER_CRATES {
        assert!(daemon.contains_key(*banned), "gristd without {banned}?");
    }
    let grist = g.tree(&g.bins["grist"], Edges::Normal);
    assert!(grist["hyper"].len() > 2, "{:?}", grist["hyper"]);
}

/// Non-test source of the library crates: no `env::var`, `var_os` or `vars` outside tests.
#[test]
fn library_crates_read_no_environment() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let mut found = Vec::new();
    for krate in ["core", "node", "proxy", "target", "shard", "etl", "client"] {
        let mut dirs = vec![root.join(krate).join("src")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if !name.ends_with(".rs") || name == "tests.rs" || name.ends_with("_tests.rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                // Unit tests sit at the end of a file, after `#[cfg(test)]`.
                let code = text.split("#[cfg(test)]").next().unwrap_or_default();
                for (i, line) in code.lines().enumerate() {
                    let line = line.trim_start();
                    if line.starts_with("//") {
                        continue;
                    }
                    if ["env::var(", "env::var_os(", "env::vars("]
                        .iter()
                        .any(|p| line.contains(p))
                    {
                        found.push(format!("{}:{}: {line}", path.display(), i + 1));
                    }
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "environment read in a library crate:\n{}",
        found.join("\n")
    );
}

/// The workspace denies `unsafe_code`; the one exception is the `cachestat` call in
/// `node/src/zero_copy.rs` (no safe wrapper exists). A second `allow(unsafe_code)` or
/// `unsafe` block anywhere in the workspace's sources fails here.
#[test]
fn unsafe_code_is_one_audited_call() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let mut found = Vec::new();
    let crates = [
        "core", "node", "proxy", "target", "shard", "etl", "client", "cli", "gristd", "tests",
        "benches",
    ];
    for krate in crates {
        let mut dirs = vec![root.join(krate).join("src")];
        if krate == "tests" || krate == "benches" {
            dirs.push(root.join(krate).join(krate));
        }
        while let Some(dir) = dirs.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                for (i, line) in text.lines().enumerate() {
                    let code = line.trim_start();
                    if code.starts_with("//") {
                        continue;
                    }
                    // Spelled in two parts so this test does not find itself.
                    let allow = concat!("allow(", "unsafe_code)");
                    if code.contains(allow) || code.contains(concat!("unsafe", " {")) {
                        found.push(format!("{}:{}", path.display(), i + 1));
                    }
                }
            }
        }
    }
    assert_eq!(
        found.len(),
        2,
        "expected exactly the cachestat call (its allow and its block):\n{}",
        found.join("\n")
    );
    assert!(
        found.iter().all(|f| f.contains("node/src/zero_copy.rs")),
        "{found:?}"
    );
}

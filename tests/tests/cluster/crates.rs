//! The crate graph keeps its promises (checked over `cargo metadata`, as resolved for this
//! workspace, so features other packages enable count too): `gristmill-core` has no server
//! plumbing in its normal dependency tree.

use std::collections::{BTreeMap, BTreeSet};

/// The resolved workspace: package id → (name, normal dependency ids).
fn resolved() -> (serde_json::Value, BTreeMap<String, (String, Vec<String>)>) {
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
    let names: BTreeMap<String, String> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["id"].as_str().unwrap().to_owned(),
                p["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut graph = BTreeMap::new();
    for node in meta["resolve"]["nodes"].as_array().unwrap() {
        let id = node["id"].as_str().unwrap().to_owned();
        let normal: Vec<String> = node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| {
                d["dep_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|k| k["kind"].is_null())
            })
            .map(|d| d["pkg"].as_str().unwrap().to_owned())
            .collect();
        graph.insert(id.clone(), (names[&id].clone(), normal));
    }
    (meta, graph)
}

/// Every package name in `package`'s normal dependency tree (itself included).
pub(crate) fn normal_tree(package: &str) -> BTreeSet<String> {
    let (_, graph) = resolved();
    let start = graph
        .iter()
        .find(|(_, (name, _))| name == package)
        .map(|(id, _)| id.clone())
        .unwrap_or_else(|| panic!("no package {package} in the workspace"));
    let mut seen = BTreeSet::new();
    let mut todo = vec![start];
    let mut names = BTreeSet::new();
    while let Some(id) = todo.pop() {
        if !seen.insert(id.clone()) {
            continue;
        }
        let (name, deps) = &graph[&id];
        names.insert(name.clone());
        todo.extend(deps.iter().cloned());
    }
    names
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

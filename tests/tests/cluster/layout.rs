//! The crate graph, checked over `cargo metadata`: `grist` (the client CLI), the SDK and the
//! load generator must build without server code — neither `gristmill-target` (Linux-only:
//! the warm-GET path uses preadv2) nor `gristmill-proxy` — so they build off Linux. The
//! walk follows normal and build dependencies transitively (dev-dependencies too, for the
//! packages checked with `dev`, at their first level only: a dependency's dev-dependencies
//! are never built for it).

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde_json::Value;

/// The crates the client side must not depend on.
const SERVER_CRATES: &[&str] = &["gristmill-target", "gristmill-proxy"];

/// `cargo metadata --format-version 1` of this workspace (with the resolve graph).
fn metadata() -> Value {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("Cargo.toml");
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--manifest-path",
        ])
        .arg(&manifest)
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata JSON")
}

/// One dependency edge: the dependency's id and the kinds it is needed as (`None` = normal,
/// `Some("build")`, `Some("dev")`).
type Edge = (String, Vec<Option<String>>);

/// The package graph: names by id, and each package's dependency edges with their kinds.
struct Graph {
    names: HashMap<String, String>,
    /// Package id → its dependency edges.
    deps: HashMap<String, Vec<Edge>>,
    packages: Vec<Value>,
}

impl Graph {
    fn new(meta: &Value) -> Self {
        let packages = meta["packages"].as_array().expect("packages").clone();
        let names = packages
            .iter()
            .map(|p| (str_of(&p["id"]), str_of(&p["name"])))
            .collect();
        let mut deps = HashMap::new();
        for node in meta["resolve"]["nodes"].as_array().expect("resolve.nodes") {
            let edges = node["deps"]
                .as_array()
                .expect("deps")
                .iter()
                .map(|d| {
                    let kinds = d["dep_kinds"]
                        .as_array()
                        .expect("dep_kinds (cargo >= 1.41)")
                        .iter()
                        .map(|k| k["kind"].as_str().map(str::to_owned))
                        .collect();
                    (str_of(&d["pkg"]), kinds)
                })
                .collect();
            deps.insert(str_of(&node["id"]), edges);
        }
        Self {
            names,
            deps,
            packages,
        }
    }

    /// The id of the package that builds binary `bin`.
    fn package_of_bin(&self, bin: &str) -> String {
        let found: Vec<String> = self
            .packages
            .iter()
            .filter(|p| {
                p["targets"].as_array().into_iter().flatten().any(|t| {
                    t["name"] == bin
                        && t["kind"]
                            .as_array()
                            .is_some_and(|k| k.contains(&"bin".into()))
                })
            })
            .map(|p| str_of(&p["id"]))
            .collect();
        assert_eq!(found.len(), 1, "packages building `{bin}`: {found:?}");
        found[0].clone()
    }

    /// The id of the workspace package `name`.
    fn package(&self, name: &str) -> String {
        self.names
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(id, _)| id.clone())
            .unwrap_or_else(|| panic!("no package {name}"))
    }

    /// Every package `root` needs, by name, each with a path of package names from `root`.
    /// Follows normal and build edges; dev edges too out of `root` itself when `dev`.
    fn needs(&self, root: &str, dev: bool) -> BTreeMap<String, Vec<String>> {
        let mut paths: HashMap<String, Vec<String>> = HashMap::new();
        let mut queue = VecDeque::from([(root.to_owned(), vec![self.names[root].clone()])]);
        while let Some((id, path)) = queue.pop_front() {
            for (dep, kinds) in self.deps.get(&id).into_iter().flatten() {
                let followed = kinds
                    .iter()
                    .any(|k| k.as_deref() != Some("dev") || (dev && id == root));
                if !followed || paths.contains_key(dep) || dep == root {
                    continue;
                }
                let mut p = path.clone();
                p.push(self.names[dep].clone());
                paths.insert(dep.clone(), p.clone());
                queue.push_back((dep.clone(), p));
            }
        }
        paths
            .into_iter()
            .map(|(id, p)| (self.names[&id].clone(), p))
            .collect()
    }
}

fn str_of(v: &Value) -> String {
    v.as_str().expect("a string").to_owned()
}

#[test]
fn client_side_packages_need_no_server_crate() {
    let g = Graph::new(&metadata());
    let checked = [
        ("the package of `grist`", g.package_of_bin("grist"), false),
        ("gristmill-client", g.package("gristmill-client"), false),
        (
            "gristmill-bench (dev-dependencies too)",
            g.package("gristmill-bench"),
            true,
        ),
    ];
    let mut wrong = Vec::new();
    for (what, id, dev) in &checked {
        let needs = g.needs(id, *dev);
        for bad in SERVER_CRATES {
            if let Some(path) = needs.get(*bad) {
                wrong.push(format!("{what} needs {bad}: {}", path.join(" -> ")));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // The walk finds what is there: `gristd` needs both (else the check above is vacuous).
    let daemon = g.needs(&g.package_of_bin("gristd"), false);
    for crate_name in SERVER_CRATES {
        assert!(
            daemon.contains_key(*crate_name),
            "gristd without {crate_name}?"
        );
    }
    // And it is transitive: `grist` reaches hyper only through reqwest.
    let grist = g.needs(&g.package_of_bin("grist"), false);
    assert!(grist["hyper"].len() > 2, "{:?}", grist["hyper"]);
}

//! The settings table of `docs/operations.md`, generated from the flags: one row per file key
//! with its flag, variable, the nodes that read it and its help line. A test keeps the doc
//! equal to [`settings_markdown`] and every file key tied to a flag.

use clap::CommandFactory;

use super::FileConfig;
use super::resolve::limit_env;
use crate::cli::Cli;

/// One row: file key, flag, variable, nodes, meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub key: String,
    pub flag: String,
    pub env: String,
    pub nodes: Vec<&'static str>,
    pub help: String,
}

/// Every setting, in the file's order.
pub fn rows() -> Vec<Row> {
    let cli = Cli::command();
    let roles = ["proxy", "target"];
    let mut rows = Vec::new();
    for key in FileConfig::keys() {
        if let Some(limit) = key.strip_prefix("limits.") {
            let help = gristmill_core::limits::Limits::described()
                .find(|(k, _)| *k == limit)
                .map(|(_, h)| h)
                .unwrap_or_default();
            rows.push(Row {
                key: key.clone(),
                flag: String::new(),
                env: limit_env(limit),
                nodes: roles.to_vec(),
                help: capitalized(help),
            });
            continue;
        }
        let mut row: Option<Row> = None;
        for role in roles {
            let sub = cli.find_subcommand(role).expect("subcommand");
            let Some(arg) = sub.get_arguments().find(|a| a.get_id() == key.as_str()) else {
                continue;
            };
            match &mut row {
                Some(r) => r.nodes.push(role),
                None => {
                    row = Some(Row {
                        key: key.clone(),
                        flag: arg.get_long().map(|l| format!("--{l}")).unwrap_or_default(),
                        env: arg
                            .get_env()
                            .map(|e| e.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                        nodes: vec![role],
                        help: arg.get_help().map(|h| h.to_string()).unwrap_or_default(),
                    })
                }
            }
        }
        rows.push(row.unwrap_or_else(|| panic!("config key {key} has no flag")));
    }
    rows
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// The table as markdown.
pub fn settings_markdown() -> String {
    let mut out =
        String::from("| file key | flag | variable | nodes | meaning |\n|---|---|---|---|---|\n");
    let code = |s: &str| {
        if s.is_empty() {
            String::new()
        } else {
            format!("`{s}`")
        }
    };
    for r in rows() {
        let nodes = if r.nodes.len() == 2 {
            "all".to_owned()
        } else {
            r.nodes.join(", ")
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            code(&r.key),
            code(&r.flag),
            code(&r.env),
            nodes,
            r.help.trim_end_matches('.').replace('|', "\\|")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_flag_is_a_file_key() {
        let keys = FileConfig::keys();
        let cli = Cli::command();
        for role in ["proxy", "target"] {
            let sub = cli.find_subcommand(role).unwrap();
            for arg in sub.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version" | "config") {
                    continue;
                }
                assert!(
                    keys.iter().any(|k| k == id),
                    "gristd {role} --{id} is not a file key"
                );
                assert!(arg.get_env().is_some(), "{id} has no variable");
                assert!(arg.get_help().is_some(), "{id} has no help");
            }
        }
        // Every key has a flag or is a limit (rows() panics otherwise).
        assert_eq!(rows().len(), keys.len());
    }

    #[test]
    fn docs_operations_settings_table_matches_the_flags() {
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/operations.md"
        ))
        .unwrap();
        let table = settings_markdown();
        assert!(
            doc.contains(&table),
            "docs/operations.md's settings table differs from the code; the table is:\n\n{table}"
        );
    }
}

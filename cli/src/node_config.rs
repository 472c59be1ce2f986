//! `grist config show|set` and `grist log show` (AIStore's `ais config cluster|node` and
//! `ais log show`), through the proxy, which asks the nodes: a node's settings in force
//! (which of them change at run time, which changes it keeps across restarts), run-time
//! changes for the whole cluster or one node, and a node's recent log.

use std::collections::BTreeMap;

use anyhow::bail;
use clap::Subcommand;
use comfy_table::{Table, presets::NOTHING};
use gristmill_client::Client;
use serde_json::Value;

#[derive(Debug, Subcommand)]
pub enum ConfigCmd {
    /// The settings in force: the cluster's (a value per key, or each node's where they
    /// differ) or one node's. `-` is unset (the default in docs/operations.md).
    Show {
        /// A node id (`grist show cluster`); all nodes when left out.
        node: Option<String>,
    },
    /// Change settings while nodes run: `grist config set [NODE] space.high_wm=85
    /// log.level=debug`. Without a node, every node that has the setting changes.
    Set {
        /// A node id, then KEY=VALUE pairs; or only the pairs.
        #[arg(required = true, num_args = 1.., value_name = "[NODE] KEY=VALUE")]
        args: Vec<String>,
        /// Until the node restarts only (by default the node keeps the change).
        #[arg(long)]
        transient: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum LogCmd {
    /// The latest lines of a node's log (kept in the node's memory, up to 4 MiB).
    Show {
        node: String,
        /// How many lines, the latest last.
        #[arg(long, default_value_t = 200)]
        lines: usize,
    },
}

pub async fn config(client: &Client, cmd: ConfigCmd, json_out: bool) -> anyhow::Result<()> {
    match cmd {
        ConfigCmd::Show { node } => {
            let all = client.node_configs(node.as_deref()).await?;
            if json_out {
                println!("{}", serde_json::to_string_pretty(&all)?);
                return Ok(());
            }
            match node {
                Some(id) => print_node(&all[&id]),
                None => print_cluster(&all),
            }
        }
        ConfigCmd::Set { args, transient } => {
            let (node, pairs) = split_set_args(&args)?;
            let answer = client.set_config(node, &pairs, transient).await?;
            if json_out {
                println!("{}", serde_json::to_string_pretty(&answer)?);
                return Ok(());
            }
            let nodes: Vec<&str> = answer
                .as_object()
                .map(|o| o.keys().map(String::as_str).collect())
                .unwrap_or_default();
            let what: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let kept = if transient { " (until restart)" } else { "" };
            println!("{} set on {}{kept}", what.join(" "), nodes.join(", "));
        }
    }
    Ok(())
}

pub async fn log(client: &Client, cmd: LogCmd, json_out: bool) -> anyhow::Result<()> {
    let LogCmd::Show { node, lines } = cmd;
    let text = client.node_log(&node, lines).await?;
    if json_out {
        let lines: Vec<&str> = text.lines().collect();
        println!("{}", serde_json::json!({"node": node, "lines": lines}));
    } else {
        print!("{text}");
    }
    Ok(())
}

/// Settings to change, in order.
type Changes = Vec<(String, String)>;

/// `[NODE] KEY=VALUE...`: the node is the first argument when it has no `=`.
fn split_set_args(args: &[String]) -> anyhow::Result<(Option<&str>, Changes)> {
    let (node, rest) = match args.split_first() {
        Some((first, rest)) if !first.contains('=') => (Some(first.as_str()), rest),
        _ => (None, args),
    };
    if rest.is_empty() {
        bail!("nothing to set: give KEY=VALUE pairs (for example space.high_wm=85)");
    }
    let pairs = rest
        .iter()
        .map(|a| match a.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
            _ => bail!("{a}: expected KEY=VALUE"),
        })
        .collect::<anyhow::Result<_>>()?;
    Ok((node, pairs))
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn print_node(answer: &Value) {
    if let Some(e) = answer["error"].as_str() {
        println!("error: {e}");
        return;
    }
    let runtime: Vec<&str> = answer["runtime"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut table = Table::new();
    table.load_preset(NOTHING);
    table.set_header(["KEY", "VALUE", "RUNTIME", "KEPT CHANGE"]);
    for (key, value) in answer["config"].as_object().into_iter().flatten() {
        let kept = answer["local"].get(key).map(text).unwrap_or_default();
        let live = if runtime.contains(&key.as_str()) {
            "yes"
        } else {
            ""
        };
        table.add_row([key.clone(), text(value), live.into(), kept]);
    }
    println!("{table}");
}

fn print_cluster(all: &Value) {
    // key → value → nodes with that value.
    let mut keys: BTreeMap<&str, BTreeMap<String, Vec<&str>>> = BTreeMap::new();
    let mut errors = Vec::new();
    for (node, answer) in all.as_object().into_iter().flatten() {
        if let Some(e) = answer["error"].as_str() {
            errors.push(format!("{node}: {e}"));
            continue;
        }
        for (key, value) in answer["config"].as_object().into_iter().flatten() {
            // Where a node keeps its files differs by nature; not worth a row per node.
            if matches!(
                key.as_str(),
                "node.listen" | "node.public_url" | "node.state_dir"
            ) || key.starts_with("target.mountpaths")
            {
                continue;
            }
            keys.entry(key)
                .or_default()
                .entry(text(value))
                .or_default()
                .push(node);
        }
    }
    let mut table = Table::new();
    table.load_preset(NOTHING);
    table.set_header(["KEY", "VALUE"]);
    for (key, values) in keys {
        let value = if values.len() == 1 {
            values.into_keys().next().unwrap_or_default()
        } else {
            values
                .iter()
                .map(|(v, nodes)| format!("{v} on {}", nodes.join(",")))
                .collect::<Vec<_>>()
                .join("; ")
        };
        table.add_row([key.to_owned(), value]);
    }
    println!("{table}");
    for e in errors {
        eprintln!("{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_arguments_take_an_optional_node_first() {
        let args: Vec<String> = ["t1", "a=1", "b=x=y"].map(String::from).into();
        let (node, pairs) = split_set_args(&args).unwrap();
        assert_eq!(node, Some("t1"));
        assert_eq!(pairs[1], ("b".into(), "x=y".into()));
        let args: Vec<String> = ["a=1"].map(String::from).into();
        assert_eq!(split_set_args(&args).unwrap().0, None);
        let args: Vec<String> = ["t1"].map(String::from).into();
        assert!(split_set_args(&args).is_err());
        let args: Vec<String> = ["t1", "=3"].map(String::from).into();
        assert!(split_set_args(&args).is_err());
    }
}

//! `grist cluster ...`: membership (add, remove, maintenance, decommission) and rebalance.

use clap::Subcommand;
use gristmill_client::Client;
use serde_json::json;

use crate::jobs::{self, FollowArgs};

#[derive(Debug, Subcommand)]
pub enum ClusterCmd {
    /// Proxies and targets in the cluster map (same as `grist show cluster`).
    Show,
    /// Register a running node by its URL.
    Add { url: String },
    /// Remove a node from the map now (its objects are rebalanced from the others' copies
    /// only if it is still reachable; prefer `decommission`).
    Remove { node: String },
    /// Maintenance: take a target out of placement (its objects move away) or bring it back.
    #[command(subcommand)]
    Maintenance(MaintenanceCmd),
    /// Move a target's objects away, then remove it from the map.
    Decommission { node: String },
    /// Start a rebalance by hand (map changes start one automatically).
    Rebalance {
        #[command(flatten)]
        follow: FollowArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum MaintenanceCmd {
    Start {
        node: String,
        /// A restart: nothing moves; requests skip the target, writes meant for it land on
        /// the next target and move back when it re-joins (which ends the maintenance).
        #[arg(long)]
        no_rebalance: bool,
    },
    Stop {
        node: String,
    },
}

pub async fn run(client: &Client, cmd: ClusterCmd, json_out: bool) -> anyhow::Result<bool> {
    let (action, value) = match cmd {
        ClusterCmd::Show => return Ok(false),
        ClusterCmd::Add { url } => ("join-node", json!({ "url": url })),
        ClusterCmd::Remove { node } => ("remove-node", json!({ "sid": node })),
        ClusterCmd::Maintenance(MaintenanceCmd::Start { node, no_rebalance }) => (
            "start-maintenance",
            json!({ "sid": node, "skip_rebalance": no_rebalance }),
        ),
        ClusterCmd::Maintenance(MaintenanceCmd::Stop { node }) => {
            ("stop-maintenance", json!({ "sid": node }))
        }
        ClusterCmd::Decommission { node } => ("decommission-node", json!({ "sid": node })),
        ClusterCmd::Rebalance { follow } => {
            let id = client.start_job("rebalance", json!({})).await?;
            jobs::started(client, &id, "rebalance", &follow, json_out).await?;
            return Ok(true);
        }
    };
    client.cluster_action(action, value.clone()).await?;
    crate::report(
        json_out,
        format!("{action}: done"),
        json!({"action": action, "value": value, "done": true}),
    );
    Ok(true)
}

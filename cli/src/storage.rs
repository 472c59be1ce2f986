//! `grist storage mountpath show|attach|detach|enable|disable`: a target's mountpaths at
//! runtime (AIStore's `ais storage mountpath ...`). The CLI finds the target in the cluster
//! map and talks to it directly (`PUT /v1/daemon/mountpaths`, `GET /v1/daemon?what=mountpaths`);
//! each change starts a resilver job on that target, which `--wait` follows.

use anyhow::Context;
use clap::Subcommand;
use comfy_table::{Table, presets::NOTHING};
use gristmill_client::{Client, Method};
use serde_json::{Value, json};

use crate::jobs::{self, FollowArgs};

#[derive(Debug, Subcommand)]
pub enum StorageCmd {
    /// Mountpaths of the targets: show, attach, detach, enable, disable.
    #[command(subcommand)]
    Mountpath(MountpathCmd),
}

#[derive(Debug, Subcommand)]
pub enum MountpathCmd {
    /// Each target's mountpaths (available, disabled, detaching) and resilver state.
    Show {
        /// Only this target.
        target: Option<String>,
    },
    /// Add a directory (created if missing) to a target's placement; objects resilver to it.
    Attach {
        target: String,
        path: String,
        #[command(flatten)]
        follow: FollowArgs,
    },
    /// Take a mountpath out of placement, move its objects away, then drop it.
    Detach {
        target: String,
        path: String,
        #[command(flatten)]
        follow: FollowArgs,
    },
    /// Put a disabled mountpath back into placement.
    Enable {
        target: String,
        path: String,
        #[command(flatten)]
        follow: FollowArgs,
    },
    /// Take a mountpath out of placement (objects move away; it stays listed as disabled).
    Disable {
        target: String,
        path: String,
        #[command(flatten)]
        follow: FollowArgs,
    },
}

/// The URL of target `id` in the cluster map.
async fn target_url(client: &Client, id: &str) -> anyhow::Result<String> {
    let smap = client.cluster_map().await?;
    let node = smap
        .tmap
        .get(id)
        .with_context(|| format!("no target {id:?} in the cluster map"))?;
    Ok(node.url().to_owned())
}

async fn mountpaths(client: &Client, url: &str) -> anyhow::Result<Value> {
    let req = client
        .request_url(Method::GET, &format!("{url}/v1/daemon"))
        .query(&[("what", "mountpaths")]);
    Ok(Client::send(req).await?.json().await?)
}

pub async fn run(client: &Client, cmd: StorageCmd, json_out: bool) -> anyhow::Result<()> {
    let StorageCmd::Mountpath(cmd) = cmd;
    let (action, target, path, follow) = match cmd {
        MountpathCmd::Show { target } => return show(client, target.as_deref(), json_out).await,
        MountpathCmd::Attach {
            target,
            path,
            follow,
        } => ("attach-mp", target, path, follow),
        MountpathCmd::Detach {
            target,
            path,
            follow,
        } => ("detach-mp", target, path, follow),
        MountpathCmd::Enable {
            target,
            path,
            follow,
        } => ("enable-mp", target, path, follow),
        MountpathCmd::Disable {
            target,
            path,
            follow,
        } => ("disable-mp", target, path, follow),
    };
    let url = target_url(client, &target).await?;
    let req = client
        .request_url(Method::PUT, &format!("{url}/v1/daemon/mountpaths"))
        .json(&json!({ "action": action, "value": path }));
    let answer: Value = Client::send(req).await?.json().await?;
    let job = answer["job"].as_str().unwrap_or_default().to_owned();
    let shown = answer["path"].as_str().unwrap_or(&path).to_owned();
    if job.is_empty() {
        if json_out {
            println!("{answer}");
        } else {
            println!("{action} {shown} on {target}: nothing to change");
        }
        return Ok(());
    }
    jobs::started(
        client,
        &job,
        &format!("{action} {shown} on {target}: resilver"),
        &follow,
        json_out,
    )
    .await
}

async fn show(client: &Client, only: Option<&str>, json_out: bool) -> anyhow::Result<()> {
    let smap = client.cluster_map().await?;
    let mut out = serde_json::Map::new();
    for (id, node) in &smap.tmap {
        if only.is_some_and(|o| o != id) {
            continue;
        }
        out.insert(id.clone(), mountpaths(client, node.url()).await?);
    }
    if let Some(o) = only
        && out.is_empty()
    {
        anyhow::bail!("no target {o:?} in the cluster map");
    }
    if json_out {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let mut t = Table::new();
    t.load_preset(NOTHING)
        .set_header(["TARGET", "MOUNTPATH", "STATE"]);
    for (id, v) in &out {
        for (key, state) in [
            ("available", "enabled"),
            ("disabled", "disabled"),
            ("waiting_dd", "detaching"),
        ] {
            for p in v[key].as_array().into_iter().flatten() {
                t.add_row([id.as_str(), p.as_str().unwrap_or_default(), state]);
            }
        }
        let job = v["resilver_job"].as_str().unwrap_or_default();
        if !job.is_empty() {
            t.add_row([id.as_str(), "", &format!("resilver {job} running")]);
        } else if v["resilver_pending"].as_bool() == Some(true) {
            t.add_row([id.as_str(), "", "resilver pending"]);
        }
    }
    println!("{t}");
    Ok(())
}

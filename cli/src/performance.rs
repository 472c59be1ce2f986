//! `grist show performance`: a live table per node (like `ais show performance`), computed from
//! two scrapes of every node's `/metrics` an interval apart: GET/PUT operations per second,
//! throughput, GET latency percentiles, cache hit ratio, errors, disk utilization and running
//! jobs.

use std::time::Duration;

use comfy_table::Table;
use comfy_table::presets::NOTHING;
use gristmill_client::Client;
use gristmill_core::perf::{Report, Scrape, node_perf};
use reqwest::Method;

async fn scrape(client: &Client, url: &str) -> anyhow::Result<Scrape> {
    let resp = Client::send(client.request_url(Method::GET, &format!("{url}/metrics"))).await?;
    Ok(Scrape::parse(&resp.text().await?))
}

/// Scrapes every node now and `interval` later, `count` times (0: until interrupted), and
/// prints a table (or one JSON report per line) each time.
pub async fn run(
    client: &Client,
    count: u64,
    interval: Duration,
    json: bool,
) -> anyhow::Result<()> {
    let mut shown = 0;
    loop {
        let smap = client.cluster_map().await?;
        let nodes: Vec<(String, String, String)> = smap
            .pmap
            .values()
            .chain(smap.tmap.values())
            .map(|n| {
                (
                    n.daemon_id.clone(),
                    n.daemon_type.clone(),
                    n.url().to_owned(),
                )
            })
            .collect();
        let first =
            futures::future::join_all(nodes.iter().map(|(_, _, u)| scrape(client, u))).await;
        tokio::time::sleep(interval).await;
        let second =
            futures::future::join_all(nodes.iter().map(|(_, _, u)| scrape(client, u))).await;
        let mut report = Report {
            interval_s: interval.as_secs_f64(),
            nodes: Vec::new(),
        };
        for ((id, role, _), (a, b)) in nodes.iter().zip(first.into_iter().zip(second)) {
            match (a, b) {
                (Ok(a), Ok(b)) => report.nodes.push(node_perf(id, role, &a, &b)),
                (Err(e), _) | (_, Err(e)) => eprintln!("{id}: {e:#}"),
            }
        }
        if json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            print_table(&report);
        }
        shown += 1;
        if count > 0 && shown >= count {
            return Ok(());
        }
    }
}

fn print_table(r: &Report) {
    let mut t = Table::new();
    t.load_preset(NOTHING).set_header([
        "NODE",
        "ROLE",
        "GET/s",
        "PUT/s",
        "OUT/s",
        "IN/s",
        "GET p50",
        "GET p99",
        "CACHE HIT",
        "ERR/s",
        "DISK",
        "JOBS",
    ]);
    let ms = |s: Option<f64>| {
        s.map_or("-".to_owned(), |s| {
            if s.is_finite() {
                format!("{:.1}ms", s * 1e3)
            } else {
                ">10s".into()
            }
        })
    };
    let pct = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{:.0}%", v * 100.0));
    for n in &r.nodes {
        t.add_row([
            n.node.clone(),
            n.role.clone(),
            format!("{:.1}", n.get_ops),
            format!("{:.1}", n.put_ops),
            human_rate(n.out_bytes_per_s),
            human_rate(n.in_bytes_per_s),
            ms(n.get_p50_s),
            ms(n.get_p99_s),
            pct(n.cache_hit_ratio),
            format!("{:.1}", n.errors_per_s),
            pct(n.disk_util),
            n.running_jobs.to_string(),
        ]);
    }
    println!("{t}\n");
}

fn human_rate(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.1}{}/s", UNITS[i])
}

//! `grist` commands that start and follow jobs: prefetch, evict, cp, space evict, and
//! `job show|wait|stop`. Every job command prints the job id; `--wait` follows it to the end
//! with a progress bar on a terminal (hidden otherwise; `--progress` implies `--wait`) and
//! fails when any object failed or the job was aborted.

use std::time::Duration;

use anyhow::bail;
use comfy_table::{Table, presets::NOTHING};
use gristmill_client::Client;
use gristmill_core::job::{JobState, JobStatus};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

/// Which objects a job works on (one of them; none = the whole bucket).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SelectionArgs {
    /// Comma-separated object names.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["template", "prefix"])]
    pub list: Vec<String>,
    /// Brace template, e.g. `shard-{0000..0999}.tar`.
    #[arg(long, conflicts_with = "prefix")]
    pub template: Option<String>,
    /// Objects whose names start with this.
    #[arg(long)]
    pub prefix: Option<String>,
}

impl SelectionArgs {
    pub fn is_empty(&self) -> bool {
        self.list.is_empty() && self.template.is_none() && self.prefix.is_none()
    }

    /// The selection fields of an action value (AIStore's names).
    pub fn to_value(&self) -> Value {
        let mut v = json!({});
        if !self.list.is_empty() {
            v["objnames"] = json!(self.list);
        }
        if let Some(t) = &self.template {
            v["template"] = json!(t);
        }
        if let Some(p) = &self.prefix {
            v["prefix"] = json!(p);
        }
        v
    }
}

/// How to follow a job once started.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct FollowArgs {
    /// Wait for the job to finish.
    #[arg(long)]
    pub wait: bool,
    /// Wait, with a progress bar (as --wait draws on a terminal).
    #[arg(long)]
    pub progress: bool,
    /// Give up waiting after this long (e.g. 10m); the job keeps running.
    #[arg(long, default_value = "24h")]
    pub timeout: String,
}

/// Prints a started job's id and, if asked, waits for it.
pub async fn started(
    client: &Client,
    id: &str,
    what: &str,
    follow: &FollowArgs,
    json_out: bool,
) -> anyhow::Result<()> {
    if !(follow.wait || follow.progress) {
        if json_out {
            println!("{}", json!({ "job": id }));
        } else {
            println!("{what}: job {id} started (`grist job wait {id}` to follow)");
        }
        return Ok(());
    }
    let timeout = gristmill_core::time::parse_duration(&follow.timeout)?;
    // The bar draws on stderr only when it is a terminal (indicatif hides it otherwise).
    let status = wait(client, id, true, timeout).await?;
    finish(&status, json_out)
}

/// Polls a job until it ends (or `timeout`), drawing a bar with `progress`.
pub async fn wait(
    client: &Client,
    id: &str,
    progress: bool,
    timeout: Duration,
) -> anyhow::Result<JobStatus> {
    let deadline = tokio::time::Instant::now() + timeout;
    let bar = if progress {
        let b = ProgressBar::new(0);
        b.set_style(
            ProgressStyle::with_template("{spinner} {bar:40} {pos}/{len} objects {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    } else {
        ProgressBar::hidden()
    };
    let mut pause = Duration::from_millis(50);
    loop {
        let s = client.job(id).await?;
        if let Some(total) = s.total_objects {
            bar.set_length(total);
        }
        bar.set_position(s.objects);
        bar.set_message(format!("{} {}", human(s.bytes), errors_note(&s)));
        if s.state != JobState::Running {
            bar.finish_and_clear();
            return Ok(s);
        }
        if tokio::time::Instant::now() >= deadline {
            bar.abandon();
            bail!("job {id} is still running after {timeout:?}");
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

fn errors_note(s: &JobStatus) -> String {
    if s.errors == 0 {
        String::new()
    } else {
        format!("({} errors)", s.errors)
    }
}

/// Prints the outcome of an ended job; an error if it was aborted or any object failed.
pub fn finish(s: &JobStatus, json_out: bool) -> anyhow::Result<()> {
    if json_out {
        println!("{}", serde_json::to_string_pretty(s)?);
    } else {
        println!(
            "job {} ({}) {}: {} objects ({} skipped), {}, {} errors",
            s.id,
            s.kind,
            state_name(s.state),
            s.objects,
            s.skipped,
            human(s.bytes),
            s.errors
        );
        if !s.counters.is_empty() {
            let counters: Vec<String> =
                s.counters.iter().map(|(k, v)| format!("{k} {v}")).collect();
            println!("  {}", counters.join(", "));
        }
        for e in s.error_samples().take(20) {
            println!("  {}: {}", e.name, e.error);
        }
    }
    match s.state {
        JobState::Aborted => bail!("job {} was aborted: {}", s.id, s.abort_reason()),
        _ if s.errors > 0 => bail!("job {}: {} objects failed", s.id, s.errors),
        _ => Ok(()),
    }
}

fn state_name(s: JobState) -> &'static str {
    match s {
        JobState::Running => "running",
        JobState::Finished => "finished",
        JobState::Aborted => "aborted",
    }
}

/// `grist job show [ID|KIND]`: a table of jobs, or one job with its targets.
pub async fn show(
    client: &Client,
    what: Option<&str>,
    running: bool,
    json_out: bool,
) -> anyhow::Result<()> {
    let one = match what {
        Some(w) if gristmill_core::job::JobKind::parse(w).is_none() => Some(client.job(w).await?),
        _ => None,
    };
    if let Some(s) = one {
        if json_out {
            println!("{}", serde_json::to_string_pretty(&s)?);
            return Ok(());
        }
        let mut t = Table::new();
        t.load_preset(NOTHING).set_header([
            "TARGET", "STATE", "OBJECTS", "TOTAL", "BYTES", "SKIPPED", "ERRORS",
        ]);
        for snap in &s.targets {
            t.add_row([
                snap.node.clone(),
                state_name(snap.state).into(),
                snap.objects.to_string(),
                snap.total_objects.map_or("?".into(), |n| n.to_string()),
                human(snap.bytes),
                snap.skipped.to_string(),
                snap.errors.to_string(),
            ]);
        }
        println!("job {} ({}) {}", s.id, s.kind, state_name(s.state));
        println!("{t}");
        for (k, v) in &s.counters {
            println!("  {k}: {v}");
        }
        for e in s.error_samples().take(50) {
            println!("  error: {}: {}", e.name, e.error);
        }
        return Ok(());
    }
    let jobs = client.jobs(what, running).await?;
    if json_out {
        println!("{}", serde_json::to_string_pretty(&jobs)?);
        return Ok(());
    }
    let mut t = Table::new();
    t.load_preset(NOTHING).set_header([
        "JOB", "KIND", "BUCKET", "STATE", "OBJECTS", "TOTAL", "BYTES", "ERRORS",
    ]);
    for s in jobs {
        t.add_row([
            s.id.clone(),
            s.kind.to_string(),
            s.bck.as_ref().map_or(String::new(), |b| b.to_string()),
            state_name(s.state).into(),
            s.objects.to_string(),
            s.total_objects.map_or("?".into(), |n| n.to_string()),
            human(s.bytes),
            s.errors.to_string(),
        ]);
    }
    println!("{t}");
    Ok(())
}

/// Sizes for people: `1.50MiB`.
pub fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n}B")
    } else {
        format!("{v:.2}{}", UNITS[u])
    }
}

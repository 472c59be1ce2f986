//! `grist etl ...`: define, inspect and run ETLs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Subcommand;
use gristmill_client::{Client, Method};
use gristmill_core::Bck;
use gristmill_core::etl::{EtlSpec, Runtime};

use crate::jobs::{self, FollowArgs, SelectionArgs};

#[derive(Debug, Subcommand)]
pub enum EtlCmd {
    /// Define an ETL (every target starts it): from a spec file (JSON, TOML or YAML-like
    /// `key: value` lines) or from flags.
    Init {
        /// Spec file with the fields of an ETL definition (name, runtime, code|command|url, ...).
        #[arg(short = 'f', long = "spec")]
        spec: Option<PathBuf>,
        #[arg(long)]
        name: Option<String>,
        /// Python module defining `transform(data, path, args) -> bytes`.
        #[arg(long, conflicts_with_all = ["command", "url"])]
        code: Option<PathBuf>,
        /// A program run per object (stdin → stdout), e.g. "gzip -c -n".
        #[arg(long, conflicts_with = "url")]
        command: Option<String>,
        /// With --command: a long-lived program speaking the framed protocol.
        #[arg(long)]
        framed: bool,
        /// An HTTP service receiving each object in a POST.
        #[arg(long)]
        url: Option<String>,
        /// Worker processes per target.
        #[arg(long, default_value_t = 0)]
        workers: usize,
        /// Per-object timeout in seconds.
        #[arg(long, default_value_t = 0)]
        timeout: u64,
        /// Memory limit per worker (e.g. 512MiB).
        #[arg(long)]
        memory: Option<String>,
        /// Environment for the workers: KEY=VALUE (repeatable).
        #[arg(long = "env")]
        env: Vec<String>,
        /// With --code: pip requirements the code imports (comma-separated or repeated, e.g.
        /// `--deps numpy,pillow>=10`); each target installs them before its workers start.
        #[arg(long = "deps", value_delimiter = ',', requires = "code")]
        deps: Vec<String>,
    },
    /// All ETLs, or one with per-target counters.
    /// `grist etl show errors NAME JOB`: the objects an offline run of the ETL could not
    /// transform, with why.
    Show {
        #[arg(num_args = 0..=3, value_names = ["NAME | errors", "NAME", "JOB"])]
        args: Vec<String>,
    },
    /// Stop an ETL on every target (its definition stays).
    Stop { name: String },
    /// Start a stopped ETL.
    Start { name: String },
    /// Remove an ETL.
    Rm { name: String },
    /// Recent output of an ETL's workers, per target.
    Logs { name: String },
    /// Transform one object: `grist etl object NAME ais://b/o OUT` (`-` = stdout).
    Object {
        name: String,
        object: String,
        out: String,
        #[arg(long, default_value = "")]
        args: String,
    },
    /// Transform a bucket (or a selection) into another bucket (a job).
    Bucket {
        /// ETL name; several comma-separated run as a pipeline.
        name: String,
        source: String,
        destination: String,
        #[command(flatten)]
        select: SelectionArgs,
        /// Extension map for output names: "{jpg:npy, png:npy}".
        #[arg(long)]
        ext: Option<String>,
        #[arg(long, default_value = "")]
        args: String,
        #[arg(long, default_value = "")]
        prepend: String,
        #[arg(long)]
        dry_run: bool,
        #[arg(long, default_value_t = 0)]
        num_workers: usize,
        #[command(flatten)]
        follow: FollowArgs,
    },
}

/// `{jpg:npy, png:npy}` (AIStore's CLI form) or JSON.
fn parse_ext(s: &str) -> anyhow::Result<BTreeMap<String, String>> {
    if let Ok(m) = serde_json::from_str(s) {
        return Ok(m);
    }
    let inner = s.trim().trim_start_matches('{').trim_end_matches('}');
    inner
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|pair| {
            let (a, b) = pair
                .split_once(':')
                .with_context(|| format!("{pair:?}: expected from:to"))?;
            Ok((
                a.trim().trim_start_matches('.').to_owned(),
                b.trim().trim_start_matches('.').to_owned(),
            ))
        })
        .collect()
}

/// A spec file: JSON, TOML, or simple YAML (`key: value` lines, `code: |` blocks).
fn read_spec(path: &PathBuf) -> anyhow::Result<EtlSpec> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    if let Ok(s) = serde_json::from_str(&text) {
        return Ok(s);
    }
    if let Ok(s) = toml::from_str(&text) {
        return Ok(s);
    }
    let mut map = serde_json::Map::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let (k, v) = line
            .split_once(':')
            .with_context(|| format!("{}: cannot parse line {line:?}", path.display()))?;
        let v = v.trim();
        let value = if v == "|" {
            let mut block = String::new();
            while let Some(next) = lines.peek() {
                if !next.starts_with(' ') && !next.trim().is_empty() {
                    break;
                }
                block.push_str(next.strip_prefix("  ").unwrap_or(next.trim_start()));
                block.push('\n');
                lines.next();
            }
            serde_json::Value::String(block)
        } else if let Ok(n) = v.parse::<u64>() {
            n.into()
        } else if v == "true" || v == "false" {
            (v == "true").into()
        } else if v.starts_with('[') {
            serde_json::from_str(v).with_context(|| format!("{k}: expected a JSON list"))?
        } else {
            v.trim_matches('"').into()
        };
        map.insert(k.trim().to_owned(), value);
    }
    serde_json::from_value(serde_json::Value::Object(map))
        .with_context(|| format!("{}: not an ETL definition", path.display()))
}

pub async fn run(client: &Client, cmd: EtlCmd, json_out: bool) -> anyhow::Result<()> {
    match cmd {
        EtlCmd::Init {
            spec,
            name,
            code,
            command,
            framed,
            url,
            workers,
            timeout,
            memory,
            env,
            deps,
        } => {
            let mut s = match spec {
                Some(path) => read_spec(&path)?,
                None => {
                    let name = name.context("--name (or a spec file with -f)")?;
                    let (runtime, code, command, url) = match (code, command, url) {
                        (Some(path), None, None) => {
                            let src = std::fs::read_to_string(&path)
                                .with_context(|| path.display().to_string())?;
                            (Runtime::Python, src, Vec::new(), String::new())
                        }
                        (None, Some(c), None) => (
                            Runtime::Command,
                            String::new(),
                            c.split_whitespace().map(String::from).collect(),
                            String::new(),
                        ),
                        (None, None, Some(u)) => (Runtime::Http, String::new(), Vec::new(), u),
                        _ => bail!("give one of --code, --command or --url"),
                    };
                    EtlSpec {
                        name,
                        runtime,
                        code,
                        command,
                        framed,
                        url,
                        env: BTreeMap::new(),
                        dependencies: Vec::new(),
                        workers,
                        timeout_secs: timeout,
                        memory_limit: 0,
                        running: true,
                    }
                }
            };
            if let Some(m) = memory {
                s.memory_limit = gristmill_core::time::parse_size(&m)?;
            }
            for kv in env {
                let (k, v) = kv.split_once('=').context("--env KEY=VALUE")?;
                s.env.insert(k.to_owned(), v.to_owned());
            }
            s.dependencies.extend(
                deps.into_iter()
                    .map(|d| d.trim().to_owned())
                    .filter(|d| !d.is_empty()),
            );
            let name = client.etl_init(&s).await?;
            crate::report(
                json_out,
                format!("ETL {name:?} defined"),
                serde_json::json!({"etl": name, "defined": true}),
            );
        }
        EtlCmd::Show { args } if args.len() == 3 && args[0] == "errors" => {
            show_errors(client, &args[1], &args[2], json_out).await?;
        }
        EtlCmd::Show { args } => {
            if args.len() > 1 {
                bail!("usage: grist etl show [NAME] | grist etl show errors NAME JOB");
            }
            let name = args.first();
            let v = client.etl_show(name.map(String::as_str)).await?;
            if json_out || name.is_some() {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let mut t = comfy_table::Table::new();
                t.load_preset(comfy_table::presets::NOTHING)
                    .set_header(["NAME", "RUNTIME", "RUNNING", "OBJECTS", "ERRORS"]);
                for e in v.as_array().into_iter().flatten() {
                    t.add_row([
                        e["name"].as_str().unwrap_or("").to_owned(),
                        e["runtime"].as_str().unwrap_or("").to_owned(),
                        e["running"].to_string(),
                        e["objects"].to_string(),
                        e["errors"].to_string(),
                    ]);
                }
                println!("{t}");
            }
        }
        EtlCmd::Stop { name } => {
            client.etl_control(&name, "stop").await?;
            crate::report(
                json_out,
                format!("ETL {name:?} stopped"),
                serde_json::json!({"etl": name, "stopped": true}),
            );
        }
        EtlCmd::Start { name } => {
            client.etl_control(&name, "start").await?;
            crate::report(
                json_out,
                format!("ETL {name:?} started"),
                serde_json::json!({"etl": name, "started": true}),
            );
        }
        EtlCmd::Rm { name } => {
            client.etl_remove(&name).await?;
            crate::report(
                json_out,
                format!("ETL {name:?} removed"),
                serde_json::json!({"etl": name, "removed": true}),
            );
        }
        EtlCmd::Logs { name } => {
            let v = client.etl_logs(&name).await?;
            if json_out {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else if let Some(m) = v.as_object() {
                for (node, lines) in m {
                    for l in lines.as_array().into_iter().flatten() {
                        println!("[{node}] {}", l.as_str().unwrap_or(""));
                    }
                }
            }
        }
        EtlCmd::Object {
            name,
            object,
            out,
            args,
        } => {
            let (bck, obj) = Bck::parse_uri(&object)?;
            if obj.is_empty() {
                bail!("{object}: expected bucket/object");
            }
            let data = client.get_transformed(&bck, &obj, &name, &args).await?;
            if out == "-" {
                use std::io::Write;
                std::io::stdout().write_all(&data)?;
            } else {
                std::fs::write(&out, &data).with_context(|| out.clone())?;
                eprintln!("{object} → ETL {name} → {out} ({} bytes)", data.len());
            }
        }
        EtlCmd::Bucket {
            name,
            source,
            destination,
            select,
            ext,
            args,
            prepend,
            dry_run,
            num_workers,
            follow,
        } => {
            let (src, dst) = (bucket(&source)?, bucket(&destination)?);
            let mut v = select.to_value();
            v["id"] = name.clone().into();
            v["etl_args"] = args.into();
            v["prepend"] = prepend.into();
            v["dry_run"] = dry_run.into();
            v["num-workers"] = num_workers.into();
            if let Some(e) = ext {
                v["ext"] = serde_json::to_value(parse_ext(&e)?)?;
            }
            let id = client
                .bucket_action(
                    Method::POST,
                    &src,
                    gristmill_core::api::action::ETL_BUCKET,
                    v,
                    &[("bck_to", dst.to_string())],
                )
                .await?;
            jobs::started(
                client,
                &id,
                &format!("ETL {name} {src} => {dst}"),
                &follow,
                json_out,
            )
            .await?;
        }
    }
    Ok(())
}

/// `grist etl show errors NAME JOB`: the error samples of an offline run of ETL `NAME`.
async fn show_errors(client: &Client, name: &str, job: &str, json_out: bool) -> anyhow::Result<()> {
    let s = client.job(job).await?;
    if s.kind != gristmill_core::job::JobKind::Etl {
        bail!("job {job} is a {} job, not an ETL run", s.kind);
    }
    if !s.etl.iter().any(|e| e == name) {
        bail!("job {job} ran {:?}, not ETL {name:?}", s.etl.join(","));
    }
    let errors: Vec<_> = s.error_samples().collect();
    if json_out {
        println!("{}", serde_json::to_string_pretty(&errors)?);
        return Ok(());
    }
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::NOTHING)
        .set_header(["OBJECT", "ERROR"]);
    for e in &errors {
        t.add_row([e.name.clone(), e.error.clone()]);
    }
    println!("{t}");
    if s.errors > errors.len() as u64 {
        println!(
            "({} errors in all; the first per target are listed)",
            s.errors
        );
    }
    Ok(())
}

fn bucket(uri: &str) -> anyhow::Result<Bck> {
    let (bck, rest) = Bck::parse_uri(uri)?;
    if !rest.is_empty() {
        bail!("{uri}: expected a bucket, not an object");
    }
    Ok(bck)
}

#[cfg(test)]
mod tests {
    #[test]
    fn extension_maps() {
        let m = super::parse_ext("{jpg:npy, .png:.npy}").unwrap();
        assert_eq!(m["jpg"], "npy");
        assert_eq!(m["png"], "npy");
        assert_eq!(super::parse_ext(r#"{"a":"b"}"#).unwrap()["a"], "b");
    }
}

//! `grist`: the Gristmill command line (AIStore's `ais`, for Gristmill).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use comfy_table::{Table, presets::NOTHING};
use gristmill_cli::jobs::{self, FollowArgs, SelectionArgs};
use gristmill_cli::report;
use gristmill_client::{Client, Method};
use gristmill_core::Bck;
use gristmill_core::api::{ListEntry, ListObjectsMsg, action};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

#[derive(Parser)]
#[command(name = "grist", version, about = "Gristmill command line")]
struct Cli {
    /// Cluster endpoint (any proxy); several, comma-separated: the first that accepts a
    /// connection is used. Default: $GRIST_ENDPOINT, else $AIS_ENDPOINT, else `endpoint` in
    /// ~/.config/grist/config.toml, else http://127.0.0.1:8080.
    #[arg(long, global = true, env = "GRIST_ENDPOINT")]
    endpoint: Option<String>,
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    json: bool,
    #[command(flatten)]
    conn: gristmill_cli::auth::ConnArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a shell completion script: `grist completion bash > /etc/bash_completion.d/grist`,
    /// `grist completion zsh > "${fpath[1]}/_grist"`, `grist completion fish > ~/.config/fish/completions/grist.fish`.
    Completion { shell: clap_complete::Shell },
    /// Create or remove buckets.
    #[command(subcommand)]
    Bucket(BucketCmd),
    /// List buckets, or the objects of one bucket.
    Ls {
        /// Bucket (ais://b); omit to list buckets.
        bucket: Option<String>,
        /// Only names starting with this prefix.
        #[arg(long, default_value = "")]
        prefix: String,
        /// Properties to show: name,size,checksum,atime,version,location,copies or all.
        #[arg(long, default_value = "name,size")]
        props: String,
        /// Objects per request (0 = server default).
        #[arg(long, default_value_t = 0)]
        page_size: u64,
        /// Stop after this many objects (0 = all).
        #[arg(long, default_value_t = 0)]
        limit: usize,
        /// Remote buckets: only objects cached in the cluster.
        #[arg(long, conflicts_with = "not_cached")]
        cached: bool,
        /// Remote buckets: only objects not cached in the cluster.
        #[arg(long)]
        not_cached: bool,
        /// Versioned buckets: every version and delete marker, newest first per object.
        #[arg(long)]
        versions: bool,
        /// No recursion: one level under the prefix, deeper names folded into their
        /// `dir/` (listed first).
        #[arg(long)]
        nr: bool,
        /// Only the count and total size of what the listing selects.
        #[arg(long, conflicts_with = "nr")]
        summary: bool,
    },
    /// Upload a file, a directory (with -r) or stdin (`-`).
    Put {
        source: String,
        /// Destination: ais://bucket[/name or prefix/].
        destination: String,
        /// Upload a directory recursively.
        #[arg(short, long)]
        recursive: bool,
        /// Show a progress bar.
        #[arg(long)]
        progress: bool,
    },
    /// Download an object to a file, or to stdout with `-`; with --prefix or --template,
    /// many objects of a bucket into a directory (in parallel).
    Get {
        /// ais://bucket/object, or ais://bucket with --prefix / --template.
        object: String,
        /// File (`-`: stdout), or the directory for --prefix / --template (default: `.`).
        destination: Option<String>,
        /// Versioned buckets: this version of the object (`grist ls --versions` lists them).
        #[arg(long)]
        version_id: Option<String>,
        /// Every object whose name starts with this (listed); saved under the directory
        /// by the rest of its name.
        #[arg(long, conflicts_with_all = ["template", "version_id"])]
        prefix: Option<String>,
        /// Brace template of names, e.g. `img-{0000..0999}.jpg` (not listed; missing ones are
        /// skipped and counted).
        #[arg(long, conflicts_with = "version_id")]
        template: Option<String>,
        /// Downloads at once.
        #[arg(long, default_value_t = 16)]
        parallel: usize,
    },
    /// Remove objects (in a versioned bucket: a delete marker, unless --version-id); with
    /// --prefix or --template, many objects of one bucket, after a confirmation.
    Rmo {
        /// ais://bucket/object ...; or one ais://bucket with --prefix / --template.
        objects: Vec<String>,
        /// Versioned buckets: delete this version of the one object named, for good.
        #[arg(long)]
        version_id: Option<String>,
        /// Every object whose name starts with this.
        #[arg(long, conflicts_with_all = ["template", "version_id"])]
        prefix: Option<String>,
        /// Brace template of names.
        #[arg(long, conflicts_with = "version_id")]
        template: Option<String>,
        /// Do not ask for confirmation.
        #[arg(short = 'y', long)]
        yes: bool,
        /// Deletes at once.
        #[arg(long, default_value_t = 16)]
        parallel: usize,
    },
    /// Object operations.
    #[command(subcommand)]
    Object(ObjectCmd),
    /// Show cluster information.
    #[command(subcommand)]
    Show(ShowCmd),
    /// Cache objects of a remote bucket in the cluster (a job).
    Prefetch {
        bucket: String,
        #[command(flatten)]
        select: SelectionArgs,
        /// Re-validate cached copies against the remote and re-fetch changed ones.
        #[arg(long)]
        latest: bool,
        /// Objects fetched at once per target (0 = default).
        #[arg(long, default_value_t = 0)]
        num_workers: usize,
        #[command(flatten)]
        follow: FollowArgs,
    },
    /// Drop cached copies of remote objects (the remote keeps them). Without a selection,
    /// evicts the whole bucket and forgets it (unless --keep-md).
    Evict {
        bucket: String,
        #[command(flatten)]
        select: SelectionArgs,
        /// Whole-bucket evict: keep the bucket in the cluster's metadata.
        #[arg(long)]
        keep_md: bool,
        #[command(flatten)]
        follow: FollowArgs,
    },
    /// Copy a bucket, or selected objects, to another bucket (any providers; a job).
    Cp {
        source: String,
        destination: String,
        #[command(flatten)]
        select: SelectionArgs,
        /// Prepend this to every destination name.
        #[arg(long, default_value = "")]
        prepend: String,
        /// With --prefix or --template: replace the source prefix with this.
        #[arg(long)]
        to_prefix: Option<String>,
        /// Only count what would be copied.
        #[arg(long)]
        dry_run: bool,
        #[arg(long, default_value_t = 0)]
        num_workers: usize,
        #[command(flatten)]
        follow: FollowArgs,
    },
    /// Re-read and verify every stored copy (checksum and size) of a bucket, or of all
    /// buckets; quarantine and repair corrupt ones from a replica or the remote (a job).
    Scrub {
        /// Bucket (ais://b, s3://b); omit to scrub every bucket.
        bucket: Option<String>,
        /// Only objects whose names start with this.
        #[arg(long)]
        prefix: Option<String>,
        /// Only report corrupt copies: no quarantine, no repair.
        #[arg(long)]
        no_repair: bool,
        #[command(flatten)]
        follow: FollowArgs,
    },
    /// Jobs: show, wait for, stop.
    #[command(subcommand)]
    Job(JobCmd),
    /// Disk space: start an LRU eviction pass.
    #[command(subcommand)]
    Space(SpaceCmd),
    /// ETL: transforms that run on the targets, next to the data.
    #[command(subcommand)]
    Etl(gristmill_cli::etl::EtlCmd),
    /// Shards: pack, list, read, append; archive bucket objects; synthetic shards.
    #[command(subcommand)]
    Archive(gristmill_cli::shards::ArchiveCmd),
    /// Get many objects and shard members as one archive, in order (get-batch).
    Batch(gristmill_cli::shards::BatchArgs),
    /// Re-pack the samples of shards into new shards of a target size (a job).
    Reshard(gristmill_cli::shards::ReshardArgs),
    /// Cluster membership: add, remove, maintenance, decommission, rebalance.
    #[command(subcommand)]
    Cluster(gristmill_cli::cluster::ClusterCmd),
    /// Settings in force on the nodes, and changes while they run (space, log).
    #[command(subcommand)]
    Config(gristmill_cli::node_config::ConfigCmd),
    /// A node's recent log.
    #[command(subcommand)]
    Log(gristmill_cli::node_config::LogCmd),
    /// Storage: a target's mountpaths at runtime (show, attach, detach, enable, disable).
    #[command(subcommand)]
    Storage(gristmill_cli::storage::StorageCmd),
    /// Log in, tokens and users (when the cluster runs with auth on).
    #[command(subcommand)]
    Auth(gristmill_cli::auth::AuthCmd),
}

#[derive(Subcommand)]
enum JobCmd {
    /// All jobs (optionally of one kind), or one job by id with per-target progress.
    Show {
        /// Job id or kind (prefetch, evict, copy, lru).
        what: Option<String>,
        /// Only running jobs.
        #[arg(long)]
        running: bool,
    },
    /// Wait for a job to end; fails if it was aborted or any object failed.
    Wait {
        id: String,
        /// Kept for scripts: the bar is drawn whenever stderr is a terminal.
        #[arg(long)]
        progress: bool,
        #[arg(long, default_value = "24h")]
        timeout: String,
    },
    /// Abort a job on every target.
    Stop { id: String },
}

#[derive(Subcommand)]
enum SpaceCmd {
    /// Evict least-recently-used cached objects down to the low watermark/quotas.
    Evict {
        /// Evict down to the low marks even when under the high ones.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        follow: FollowArgs,
    },
}

#[derive(Subcommand)]
enum BucketCmd {
    /// Create native buckets.
    Create { buckets: Vec<String> },
    /// Remove buckets and all their objects.
    Rm { buckets: Vec<String> },
    /// Show or set bucket properties.
    #[command(subcommand)]
    Props(PropsCmd),
    /// Objects and bytes a bucket holds on the targets (replicas included), and its copies.
    Summary { bucket: String },
}

#[derive(Subcommand)]
enum PropsCmd {
    /// Print a bucket's properties as JSON.
    Show { bucket: String },
    /// Set properties: `lru.quota=10GiB`, `lru.dont_evict_time=30m`, `lru.enabled=false`,
    /// `lru.move_cached=false`, `versioning.validate_warm_get=true`,
    /// `versioning.synchronize=true`.
    /// Set properties (`key=value`...); changing `mirror.copies` starts a make-n-copies job.
    Set {
        bucket: String,
        #[arg(required = true)]
        settings: Vec<String>,
        #[command(flatten)]
        follow: jobs::FollowArgs,
    },
}

#[derive(Subcommand)]
enum ObjectCmd {
    /// Print an object to stdout.
    Cat { object: String },
    /// An object's properties: size, checksum, version, access time, where it is stored.
    Show { object: String },
}

#[derive(Subcommand)]
enum ShowCmd {
    /// Proxies and targets in the cluster map.
    Cluster,
    /// How to reach the S3 API, with example settings for common clients.
    S3,
    /// Live per-node table from every node's metrics: GET/PUT ops/s, throughput, GET latency
    /// percentiles, cache hit ratio, errors, disk utilization, running jobs (`--json`: one
    /// report per line).
    Performance {
        /// Reports to print (0: until interrupted).
        #[arg(long, default_value_t = 0)]
        count: u64,
        /// Seconds each report covers.
        #[arg(long, default_value_t = 2.0)]
        interval: f64,
    },
}

fn bucket(uri: &str) -> anyhow::Result<Bck> {
    let (bck, rest) = Bck::parse_uri(uri)?;
    if !rest.is_empty() {
        bail!("{uri}: expected a bucket, not an object");
    }
    Ok(bck)
}

fn object(uri: &str) -> anyhow::Result<(Bck, String)> {
    let (bck, name) = Bck::parse_uri(uri)?;
    if name.is_empty() {
        bail!("{uri}: expected bucket/object");
    }
    Ok((bck, name))
}

use gristmill_cli::jobs::human;

#[tokio::main]
async fn main() {
    gristmill_cli::init_tracing("warn");
    let cli = Cli::parse();
    if let Command::Completion { shell } = cli.command {
        use clap::CommandFactory;
        use std::io::Write;
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "grist", &mut script);
        // A closed pipe (`| head`) is not an error worth a panic.
        let _ = std::io::stdout().write_all(&script);
        return;
    }
    if let Err(e) = run(cli).await {
        eprintln!("Error: {e:#}");
        std::process::exit(1);
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let config = gristmill_cli::config::load()?;
    let endpoint = gristmill_cli::config::endpoint(cli.endpoint.clone(), &config);
    let mut options = cli.conn.client_options()?;
    if options.token.is_none() {
        options.token = config.token.clone();
    }
    let client = Client::with_options(&endpoint, &options)?;
    match cli.command {
        Command::Bucket(BucketCmd::Create { buckets }) => {
            for b in buckets {
                let bck = bucket(&b)?;
                client.create_bucket(&bck).await?;
                report(
                    cli.json,
                    format!("\"{bck}\" created"),
                    json!({"bucket": bck.to_string(), "created": true}),
                );
            }
        }
        Command::Bucket(BucketCmd::Rm { buckets }) => {
            for b in buckets {
                let bck = bucket(&b)?;
                client.destroy_bucket(&bck).await?;
                report(
                    cli.json,
                    format!("\"{bck}\" destroyed"),
                    json!({"bucket": bck.to_string(), "destroyed": true}),
                );
            }
        }
        Command::Ls { bucket: None, .. } => {
            let buckets = client.list_buckets().await?;
            if cli.json {
                println!("{}", serde_json::to_string_pretty(&buckets)?);
            } else {
                let mut t = Table::new();
                t.load_preset(NOTHING).set_header(["NAME", "PROVIDER"]);
                for b in buckets {
                    let scheme = b
                        .provider
                        .parse::<gristmill_core::Provider>()
                        .map(|p| p.scheme())
                        .unwrap_or("?");
                    t.add_row([format!("{scheme}://{}", b.name), b.provider]);
                }
                println!("{t}");
            }
        }
        Command::Ls {
            bucket: Some(b),
            prefix,
            props,
            page_size,
            limit,
            cached,
            not_cached,
            versions,
            nr,
            summary,
        } => {
            // AIStore's list flags: LsCached (bit 0), LsNotCached (bit 9).
            let flags = if cached { 1 } else { 0 }
                | if not_cached { 1 << 9 } else { 0 }
                | if versions {
                    gristmill_core::api::LS_VERSIONS
                } else {
                    0
                };
            let lso = ListObjectsMsg {
                prefix,
                pagesize: page_size,
                props,
                flags,
                ..Default::default()
            };
            let shape = if summary {
                ListShape::Summary
            } else if nr {
                ListShape::OneLevel
            } else {
                ListShape::All
            };
            list(&client, &b, lso, limit, shape, cli.json).await?
        }
        Command::Bucket(BucketCmd::Props(PropsCmd::Show { bucket: b })) => {
            let props = client.bucket_props(&bucket(&b)?).await?;
            println!("{}", serde_json::to_string_pretty(&props)?);
        }
        Command::Bucket(BucketCmd::Props(PropsCmd::Set {
            bucket: b,
            settings,
            follow,
        })) => {
            let bck = bucket(&b)?;
            let patch = props_patch(&settings)?;
            let job = client
                .bucket_action(Method::PATCH, &bck, action::SET_BPROPS, patch, &[])
                .await?;
            report(
                cli.json && job.trim().is_empty(),
                format!("\"{bck}\" properties updated"),
                json!({"bucket": bck.to_string(), "updated": true}),
            );
            if !job.trim().is_empty() {
                let what = format!("make-n-copies {bck}");
                jobs::started(&client, job.trim(), &what, &follow, cli.json).await?;
            }
        }
        Command::Prefetch {
            bucket: b,
            select,
            latest,
            num_workers,
            follow,
        } => {
            let bck = bucket(&b)?;
            let mut v = select.to_value();
            v["latest-ver"] = latest.into();
            v["num-workers"] = num_workers.into();
            let id = client
                .bucket_action(Method::POST, &bck, action::PREFETCH, v, &[])
                .await?;
            jobs::started(&client, &id, &format!("prefetch {bck}"), &follow, cli.json).await?;
        }
        Command::Evict {
            bucket: b,
            select,
            keep_md,
            follow,
        } => {
            let bck = bucket(&b)?;
            if select.is_empty() {
                client
                    .bucket_action(
                        Method::DELETE,
                        &bck,
                        action::EVICT_REMOTE_BUCKET,
                        serde_json::Value::Null,
                        &[("keep_md", keep_md.to_string())],
                    )
                    .await?;
                report(
                    cli.json,
                    format!("\"{bck}\" evicted"),
                    json!({"bucket": bck.to_string(), "evicted": true}),
                );
            } else {
                let id = client
                    .bucket_action(
                        Method::DELETE,
                        &bck,
                        action::EVICT_OBJECTS,
                        select.to_value(),
                        &[],
                    )
                    .await?;
                jobs::started(&client, &id, &format!("evict {bck}"), &follow, cli.json).await?;
            }
        }
        Command::Cp {
            source,
            destination,
            select,
            prepend,
            to_prefix,
            dry_run,
            num_workers,
            follow,
        } => {
            let (src, dst) = (bucket(&source)?, bucket(&destination)?);
            let mut v = select.to_value();
            v["prepend"] = prepend.into();
            if let Some(tp) = to_prefix {
                v["to_prefix"] = tp.into();
            }
            v["dry_run"] = dry_run.into();
            v["num-workers"] = num_workers.into();
            let id = client
                .bucket_action(
                    Method::POST,
                    &src,
                    action::COPY_BUCKET,
                    v,
                    &[("bck_to", dst.to_string())],
                )
                .await?;
            jobs::started(
                &client,
                &id,
                &format!("copy {src} => {dst}"),
                &follow,
                cli.json,
            )
            .await?;
        }
        Command::Job(JobCmd::Show { what, running }) => {
            jobs::show(&client, what.as_deref(), running, cli.json).await?
        }
        Command::Job(JobCmd::Wait { id, timeout, .. }) => {
            let timeout = gristmill_core::time::parse_duration(&timeout)?;
            let s = jobs::wait(&client, &id, true, timeout).await?;
            jobs::finish(&s, cli.json)?;
        }
        Command::Job(JobCmd::Stop { id }) => {
            client.stop_job(&id).await?;
            report(
                cli.json,
                format!("job {id} stopped"),
                json!({"id": id, "stopped": true}),
            );
        }
        Command::Etl(cmd) => gristmill_cli::etl::run(&client, cmd, cli.json).await?,
        Command::Storage(cmd) => gristmill_cli::storage::run(&client, cmd, cli.json).await?,
        Command::Config(cmd) => gristmill_cli::node_config::config(&client, cmd, cli.json).await?,
        Command::Log(cmd) => gristmill_cli::node_config::log(&client, cmd, cli.json).await?,
        Command::Auth(cmd) => gristmill_cli::auth::run(&client, cmd, cli.json).await?,
        Command::Archive(cmd) => gristmill_cli::shards::archive(&client, cmd, cli.json).await?,
        Command::Batch(args) => gristmill_cli::shards::batch(&client, args).await?,
        Command::Reshard(args) => gristmill_cli::shards::reshard(&client, args, cli.json).await?,
        Command::Cluster(cmd) => {
            if !gristmill_cli::cluster::run(&client, cmd, cli.json).await? {
                show_cluster(&client, cli.json).await?;
            }
        }
        Command::Scrub {
            bucket: b,
            prefix,
            no_repair,
            follow,
        } => {
            let mut v = serde_json::json!({ "no_repair": no_repair });
            let what = match &b {
                Some(b) => {
                    let bck = bucket(b)?;
                    v["bck"] = bck.to_string().into();
                    format!("scrub {bck}")
                }
                None => "scrub (all buckets)".to_owned(),
            };
            if let Some(p) = prefix {
                v["prefix"] = p.into();
            }
            let id = client.start_job("scrub", v).await?;
            jobs::started(&client, &id, &what, &follow, cli.json).await?;
        }
        Command::Space(SpaceCmd::Evict { force, follow }) => {
            let id = client
                .start_job("lru", serde_json::json!({ "force": force }))
                .await?;
            jobs::started(&client, &id, "LRU eviction", &follow, cli.json).await?;
        }
        Command::Put {
            source,
            destination,
            recursive,
            progress,
        } => {
            put(
                &client,
                &source,
                &destination,
                recursive,
                progress,
                cli.json,
            )
            .await?
        }
        Command::Get {
            object: uri,
            destination,
            prefix,
            template,
            parallel,
            ..
        } if prefix.is_some() || template.is_some() => {
            use gristmill_cli::transfer;
            let bck = bucket(&uri)?;
            let names =
                transfer::selected_names(&client, &bck, prefix.as_deref(), template.as_deref())
                    .await?;
            let dir = PathBuf::from(destination.unwrap_or_else(|| ".".into()));
            let strip = prefix.as_deref().unwrap_or("");
            let (objects, bytes, missing) =
                transfer::get_many(&client, &bck, names, strip, &dir, parallel).await?;
            if cli.json {
                println!(
                    "{}",
                    serde_json::json!({"objects": objects, "bytes": bytes, "missing": missing,
                        "directory": dir})
                );
            } else {
                eprintln!(
                    "GET {objects} objects ({}) of {bck} => {}{}",
                    human(bytes),
                    dir.display(),
                    if missing > 0 {
                        format!(", {missing} named by the template do not exist")
                    } else {
                        String::new()
                    }
                );
            }
        }
        Command::Get {
            object: uri,
            destination,
            version_id,
            ..
        } => {
            let version_id = version_id.as_deref();
            let (bck, name) = object(&uri)?;
            let dest = destination.unwrap_or_else(|| {
                Path::new(&name)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_else(|| name.clone())
            });
            if dest == "-" {
                let mut out = tokio::io::stdout();
                client
                    .get_version_into(&bck, &name, version_id, &mut out)
                    .await?;
            } else {
                // Write to a temp name and rename, so a failed download leaves no partial file.
                let tmp = format!("{dest}.grist-partial");
                let mut f = tokio::fs::File::create(&tmp)
                    .await
                    .with_context(|| format!("creating {tmp}"))?;
                let n = match client
                    .get_version_into(&bck, &name, version_id, &mut f)
                    .await
                {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = tokio::fs::remove_file(&tmp).await;
                        return Err(e);
                    }
                };
                tokio::fs::rename(&tmp, &dest).await?;
                if cli.json {
                    println!("{}", json!({"object": uri, "file": dest, "bytes": n}));
                } else {
                    eprintln!("GET {uri} => {dest} ({})", human(n));
                }
            }
        }
        Command::Object(ObjectCmd::Show { object: uri }) => {
            let (bck, name) = object(&uri)?;
            let resp = client
                .retrying(|| {
                    client
                        .request(Method::HEAD, &gristmill_client::object_path(&bck, &name))
                        .query(&gristmill_client::bucket_query(&bck))
                        .send()
                })
                .await
                .with_context(|| uri.clone())?;
            use gristmill_core::api::header as h;
            let headers = resp.headers();
            let get = |k: &str| {
                headers
                    .get(k)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned()
            };
            let props = serde_json::json!({
                "name": name, "bucket": bck.to_string(),
                "size": get("content-length").parse::<u64>().unwrap_or(0),
                "checksum": {"type": get(h::CHECKSUM_TYPE), "value": get(h::CHECKSUM_VALUE)},
                "version": get(h::VERSION), "atime": get(h::ATIME),
                "location": get(h::LOCATION), "mirror_copies": get(h::MIRROR_COPIES),
            });
            if cli.json {
                println!("{props}");
            } else {
                let mut t = Table::new();
                t.load_preset(NOTHING);
                t.set_header(vec!["PROPERTY", "VALUE"]);
                for (k, v) in [
                    ("name", name.clone()),
                    ("size", human(props["size"].as_u64().unwrap_or(0))),
                    (
                        "checksum",
                        format!("{} {}", get(h::CHECKSUM_TYPE), get(h::CHECKSUM_VALUE)),
                    ),
                    ("version", get(h::VERSION)),
                    ("atime", get(h::ATIME)),
                    ("location", get(h::LOCATION)),
                    ("copies", get(h::MIRROR_COPIES)),
                ] {
                    t.add_row(vec![k.to_owned(), v]);
                }
                println!("{t}");
            }
        }
        Command::Bucket(BucketCmd::Summary { bucket: b }) => {
            let bck = bucket(&b)?;
            let props = client.bucket_props(&bck).await?;
            let copies = props["mirror"]["copies"].as_u64().unwrap_or(1);
            let overview: serde_json::Value = Client::send(
                client
                    .request(Method::GET, "/v1/cluster")
                    .query(&[("what", "overview")]),
            )
            .await?
            .json()
            .await?;
            let shown = bck.to_string();
            let entry = overview["buckets"]
                .as_array()
                .and_then(|a| a.iter().find(|e| e["bucket"] == shown.as_str()));
            let objects = entry.and_then(|e| e["objects"].as_u64()).unwrap_or(0);
            let bytes = entry.and_then(|e| e["bytes"].as_u64()).unwrap_or(0);
            if cli.json {
                println!(
                    "{}",
                    serde_json::json!({"bucket": shown, "objects": objects, "bytes": bytes,
                        "copies": copies})
                );
            } else {
                println!(
                    "{shown}: {objects} objects, {} stored (replicas included; mirror.copies = {copies})",
                    human(bytes)
                );
            }
        }
        Command::Object(ObjectCmd::Cat { object: uri }) => {
            let (bck, name) = object(&uri)?;
            client
                .get_into(&bck, &name, &mut tokio::io::stdout())
                .await?;
        }
        Command::Rmo {
            objects,
            prefix,
            template,
            yes,
            parallel,
            ..
        } if prefix.is_some() || template.is_some() => {
            use gristmill_cli::transfer;
            let [uri] = objects.as_slice() else {
                bail!("with --prefix or --template name one bucket");
            };
            let bck = bucket(uri)?;
            let names =
                transfer::selected_names(&client, &bck, prefix.as_deref(), template.as_deref())
                    .await?;
            if names.is_empty() {
                report(
                    cli.json,
                    "nothing to delete",
                    json!({"deleted": 0, "missing": 0}),
                );
                return Ok(());
            }
            if !yes
                && !transfer::confirm(&format!(
                    "Delete up to {} objects of {bck} (e.g. {})?",
                    names.len(),
                    names[0]
                ))?
            {
                bail!("not confirmed: nothing deleted (-y skips the question)");
            }
            let (deleted, missing) = transfer::rm_many(&client, &bck, names, parallel).await?;
            if cli.json {
                println!(
                    "{}",
                    serde_json::json!({"deleted": deleted, "missing": missing})
                );
            } else {
                println!("deleted {deleted} objects of {bck} ({missing} not found)");
            }
        }
        Command::Rmo {
            objects,
            version_id,
            ..
        } => {
            if objects.is_empty() {
                bail!("name at least one object");
            }
            if version_id.is_some() && objects.len() > 1 {
                bail!("--version-id deletes one version of one object: name one object");
            }
            for uri in objects {
                let (bck, name) = object(&uri)?;
                client
                    .delete_version(&bck, &name, version_id.as_deref())
                    .await?;
                let text = match &version_id {
                    Some(id) => format!("deleted {uri} version {id}"),
                    None => format!("deleted {uri}"),
                };
                report(
                    cli.json,
                    text,
                    json!({"object": uri, "version_id": version_id, "deleted": true}),
                );
            }
        }
        Command::Completion { .. } => {} // printed by `main` before any connection
        Command::Show(ShowCmd::S3) => {
            let endpoint = client.endpoint();
            // An unsigned ListBuckets tells whether anonymous S3 access is on.
            let anonymous = client
                .request(Method::GET, "/")
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            let (key, secret) = if anonymous {
                (
                    gristmill_core::api::s3_default::ACCESS_KEY,
                    gristmill_core::api::s3_default::SECRET_KEY,
                )
            } else {
                ("<your access key>", "<your secret key>")
            };
            if cli.json {
                println!(
                    "{}",
                    serde_json::json!({"endpoint": endpoint, "path_style": true, "region": "us-east-1",
                        "anonymous": anonymous, "access_key": key, "secret_key": secret})
                );
            } else {
                println!("S3 endpoint: {endpoint} (path-style, region us-east-1)");
                if anonymous {
                    println!("auth: off — unsigned requests work, and so does this example key:");
                } else {
                    println!("auth: on — use the keys configured for your user:");
                }
                println!(
                    "  export AWS_ACCESS_KEY_ID={key} AWS_SECRET_ACCESS_KEY={secret} AWS_DEFAULT_REGION=us-east-1"
                );
                println!("  aws --endpoint-url {endpoint} s3 ls");
                println!("  s5cmd --endpoint-url {endpoint} ls");
                println!(
                    "  boto3.client(\"s3\", endpoint_url=\"{endpoint}\", aws_access_key_id=\"{key}\", aws_secret_access_key=\"{secret}\")"
                );
            }
        }
        Command::Show(ShowCmd::Cluster) => show_cluster(&client, cli.json).await?,
        Command::Show(ShowCmd::Performance { count, interval }) => {
            if !(interval > 0.0 && interval.is_finite()) {
                bail!("--interval must be a positive number of seconds");
            }
            gristmill_cli::performance::run(
                &client,
                count,
                std::time::Duration::from_secs_f64(interval),
                cli.json,
            )
            .await?
        }
    }
    Ok(())
}

/// The cluster map as a table (or JSON).
async fn show_cluster(client: &Client, json: bool) -> anyhow::Result<()> {
    let smap = client.cluster_map().await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&smap)?);
    } else {
        let mut t = Table::new();
        t.load_preset(NOTHING)
            .set_header(["NODE", "ROLE", "URL", "STATE"]);
        for n in smap.pmap.values().chain(smap.tmap.values()) {
            let role = if smap.is_primary(&n.daemon_id) {
                "proxy (primary)".to_string()
            } else {
                n.daemon_type.clone()
            };
            let state = if n.flags & gristmill_core::smap::FLAG_SUSPECT != 0 {
                "suspect"
            } else if n.is_restarting() {
                "restarting"
            } else if n.is_inactive() {
                "maintenance"
            } else {
                "online"
            };
            t.add_row([n.daemon_id.clone(), role, n.url().to_owned(), state.into()]);
        }
        println!("{t}");
        println!(
            "\ncluster map v{}, {} prox{}, {} target{}, uuid {}",
            smap.version,
            smap.pmap.len(),
            if smap.pmap.len() == 1 { "y" } else { "ies" },
            smap.tmap.len(),
            if smap.tmap.len() == 1 { "" } else { "s" },
            smap.uuid
        );
    }
    Ok(())
}

/// `key=value` settings as a nested JSON patch: `lru.quota=1GiB` → `{"lru":{"quota":N}}`.
fn props_patch(settings: &[String]) -> anyhow::Result<serde_json::Value> {
    let mut patch = serde_json::json!({});
    for s in settings {
        let Some((key, value)) = s.split_once('=') else {
            bail!("{s}: expected key=value");
        };
        let v: serde_json::Value = match (key, value) {
            (_, "true" | "false") => (value == "true").into(),
            ("lru.quota", v) => gristmill_core::time::parse_size(v)?.into(),
            (_, v) => v.parse::<u64>().map_or_else(|_| v.into(), Into::into),
        };
        let mut slot = &mut patch;
        let parts: Vec<&str> = key.split('.').collect();
        for (i, part) in parts.iter().enumerate() {
            if i + 1 == parts.len() {
                slot[*part] = v.clone();
            } else {
                if !slot[*part].is_object() {
                    slot[*part] = serde_json::json!({});
                }
                slot = &mut slot[*part];
            }
        }
    }
    Ok(patch)
}

/// `grist ls --versions`: every version of each object, newest first, the latest marked.
async fn list_versions(
    client: &Client,
    bck: &gristmill_core::Bck,
    mut lso: ListObjectsMsg,
    limit: usize,
    json: bool,
) -> anyhow::Result<()> {
    #[derive(serde::Serialize)]
    struct Version {
        name: String,
        version_id: String,
        latest: bool,
        delete_marker: bool,
        size: u64,
        mtime: String,
    }
    lso.props = "name,size,version".into();
    let mut all: Vec<Version> = Vec::new();
    for e in client.list_entries(bck, lso, limit).await? {
        let (name, _) = gristmill_core::name::split_version_slot(&e.name);
        let latest = all.last().is_none_or(|v| v.name != name);
        all.push(Version {
            name: name.to_owned(),
            version_id: e.version,
            latest,
            delete_marker: e.flags & gristmill_core::api::ENTRY_DELETE_MARKER != 0,
            size: e.size,
            mtime: gristmill_core::time::rfc3339_from_ns(e.mtime_ns),
        });
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(());
    }
    let mut table = Table::new();
    table
        .load_preset(NOTHING)
        .set_header(["NAME", "VERSION ID", "LATEST", "SIZE", "MODIFIED"]);
    for v in &all {
        table.add_row([
            v.name.clone(),
            v.version_id.clone(),
            if v.latest { "yes" } else { "" }.to_owned(),
            if v.delete_marker {
                "(delete marker)".to_owned()
            } else {
                human(v.size)
            },
            v.mtime.clone(),
        ]);
    }
    println!("{table}");
    println!("\nListed {} version(s)", all.len());
    Ok(())
}

/// What `grist ls` prints of a bucket's listing.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ListShape {
    /// Every object.
    All,
    /// One level under the prefix: deeper names folded into `dir/` entries.
    OneLevel,
    /// Only the count and total size.
    Summary,
}

/// Folds the names deeper than one level under `prefix` into their `dir/` (size 0), listed
/// first in name order; objects at that level follow in listing order.
fn one_level(prefix: &str, entries: Vec<ListEntry>) -> Vec<ListEntry> {
    let mut dirs = std::collections::BTreeSet::new();
    let mut here = Vec::new();
    for e in entries {
        let rest = e.name.strip_prefix(prefix).unwrap_or(&e.name);
        match rest.find('/') {
            Some(i) => {
                dirs.insert(format!("{prefix}{}", &rest[..=i]));
            }
            None => here.push(e),
        }
    }
    dirs.into_iter()
        .map(|name| ListEntry {
            name,
            ..Default::default()
        })
        .chain(here)
        .collect()
}

async fn list(
    client: &Client,
    uri: &str,
    lso: ListObjectsMsg,
    limit: usize,
    shape: ListShape,
    json: bool,
) -> anyhow::Result<()> {
    let bck = bucket(uri)?;
    let prefix = lso.prefix.clone();
    let props = lso.props.clone();
    let cols: Vec<String> = if props == "all" {
        [
            "name", "size", "checksum", "atime", "version", "location", "copies",
        ]
        .map(String::from)
        .to_vec()
    } else {
        props.split(',').map(|s| s.trim().to_owned()).collect()
    };
    let mut table = Table::new();
    table
        .load_preset(NOTHING)
        .set_header(cols.iter().map(|c| c.to_uppercase()));
    if lso.flags & gristmill_core::api::LS_VERSIONS != 0 {
        return list_versions(client, &bck, lso, limit, json).await;
    }
    let all = client.list_entries(&bck, lso, limit).await?;
    let total: u64 = all.iter().map(|e| e.size).sum();
    let count = all.len();
    if shape == ListShape::Summary {
        if json {
            println!(
                "{}",
                serde_json::json!({"bucket": bck.to_string(), "prefix": prefix,
                    "objects": count, "bytes": total})
            );
        } else {
            println!(
                "{bck}{}: {count} object{}, {}",
                if prefix.is_empty() {
                    String::new()
                } else {
                    format!(" (prefix {prefix})")
                },
                if count == 1 { "" } else { "s" },
                human(total)
            );
        }
        return Ok(());
    }
    let all = if shape == ListShape::OneLevel {
        one_level(&prefix, all)
    } else {
        all
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(());
    }
    for e in all {
        let dir = e.name.ends_with('/');
        table.add_row(cols.iter().map(|c| match c.as_str() {
            "name" => e.name.clone(),
            "size" if dir => "-".to_owned(),
            "size" => human(e.size),
            "checksum" => e.checksum.clone(),
            "atime" => e.atime.clone(),
            "version" => e.version.clone(),
            "location" => e.location.clone(),
            "copies" => e.copies.to_string(),
            _ => String::new(),
        }));
    }
    println!("{table}");
    println!(
        "\nListed {count} object{}, {}",
        if count == 1 { "" } else { "s" },
        human(total)
    );
    Ok(())
}

async fn put(
    client: &Client,
    source: &str,
    destination: &str,
    recursive: bool,
    progress: bool,
    json_out: bool,
) -> anyhow::Result<()> {
    let (bck, dest) = Bck::parse_uri(destination)?;
    if source == "-" {
        if dest.is_empty() {
            bail!("name the object when reading stdin: ais://bucket/name");
        }
        // stdin is staged to a temp file so a retry after a redirect can re-read it.
        let tmp = tempfile_path();
        let mut f = tokio::fs::File::create(&tmp).await?;
        tokio::io::copy(&mut tokio::io::stdin(), &mut f).await?;
        drop(f);
        let r = client.put_file(&bck, &dest, &tmp).await;
        let _ = std::fs::remove_file(&tmp);
        r?;
        report(
            json_out,
            format!("PUT - => {bck}/{dest}"),
            json!({"source": "-", "object": format!("{bck}/{dest}")}),
        );
        return Ok(());
    }
    let src = PathBuf::from(source);
    let meta = std::fs::metadata(&src).with_context(|| source.to_string())?;
    if meta.is_file() {
        let name = if dest.is_empty() || dest.ends_with('/') {
            format!(
                "{dest}{}",
                src.file_name()
                    .map(|f| f.to_string_lossy())
                    .unwrap_or_default()
            )
        } else {
            dest
        };
        client.put_file(&bck, &name, &src).await?;
        report(
            json_out,
            format!("PUT {source} => {bck}/{name}"),
            json!({"source": source, "object": format!("{bck}/{name}"), "bytes": meta.len()}),
        );
        return Ok(());
    }
    if !recursive {
        bail!("{source} is a directory: use -r to upload it");
    }
    let mut files = Vec::new();
    walk(&src, &mut files)?;
    files.sort();
    let total: u64 = files.iter().map(|(_, n)| *n).sum();
    let bar = if progress {
        let b = ProgressBar::new(total);
        b.set_style(
            ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    } else {
        ProgressBar::hidden()
    };
    let prefix = if dest.is_empty() || dest.ends_with('/') {
        dest
    } else {
        format!("{dest}/")
    };
    // Upload with bounded concurrency.
    use futures::StreamExt;
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(files.iter())
        .map(|(path, size)| {
            let rel = path
                .strip_prefix(&src)
                .map(|r| r.to_string_lossy().into_owned())
                .unwrap_or_default();
            let name = format!("{prefix}{rel}");
            let bar = bar.clone();
            let bck = bck.clone();
            async move {
                client.put_file(&bck, &name, path).await?;
                bar.inc(*size);
                Ok(())
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    bar.finish_and_clear();
    let failed: Vec<_> = results.into_iter().filter_map(Result::err).collect();
    if let Some(e) = failed.first() {
        bail!(
            "{} of {} uploads failed; first: {e:#}",
            failed.len(),
            files.len()
        );
    }
    report(
        json_out,
        format!(
            "PUT {} files ({}) => {bck}/{prefix}",
            files.len(),
            human(total)
        ),
        json!({"files": files.len(), "bytes": total, "destination": format!("{bck}/{prefix}")}),
    );
    Ok(())
}

fn walk(dir: &Path, out: &mut Vec<(PathBuf, u64)>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let ft = entry.file_type()?;
        if ft.is_dir() {
            walk(&entry.path(), out)?;
        } else if ft.is_file() {
            out.push((entry.path(), entry.metadata()?.len()));
        }
    }
    Ok(())
}

fn tempfile_path() -> PathBuf {
    std::env::temp_dir().join(format!("grist-stdin-{}", std::process::id()))
}

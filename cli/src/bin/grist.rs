//! `grist`: the Gristmill command line (AIStore's `ais`, for Gristmill).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use comfy_table::{Table, presets::NOTHING};
use gristmill_cli::client::Client;
use gristmill_core::Bck;
use gristmill_core::api::ListObjectsMsg;
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Parser)]
#[command(name = "grist", version, about = "Gristmill command line")]
struct Cli {
    /// Cluster endpoint (any proxy).
    #[arg(
        long,
        global = true,
        env = "GRIST_ENDPOINT",
        default_value = "http://127.0.0.1:8080"
    )]
    endpoint: String,
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
    /// Download an object to a file, or to stdout with `-`.
    Get {
        object: String,
        destination: Option<String>,
    },
    /// Remove objects.
    Rmo { objects: Vec<String> },
    /// Object operations.
    #[command(subcommand)]
    Object(ObjectCmd),
    /// Show cluster information.
    #[command(subcommand)]
    Show(ShowCmd),
}

#[derive(Subcommand)]
enum BucketCmd {
    /// Create native buckets.
    Create { buckets: Vec<String> },
    /// Remove buckets and all their objects.
    Rm { buckets: Vec<String> },
}

#[derive(Subcommand)]
enum ObjectCmd {
    /// Print an object to stdout.
    Cat { object: String },
}

#[derive(Subcommand)]
enum ShowCmd {
    /// Proxies and targets in the cluster map.
    Cluster,
    /// How to reach the S3 API, with example settings for common clients.
    S3,
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

fn human(n: u64) -> String {
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

#[tokio::main]
async fn main() {
    gristmill_cli::init_tracing("warn");
    let cli = Cli::parse();
    if let Err(e) = run(cli).await {
        eprintln!("Error: {e:#}");
        std::process::exit(1);
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let client = Client::new(&cli.endpoint)?;
    match cli.command {
        Command::Bucket(BucketCmd::Create { buckets }) => {
            for b in buckets {
                let bck = bucket(&b)?;
                client.create_bucket(&bck).await?;
                println!("\"{bck}\" created");
            }
        }
        Command::Bucket(BucketCmd::Rm { buckets }) => {
            for b in buckets {
                let bck = bucket(&b)?;
                client.destroy_bucket(&bck).await?;
                println!("\"{bck}\" destroyed");
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
        } => list(&client, &b, prefix, props, page_size, limit, cli.json).await?,
        Command::Put {
            source,
            destination,
            recursive,
            progress,
        } => put(&client, &source, &destination, recursive, progress).await?,
        Command::Get {
            object: uri,
            destination,
        } => {
            let (bck, name) = object(&uri)?;
            let dest = destination.unwrap_or_else(|| {
                Path::new(&name)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_else(|| name.clone())
            });
            if dest == "-" {
                let mut out = tokio::io::stdout();
                client.get_into(&bck, &name, &mut out).await?;
            } else {
                // Write to a temp name and rename, so a failed download leaves no partial file.
                let tmp = format!("{dest}.grist-partial");
                let mut f = tokio::fs::File::create(&tmp)
                    .await
                    .with_context(|| format!("creating {tmp}"))?;
                let n = match client.get_into(&bck, &name, &mut f).await {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = tokio::fs::remove_file(&tmp).await;
                        return Err(e);
                    }
                };
                tokio::fs::rename(&tmp, &dest).await?;
                eprintln!("GET {uri} => {dest} ({})", human(n));
            }
        }
        Command::Object(ObjectCmd::Cat { object: uri }) => {
            let (bck, name) = object(&uri)?;
            client
                .get_into(&bck, &name, &mut tokio::io::stdout())
                .await?;
        }
        Command::Rmo { objects } => {
            if objects.is_empty() {
                bail!("name at least one object");
            }
            for uri in objects {
                let (bck, name) = object(&uri)?;
                client.delete_object(&bck, &name).await?;
                println!("deleted {uri}");
            }
        }
        Command::Show(ShowCmd::S3) => {
            let endpoint = client.endpoint();
            // An unsigned ListBuckets tells whether anonymous S3 access is on.
            let anonymous = reqwest::get(format!("{endpoint}/"))
                .await
                .is_ok_and(|r| r.status().is_success());
            let (key, secret) = if anonymous {
                (
                    gristmill_proxy::DEFAULT_ACCESS_KEY,
                    gristmill_proxy::DEFAULT_SECRET_KEY,
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
        Command::Show(ShowCmd::Cluster) => {
            let smap = client.cluster_map().await?;
            if cli.json {
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
                    let state = if n.is_inactive() {
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
        }
    }
    Ok(())
}

async fn list(
    client: &Client,
    uri: &str,
    prefix: String,
    props: String,
    page_size: u64,
    limit: usize,
    json: bool,
) -> anyhow::Result<()> {
    let bck = bucket(uri)?;
    let mut lso = ListObjectsMsg {
        prefix,
        pagesize: page_size,
        props: props.clone(),
        ..Default::default()
    };
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
    let mut all = Vec::new();
    loop {
        let page = client.list_page(&bck, &lso).await?;
        for e in page.entries {
            if limit > 0 && all.len() >= limit {
                break;
            }
            all.push(e);
        }
        if page.continuation_token.is_empty() || (limit > 0 && all.len() >= limit) {
            break;
        }
        lso.continuation_token = page.continuation_token;
        lso.uuid = page.uuid;
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(());
    }
    let total: u64 = all.iter().map(|e| e.size).sum();
    let count = all.len();
    for e in all {
        table.add_row(cols.iter().map(|c| match c.as_str() {
            "name" => e.name.clone(),
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
        println!("PUT - => {bck}/{dest}");
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
        println!("PUT {source} => {bck}/{name}");
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
    println!(
        "PUT {} files ({}) => {bck}/{prefix}",
        files.len(),
        human(total)
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

//! `grist archive ...`, `grist batch` and `grist reshard`: shards from the command line.
//!
//! - `archive put DIR ais://b/x.tar` packs a local directory into one shard (built locally,
//!   then uploaded with one PUT); `archive ls` lists a shard's members; `archive get` reads one
//!   member (or, with `--regex`, a tar of the matching ones); `archive append` adds a file to a
//!   shard; `archive bucket` starts the archive job; `archive gen-shards` writes synthetic
//!   WebDataset shards.
//! - `batch` sends one get-batch request and writes the archive it returns.
//! - `reshard` starts a reshard (dsort) job from a JSON spec or flags.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use futures::StreamExt;
use gristmill_client::{Client, Method, bucket_query, object_path};
use gristmill_core::Bck;
use gristmill_core::api::ListObjectsMsg;
use gristmill_core::shards::{LS_ARCH_DIR, MossIn, MossReq, Series};
use gristmill_shard::{Format, ShardWriter};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::jobs::{self, FollowArgs, SelectionArgs, human};

#[derive(Debug, Subcommand)]
pub enum ArchiveCmd {
    /// Pack a local directory into a shard: `grist archive put DIR ais://b/x.tar`.
    Put {
        dir: PathBuf,
        destination: String,
        /// Format when the name has no archive extension (.tar, .tgz, .tar.lz4, .zip).
        #[arg(long)]
        mime: Option<String>,
    },
    /// List the members of a shard: `grist archive ls ais://b/x.tar`.
    Ls { shard: String },
    /// Read one member to a file (or `-` for stdout); with `--regex`, a tar of the matches.
    Get {
        shard: String,
        /// The member's path inside the shard.
        member: Option<String>,
        /// Output file; default: the member's file name (`-` = stdout).
        out: Option<String>,
        /// Instead of one member: every member matching this (a tar).
        #[arg(long)]
        regex: Option<String>,
        /// How --regex matches: regexp, prefix, suffix, substr, wdskey.
        #[arg(long, default_value = "regexp")]
        mode: String,
    },
    /// Add a local file to a shard as MEMBER (the shard is created if missing).
    Append {
        file: PathBuf,
        shard: String,
        member: String,
    },
    /// Pack objects of a bucket into one shard (`ais://dst/x.tar`) or a series of shards of
    /// a target size (`ais://dst/out-{0000..}.tar --shard-size 256MiB`): a job.
    Bucket {
        source: String,
        destination: String,
        #[command(flatten)]
        select: SelectionArgs,
        /// Series form: start a new shard when one reaches this size.
        #[arg(long)]
        shard_size: Option<String>,
        #[arg(long)]
        mime: Option<String>,
        /// Name members `bucket/object`.
        #[arg(long)]
        include_bucket: bool,
        /// Append to the shard if it exists (tar).
        #[arg(long)]
        append: bool,
        /// Skip objects that cannot be read instead of failing.
        #[arg(long)]
        continue_on_error: bool,
        #[command(flatten)]
        follow: FollowArgs,
    },
    /// Generate synthetic WebDataset shards: `grist archive gen-shards 'ais://b/s-{0000..}.tar'
    /// --count 10 --samples 500 --sample-size 16KiB --exts jpg,cls,json`.
    GenShards {
        destination: String,
        /// Number of shards.
        #[arg(long, default_value_t = 10)]
        count: u64,
        /// Samples per shard.
        #[arg(long, default_value_t = 100)]
        samples: u64,
        /// Size of each binary file of a sample (`cls`, `json` and `txt` files are small text).
        #[arg(long, default_value = "16KiB")]
        sample_size: String,
        /// File extensions of each sample.
        #[arg(long, value_delimiter = ',', default_value = "jpg,cls,json")]
        exts: Vec<String>,
        /// Seed of the pseudo-random contents.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Shards uploaded at once.
        #[arg(long, default_value_t = 4)]
        parallel: usize,
    },
}

/// `grist batch`: one get-batch request.
#[derive(Debug, Args)]
pub struct BatchArgs {
    /// Default bucket for names without one (`ais://b`).
    pub bucket: Option<String>,
    /// The items: a file (or `-` for stdin) with a JSON get-batch request, a JSON array of
    /// names or `{"objname","bucket","archpath"}` objects, or lines `name` /
    /// `ais://bucket/name`, optionally followed by a TAB and a member path.
    #[arg(short = 'f', long = "list")]
    pub list: String,
    /// Output file (`-` = stdout).
    #[arg(short, long, default_value = "-")]
    pub output: String,
    /// Output format: .tar (default), .tgz, .tar.lz4, .zip.
    #[arg(long)]
    pub mime: Option<String>,
    /// Missing items become empty `__404__/...` entries instead of failing the request.
    #[arg(long)]
    pub continue_on_error: bool,
    /// Name entries by object name only (no bucket).
    #[arg(long)]
    pub only_name: bool,
    /// Run every item through this ETL (or pipeline: `a,b`) on the target.
    #[arg(long)]
    pub etl: Option<String>,
    /// Arguments passed to the ETL.
    #[arg(long, default_value = "", requires = "etl")]
    pub etl_args: String,
}

/// `grist reshard`: re-pack shards (a job).
#[derive(Debug, Args)]
pub struct ReshardArgs {
    /// A JSON spec (AIStore's dsort request shape); flags below override its fields.
    #[arg(short = 'f', long = "spec")]
    pub spec: Option<PathBuf>,
    /// Input bucket (`ais://in`).
    pub bucket: Option<String>,
    #[command(flatten)]
    pub select: SelectionArgs,
    /// Output names, e.g. `out-{0000..}` (the extension is added).
    #[arg(long)]
    pub output: Option<String>,
    /// Output bucket (default: the input bucket).
    #[arg(long)]
    pub to: Option<String>,
    /// Target size of output shards, e.g. 64MiB.
    #[arg(long)]
    pub shard_size: Option<String>,
    /// Output format: .tar (default), .tgz, .tar.lz4, .zip.
    #[arg(long)]
    pub ext: Option<String>,
    /// alphanumeric (default), shuffle, none.
    #[arg(long)]
    pub algorithm: Option<String>,
    #[arg(long)]
    pub seed: Option<String>,
    #[arg(long)]
    pub decreasing: bool,
    /// External key map: a JSON file `{"out-a.tar": ["key1", ...], ...}`.
    #[arg(long)]
    pub ekm: Option<PathBuf>,
    /// Records sorted in memory by the coordinator before spilling to disk.
    #[arg(long)]
    pub max_mem_records: Option<u64>,
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub follow: FollowArgs,
}

fn object(uri: &str) -> anyhow::Result<(Bck, String)> {
    let (bck, name) = Bck::parse_uri(uri)?;
    if name.is_empty() {
        bail!("{uri}: expected bucket/object");
    }
    Ok((bck, name))
}

fn bucket(uri: &str) -> anyhow::Result<Bck> {
    let (bck, rest) = Bck::parse_uri(uri)?;
    if !rest.is_empty() {
        bail!("{uri}: expected a bucket, not an object");
    }
    Ok(bck)
}

fn http() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder().tcp_nodelay(true).build()?)
}

/// Streams a response body into a file (via a temp name, renamed at the end) or stdout.
async fn save(resp: reqwest::Response, out: &str) -> anyhow::Result<u64> {
    let mut stream = resp.bytes_stream();
    let mut n = 0u64;
    if out == "-" {
        let mut w = tokio::io::stdout();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            n += chunk.len() as u64;
            w.write_all(&chunk).await?;
        }
        w.flush().await?;
        return Ok(n);
    }
    let tmp = format!("{out}.grist-partial");
    let mut f = tokio::fs::File::create(&tmp)
        .await
        .with_context(|| format!("creating {tmp}"))?;
    let result: anyhow::Result<()> = async {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            n += chunk.len() as u64;
            f.write_all(&chunk).await?;
        }
        f.flush().await?;
        Ok(())
    }
    .await;
    if let Err(e) = result {
        let _ = tokio::fs::remove_file(&tmp).await;
        return Err(e);
    }
    tokio::fs::rename(&tmp, out).await?;
    Ok(n)
}

fn format_for(name: &str, mime: Option<&str>) -> anyhow::Result<Format> {
    Ok(match mime {
        Some(m) => Format::parse(m)?,
        None => Format::from_name(name).unwrap_or(Format::Tar),
    })
}

pub async fn archive(client: &Client, cmd: ArchiveCmd, json_out: bool) -> anyhow::Result<()> {
    match cmd {
        ArchiveCmd::Put {
            dir,
            destination,
            mime,
        } => {
            let (bck, name) = object(&destination)?;
            let format = format_for(&name, mime.as_deref())?;
            let tmp = std::env::temp_dir().join(format!(
                "grist-archive-{}{}",
                std::process::id(),
                format.extension()
            ));
            let (d, t) = (dir.clone(), tmp.clone());
            let (count, bytes) =
                tokio::task::spawn_blocking(move || pack_dir(&d, &t, format)).await??;
            let r = client.put_file(&bck, &name, &tmp).await;
            let _ = std::fs::remove_file(&tmp);
            r?;
            println!(
                "packed {count} files ({}) from {} => {bck}/{name}",
                human(bytes),
                dir.display()
            );
        }
        ArchiveCmd::Ls { shard } => {
            let (bck, name) = object(&shard)?;
            let prefix = format!("{name}/");
            let lso = ListObjectsMsg {
                prefix: prefix.clone(),
                props: "name,size".into(),
                flags: LS_ARCH_DIR,
                ..Default::default()
            };
            let members: Vec<(String, u64)> = client
                .list_entries(&bck, lso, 0)
                .await?
                .into_iter()
                .filter_map(|e| Some((e.name.strip_prefix(&prefix)?.to_owned(), e.size)))
                .collect();
            if members.is_empty() {
                // Not an error to list an empty shard, but a missing one is.
                Client::send(
                    http()?
                        .head(format!("{}{}", client.endpoint(), object_path(&bck, &name)))
                        .query(&bucket_query(&bck)),
                )
                .await?;
            }
            if json_out {
                let v: Vec<Value> = members
                    .iter()
                    .map(|(n, s)| json!({"name": n, "size": s}))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let total: u64 = members.iter().map(|m| m.1).sum();
                for (n, s) in &members {
                    println!("{:>10}  {n}", human(*s));
                }
                println!("\n{} members, {}", members.len(), human(total));
            }
        }
        ArchiveCmd::Get {
            shard,
            member,
            out,
            regex,
            mode,
        } => {
            let (bck, name) = object(&shard)?;
            let mut q = bucket_query(&bck);
            let default_out = match (&regex, &member) {
                (Some(_), _) => "-".to_owned(),
                (None, Some(m)) => Path::new(m)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "member".into()),
                (None, None) => bail!("name a member, or pass --regex"),
            };
            match (&regex, &member) {
                (Some(r), _) => {
                    q.push(("archregx", r.clone()));
                    q.push(("archmode", mode));
                }
                (None, Some(m)) => q.push(("archpath", m.clone())),
                (None, None) => unreachable!("checked above"),
            }
            let out = out.unwrap_or(default_out);
            let resp = Client::send(
                http()?
                    .get(format!("{}{}", client.endpoint(), object_path(&bck, &name)))
                    .query(&q),
            )
            .await?;
            let n = save(resp, &out).await?;
            if out != "-" {
                if json_out {
                    println!(
                        "{}",
                        serde_json::json!({"shard": shard, "file": out, "bytes": n})
                    );
                } else {
                    eprintln!("GET {shard} => {out} ({})", human(n));
                }
            }
        }
        ArchiveCmd::Append {
            file,
            shard,
            member,
        } => {
            let (bck, name) = object(&shard)?;
            let data = tokio::fs::read(&file)
                .await
                .with_context(|| file.display().to_string())?;
            let mut q = bucket_query(&bck);
            q.push(("archpath", member.clone()));
            Client::send(
                http()?
                    .put(format!("{}{}", client.endpoint(), object_path(&bck, &name)))
                    .query(&q)
                    .body(data),
            )
            .await?;
            crate::report(
                json_out,
                format!("appended {} => {shard}/{member}", file.display()),
                serde_json::json!({"file": file, "shard": shard, "member": member}),
            );
        }
        ArchiveCmd::Bucket {
            source,
            destination,
            select,
            shard_size,
            mime,
            include_bucket,
            append,
            continue_on_error,
            follow,
        } => {
            let src = bucket(&source)?;
            let (dst, archname) = object(&destination)?;
            let mut v = select.to_value();
            v["archname"] = archname.clone().into();
            if let Some(m) = mime {
                v["mime"] = m.into();
            }
            if let Some(s) = shard_size {
                v["shard_size"] = gristmill_core::time::parse_size(&s)?.into();
            }
            v["isbn"] = include_bucket.into();
            v["aate"] = append.into();
            v["coer"] = continue_on_error.into();
            let id = client
                .bucket_action(
                    Method::PUT,
                    &src,
                    "archive",
                    v,
                    &[("bck_to", dst.to_string())],
                )
                .await?;
            jobs::started(
                client,
                &id,
                &format!("archive {src} => {dst}/{archname}"),
                &follow,
                json_out,
            )
            .await?;
        }
        ArchiveCmd::GenShards {
            destination,
            count,
            samples,
            sample_size,
            exts,
            seed,
            parallel,
        } => {
            let (bck, template) = object(&destination)?;
            let series = if template.contains('{') {
                Some(Series::parse(&template)?)
            } else if count == 1 {
                None
            } else {
                bail!(
                    "{destination}: use a name template such as shard-{{0000..}}.tar for --count > 1"
                )
            };
            let size = gristmill_core::time::parse_size(&sample_size)? as usize;
            let names: Vec<String> = (0..count)
                .map(|i| match &series {
                    Some(s) => s.name(i).map_err(anyhow::Error::from),
                    None => Ok(template.clone()),
                })
                .collect::<anyhow::Result<_>>()?;
            let started = Instant::now();
            let results: Vec<anyhow::Result<u64>> = futures::stream::iter(names.iter().enumerate())
                .map(|(i, name)| {
                    let (bck, exts, name) = (bck.clone(), exts.clone(), name.clone());
                    async move {
                        let format = format_for(&name, None)?;
                        let n = name.clone();
                        let data = tokio::task::spawn_blocking(move || {
                            synthetic_shard(format, i as u64, samples, size, &exts, seed)
                        })
                        .await??;
                        let len = data.len() as u64;
                        client.put_bytes(&bck, &n, data.into()).await?;
                        Ok(len)
                    }
                })
                .buffer_unordered(parallel.max(1))
                .collect()
                .await;
            let mut total = 0;
            for r in results {
                total += r?;
            }
            println!(
                "generated {count} shards ({}) of {samples} samples in {bck} in {:.1}s",
                human(total),
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}

/// Packs every file under `dir` (sorted by path, names relative to `dir`) into `out`.
fn pack_dir(dir: &Path, out: &Path, format: Format) -> anyhow::Result<(u64, u64)> {
    let mut files = Vec::new();
    walk(dir, &mut files)?;
    files.sort();
    let f = std::io::BufWriter::new(std::fs::File::create(out)?);
    let mtime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut w = ShardWriter::new(format, f, mtime);
    let (mut count, mut bytes) = (0u64, 0u64);
    for p in &files {
        let rel = p
            .strip_prefix(dir)
            .map(|r| r.to_string_lossy().replace('\\', "/"))
            .unwrap_or_default();
        let mut src = std::fs::File::open(p).with_context(|| p.display().to_string())?;
        let size = src.metadata()?.len();
        w.append(&rel, size, &mut src)
            .with_context(|| format!("adding {}", p.display()))?;
        count += 1;
        bytes += size;
    }
    let mut f = w.finish()?;
    std::io::Write::flush(&mut f)?;
    Ok((count, bytes))
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| dir.display().to_string())? {
        let entry = entry?;
        let ft = entry.file_type()?;
        if ft.is_dir() {
            walk(&entry.path(), out)?;
        } else if ft.is_file() {
            out.push(entry.path());
        }
    }
    Ok(())
}

/// Deterministic pseudo-random bytes.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// One synthetic WebDataset shard: `samples` samples keyed `sample-<shard>-<n>`, one file per
/// extension (binary ones `size` bytes, `cls` a class number, `json`/`txt` small text).
pub fn synthetic_shard(
    format: Format,
    shard: u64,
    samples: u64,
    size: usize,
    exts: &[String],
    seed: u64,
) -> anyhow::Result<Vec<u8>> {
    let mut w = ShardWriter::new(format, Vec::new(), 0);
    for s in 0..samples {
        let key = format!("sample-{shard:06}-{s:06}");
        let global = shard * samples + s;
        for ext in exts {
            let data = match ext.as_str() {
                "cls" => format!("{}\n", global % 1000).into_bytes(),
                "json" => json!({"key": key, "shard": shard, "index": s})
                    .to_string()
                    .into_bytes(),
                "txt" => format!("caption of {key}\n").into_bytes(),
                _ => noise(seed ^ global.wrapping_mul(31) ^ ext.len() as u64, size),
            };
            w.append_bytes(&format!("{key}.{ext}"), &data)?;
        }
    }
    Ok(w.finish()?)
}

/// Parses the items of `grist batch`.
fn batch_request(text: &str, default: Option<&Bck>) -> anyhow::Result<MossReq> {
    let t = text.trim_start();
    if t.starts_with('{') {
        return Ok(serde_json::from_str(t)?);
    }
    let mut req = MossReq::default();
    if t.starts_with('[') {
        let v: Vec<Value> = serde_json::from_str(t)?;
        for item in v {
            req.items.push(match item {
                Value::String(s) => item_of(&s, "", default)?,
                other => serde_json::from_value(other)?,
            });
        }
        return Ok(req);
    }
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, archpath) = line.split_once('\t').unwrap_or((line, ""));
        req.items.push(item_of(name, archpath, default)?);
    }
    Ok(req)
}

fn item_of(name: &str, archpath: &str, default: Option<&Bck>) -> anyhow::Result<MossIn> {
    let (bucket, provider, objname) = if name.contains("://") {
        let (b, n) = object(name)?;
        (b.name.clone(), b.provider.as_str().to_owned(), n)
    } else {
        match default {
            Some(b) => (
                b.name.clone(),
                b.provider.as_str().to_owned(),
                name.to_owned(),
            ),
            None => bail!("{name}: no bucket (give ais://bucket/name, or a default bucket)"),
        }
    };
    Ok(MossIn {
        objname,
        bucket,
        provider,
        archpath: archpath.to_owned(),
        ..Default::default()
    })
}

pub async fn batch(client: &Client, args: BatchArgs) -> anyhow::Result<()> {
    let default = args.bucket.as_deref().map(bucket).transpose()?;
    let text = if args.list == "-" {
        let mut s = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut tokio::io::stdin(), &mut s).await?;
        s
    } else {
        tokio::fs::read_to_string(&args.list)
            .await
            .with_context(|| args.list.clone())?
    };
    let mut req = batch_request(&text, default.as_ref())?;
    if req.items.is_empty() {
        bail!("no items in {}", args.list);
    }
    if let Some(m) = args.mime {
        req.mime = m;
    }
    req.coer |= args.continue_on_error;
    req.onob |= args.only_name;
    req.strm = true;
    let path = match &default {
        Some(b) => format!("/v1/ml/moss/{}", b.name),
        None => "/v1/ml/moss".to_owned(),
    };
    let mut r = http()?
        .get(format!("{}{path}", client.endpoint()))
        .json(&req);
    if let Some(b) = &default {
        r = r.query(&bucket_query(b));
    }
    if let Some(etl) = &args.etl {
        r = r.query(&[("etl_name", etl), ("etl_args", &args.etl_args)]);
    }
    let started = Instant::now();
    let resp = Client::send(r).await?;
    let n = save(resp, &args.output).await?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "batch: {} items, {} in {secs:.2}s ({:.0} items/s){}",
        req.items.len(),
        human(n),
        req.items.len() as f64 / secs.max(1e-9),
        if args.output == "-" {
            String::new()
        } else {
            format!(" => {}", args.output)
        }
    );
    Ok(())
}

pub async fn reshard(client: &Client, args: ReshardArgs, json_out: bool) -> anyhow::Result<()> {
    let mut spec: Value = match &args.spec {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| p.display().to_string())?;
            serde_json::from_str(&text)
                .with_context(|| format!("{}: expected JSON", p.display()))?
        }
        None => json!({}),
    };
    if let Some(b) = &args.bucket {
        let b = bucket(b)?;
        spec["input_bck"] = json!({"name": b.name, "provider": b.provider.as_str()});
    }
    let sel = args.select.to_value();
    if sel.as_object().is_some_and(|o| !o.is_empty()) {
        spec["input_format"] = sel;
    }
    if let Some(o) = args.output {
        spec["output_format"] = o.into();
    }
    if let Some(t) = &args.to {
        let b = bucket(t)?;
        spec["output_bck"] = json!({"name": b.name, "provider": b.provider.as_str()});
    }
    if let Some(s) = args.shard_size {
        spec["output_shard_size"] = s.into();
    }
    if let Some(e) = args.ext {
        spec["output_extension"] = e.into();
    }
    if let Some(a) = args.algorithm {
        spec["algorithm"]["kind"] = a.into();
    }
    if let Some(s) = args.seed {
        spec["algorithm"]["seed"] = s.into();
    }
    if args.decreasing {
        spec["algorithm"]["decreasing"] = true.into();
    }
    if let Some(p) = &args.ekm {
        let text = std::fs::read_to_string(p).with_context(|| p.display().to_string())?;
        spec["ekm"] = serde_json::from_str(&text)?;
    }
    if let Some(n) = args.max_mem_records {
        spec["max_mem_records"] = n.into();
    }
    if args.dry_run {
        spec["dry_run"] = true.into();
    }
    if spec.get("input_bck").is_none() {
        bail!("name the input bucket (argument or input_bck in the spec)");
    }
    let resp = Client::send(
        http()?
            .post(format!("{}/v1/sort", client.endpoint()))
            .json(&spec),
    )
    .await?;
    let id = resp.text().await?;
    jobs::started(client, id.trim(), "reshard", &args.follow, json_out).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_lists_parse() {
        let b = Bck::parse_uri("ais://d").unwrap().0;
        let r = batch_request("a\nb/c\tm.jpg\n# comment\nais://x/y\n", Some(&b)).unwrap();
        assert_eq!(r.items.len(), 3);
        assert_eq!(
            (r.items[1].objname.as_str(), r.items[1].archpath.as_str()),
            ("b/c", "m.jpg")
        );
        assert_eq!(r.items[2].bucket, "x");
        let r = batch_request(r#"["a", {"objname": "s.tar", "archpath": "m"}]"#, Some(&b)).unwrap();
        assert_eq!(r.items[1].archpath, "m");
        assert!(batch_request("a", None).is_err());
    }

    #[test]
    fn synthetic_shards_are_deterministic_webdataset() {
        let exts: Vec<String> = ["jpg", "cls", "json"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let a = synthetic_shard(Format::Tar, 3, 5, 100, &exts, 1).unwrap();
        let b = synthetic_shard(Format::Tar, 3, 5, 100, &exts, 1).unwrap();
        assert_eq!(a, b);
        let members =
            gristmill_shard::list_members(Format::Tar, std::io::Cursor::new(a), Default::default())
                .unwrap();
        assert_eq!(members.len(), 15);
        assert_eq!(members[0].name, "sample-000003-000000.jpg");
        assert_eq!(members[0].size, 100);
    }
}

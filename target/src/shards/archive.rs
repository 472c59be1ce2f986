//! The archive job: pack objects into shards.
//!
//! - **One shard** (`archname` without a range, AIStore's `archive` action): the target that
//!   owns `archname` in the destination bucket builds it; it enumerates the whole selection
//!   (names, a template, or a prefix listed through the proxy) and assembles the shard like a
//!   get-batch, reading its own objects from disk and pulling every other object from its
//!   owner's part stream, in selection order. The other targets have nothing to do. With
//!   `append` (AIStore's `aate`) and an existing tar, the old members are kept.
//! - **A series** (`archname` = `out-{0000..}.tar`, and/or a `shard_size`): every target packs
//!   the objects *it owns* (in name order) into its own shards, cutting a new one when the
//!   current one reaches `shard_size` bytes, so no object crosses the network twice. Names
//!   never collide across targets: with the job's targets sorted by id, target *k* of *n*
//!   writes shards number `k`, `k + n`, `k + 2n`, ... of the series (the numbers interleave;
//!   a target with fewer objects leaves gaps at the end). Each shard is streamed straight
//!   into a PUT to the owner of its name.
//!
//! Either way, the output is written like any PUT (atomic; a `.tar` gets its index).

use std::sync::Arc;

use gristmill_core::api::{ActionMsg, ListObjectsMsg, ListObjectsPage, action};
use gristmill_core::job::{Resolved, Selection};
use gristmill_core::shards::{ArchiveOpts, Series};
use gristmill_core::{ApiError, Bck, ErrorKind};
use gristmill_shard::Format;

use super::batch::{self, Assembly, Item, Outcome};
use super::catalog::{self, Catalog};
use super::io::{self, FileRange};
use crate::Target;
use crate::jobs::JobRun;

pub(crate) async fn execute(t: &Arc<Target>, run: &Arc<JobRun>) -> Result<(), ApiError> {
    let spec = &run.spec;
    let opts = spec
        .opts
        .archive
        .clone()
        .ok_or_else(|| ApiError::bad_request("archive job without an archive name"))?;
    let src = spec
        .bck
        .clone()
        .ok_or_else(|| ApiError::bad_request("archive job without a source bucket"))?;
    let dst = spec.to_bck.clone().unwrap_or_else(|| src.clone());
    t.require_bucket(&src).await?;
    t.require_bucket(&dst).await?;
    let format = output_format(&opts)?;
    if opts.shard_size == 0 && !opts.archname.contains('{') {
        one_shard(t, run, &opts, &src, &dst, format).await
    } else {
        series(t, run, &opts, &src, &dst, format).await
    }
}

/// The output format: `mime`, else the name's (or template suffix's) extension, else tar.
pub(crate) fn output_format(opts: &ArchiveOpts) -> Result<Format, ApiError> {
    if !opts.mime.is_empty() {
        return Ok(Format::parse(&opts.mime)?);
    }
    let name = match Series::parse(&opts.archname) {
        Ok(s) => format!("x{}", s.suffix()),
        Err(_) => opts.archname.clone(),
    };
    Ok(Format::from_name(&name).unwrap_or(Format::Tar))
}

fn member_name(opts: &ArchiveOpts, src: &Bck, name: &str) -> String {
    if opts.include_bucket {
        format!("{}/{name}", src.name)
    } else {
        name.to_owned()
    }
}

fn now_s() -> u64 {
    crate::store::now_ns().max(0) as u64 / 1_000_000_000
}

/// Every name of the selection, cluster-wide, in order (names and templates as given, a
/// prefix as the proxy lists it).
async fn all_names(t: &Target, sel: &Selection, bck: &Bck) -> Result<Vec<String>, ApiError> {
    match sel.resolve()? {
        Resolved::Names(n) => Ok(n),
        Resolved::Template(tpl) => Ok(tpl.names().collect()),
        Resolved::Prefix(prefix) => list_cluster(t, bck, &prefix).await,
    }
}

/// The names of a bucket under a prefix, through the primary proxy's merged listing.
pub(crate) async fn list_cluster(
    t: &Target,
    bck: &Bck,
    prefix: &str,
) -> Result<Vec<String>, ApiError> {
    let primary = t.smap().proxy_si.url().to_owned();
    let mut names = Vec::new();
    let mut lso = ListObjectsMsg {
        prefix: prefix.to_owned(),
        pagesize: 10_000,
        props: "name".into(),
        ..Default::default()
    };
    loop {
        let msg = ActionMsg {
            action: action::LIST.into(),
            name: String::new(),
            value: serde_json::to_value(&lso).map_err(|e| ApiError::internal(e.to_string()))?,
        };
        let resp = t
            .http
            .get(format!("{primary}/v1/buckets/{}", bck.name))
            .query(&[
                ("provider", bck.provider.as_str()),
                ("namespace", bck.namespace.uname().as_str()),
            ])
            .json(&msg)
            .send()
            .await
            .map_err(|e| ApiError::unavailable(format!("listing {bck}: {e}")))?;
        if !resp.status().is_success() {
            return Err(ApiError::unavailable(format!(
                "listing {bck}: the proxy answered {}",
                resp.status()
            )));
        }
        let page: ListObjectsPage = resp
            .json()
            .await
            .map_err(|e| ApiError::unavailable(format!("listing {bck}: {e}")))?;
        names.extend(page.entries.into_iter().map(|e| e.name));
        if page.continuation_token.is_empty() {
            return Ok(names);
        }
        lso.continuation_token = page.continuation_token;
        lso.uuid = page.uuid;
    }
}

/// Streams a PUT of `body` to the owner of `dst/name`.
pub(crate) async fn put_stream(
    t: &Target,
    dst: &Bck,
    name: &str,
    body: io::PipeStream,
) -> Result<(), ApiError> {
    let smap = t.smap();
    let owner = smap
        .owner(&dst.object_uname(name))
        .ok_or_else(|| ApiError::unavailable("no targets in the cluster map"))?;
    let url = format!(
        "{}/v1/objects/{}/{}",
        owner.url(),
        dst.name,
        gristmill_core::name::encode_path(name)
    );
    let resp = t
        .relay
        .put(url)
        .query(&[
            ("provider", dst.provider.as_str()),
            ("namespace", dst.namespace.uname().as_str()),
        ])
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .map_err(|e| ApiError::unavailable(format!("storing {dst}/{name}: {e}")))?;
    if !resp.status().is_success() {
        return Err(crate::cluster::peer::peer_error(resp, &format!("storing {dst}/{name}")).await);
    }
    Ok(())
}

/// Counts an item's outcome in the job.
fn progress<'a>(run: &'a JobRun, names: &'a [String]) -> impl FnMut(usize, Outcome) + 'a {
    move |i, outcome| match outcome {
        Outcome::Written(n) => run.record(&names[i], Ok(crate::jobs::Outcome::Done(n))),
        Outcome::Missing(e) => run.record(&names[i], Err(e)),
    }
}

async fn one_shard(
    t: &Arc<Target>,
    run: &Arc<JobRun>,
    opts: &ArchiveOpts,
    src: &Bck,
    dst: &Bck,
    format: Format,
) -> Result<(), ApiError> {
    gristmill_core::validate_object_name(&opts.archname)?;
    let smap = t.smap();
    let owner = smap
        .owner(&dst.object_uname(&opts.archname))
        .ok_or_else(|| ApiError::unavailable("no targets in the cluster map"))?;
    if owner.daemon_id != t.id {
        *run.total.lock().expect("job total lock") = Some(0);
        return Ok(());
    }
    let mut names = all_names(t, &run.spec.selection, src).await?;
    if src == dst {
        names.retain(|n| n != &opts.archname);
    }
    // Appending: the shard's current members stay first (tar: its bytes up to the trailer).
    let base = if opts.append {
        existing_tar(t, dst, &opts.archname).await?
    } else {
        None
    };
    if let Some((_, _, taken)) = &base {
        names.retain(|n| {
            let keep = !taken.contains(&member_name(opts, src, n));
            if !keep {
                run.record(
                    n,
                    Err(ApiError::new(
                        ErrorKind::Conflict,
                        format!("{dst}/{} already has {n:?}", opts.archname),
                    )),
                );
            }
            keep
        });
    }
    *run.total.lock().expect("job total lock") = Some(names.len() as u64);
    let coer = run.spec.opts.continue_on_err;
    let items: Vec<Item> = names.iter().map(|n| Item::object(src, n)).collect();
    let prep = tokio::select! {
        p = batch::prepare(t, &items, coer) => p?,
        _ = run.cancel.cancelled() => return Ok(()),
    };
    let asm = Assembly {
        names: names.iter().map(|n| member_name(opts, src, n)).collect(),
        missing: Vec::new(),
        items,
        coer,
        skip_missing: true,
        format,
        mtime: now_s(),
        etl: None,
    };
    let (store, shards, run2) = (t.store.clone(), t.shards.clone(), run.clone());
    let (rx, stream) = io::pipe(move |ready, out| {
        ready.send(());
        if let Some((file, end, _)) = base {
            io::copy(&mut FileRange::new(file, 0, end), out).map_err(io::io_err)?;
        }
        batch::write(
            &store,
            &shards,
            &asm,
            prep,
            &mut *out,
            &mut progress(&run2, &names),
        )?;
        Ok(())
    });
    io::ready(rx).await?;
    put_stream(t, dst, &opts.archname, stream).await
}

/// An existing tar to append to: its file, where its trailer starts, and its member names.
async fn existing_tar(
    t: &Target,
    bck: &Bck,
    name: &str,
) -> Result<Option<(Arc<std::fs::File>, u64, std::collections::HashSet<String>)>, ApiError> {
    let (store, shards) = (t.store.clone(), t.shards.clone());
    let (bck, name) = (bck.clone(), name.to_owned());
    tokio::task::spawn_blocking(move || {
        let (meta, file) = match io::open_local(&store, &bck, &name) {
            Ok(x) => x,
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let file = Arc::new(file);
        let format = super::format_of(&name, None, &file)?;
        if format != Format::Tar {
            return Err(ApiError::bad_request(format!(
                "appending to {bck}/{name}: only .tar shards can be appended to"
            )));
        }
        let cat = catalog::load(&store, &shards.catalogs, &bck, &meta, &file, format)?;
        let Catalog::Tar(idx) = &*cat else {
            return Err(ApiError::internal("tar shard without a tar index"));
        };
        let names = idx.entries().iter().map(|e| e.name.clone()).collect();
        Ok(Some((file, idx.end_offset(), names)))
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
}

async fn series(
    t: &Arc<Target>,
    run: &Arc<JobRun>,
    opts: &ArchiveOpts,
    src: &Bck,
    dst: &Bck,
    format: Format,
) -> Result<(), ApiError> {
    let series = Series::parse(&opts.archname)?;
    let smap = t.smap();
    let mut ids: Vec<&str> = smap
        .active_targets()
        .map(|n| n.daemon_id.as_str())
        .collect();
    ids.sort_unstable();
    let n = ids.len() as u64;
    let k = ids
        .iter()
        .position(|id| *id == t.id)
        .ok_or_else(|| ApiError::unavailable("this target is not in the cluster map"))?
        as u64;
    let mut names = crate::jobs::enumerate(t, &run.spec, src).await?;
    names.sort();
    *run.total.lock().expect("job total lock") = Some(names.len() as u64);
    if names.is_empty() {
        return Ok(());
    }
    let coer = run.spec.opts.continue_on_err;
    // Sizes (remote objects are fetched here): check everything once, then cut.
    let items: Vec<Item> = names.iter().map(|nm| Item::object(src, nm)).collect();
    let sizes = batch::sizes(t, &items, coer).await?;
    let limit = if opts.shard_size == 0 {
        u64::MAX
    } else {
        opts.shard_size
    };
    let mut groups: Vec<Vec<usize>> = vec![Vec::new()];
    let mut filled = 0u64;
    for (i, size) in sizes.iter().enumerate() {
        let Some(size) = size else {
            run.record(
                &names[i],
                Err(ApiError::not_found(format!(
                    "{src}/{} could not be read",
                    names[i]
                ))),
            );
            continue;
        };
        if filled >= limit && groups.last().is_some_and(|g| !g.is_empty()) {
            groups.push(Vec::new());
            filled = 0;
        }
        if let Some(g) = groups.last_mut() {
            g.push(i);
        }
        filled += size;
    }
    for (j, group) in groups.into_iter().enumerate() {
        if group.is_empty() || run.cancel.is_cancelled() {
            continue;
        }
        let out_name = series.name(k + n * j as u64)?;
        let g_items: Vec<Item> = group.iter().map(|&i| items[i].clone()).collect();
        let g_names: Vec<String> = group.iter().map(|&i| names[i].clone()).collect();
        let prep = batch::prepare(t, &g_items, coer).await?;
        let asm = Assembly {
            names: g_names
                .iter()
                .map(|nm| member_name(opts, src, nm))
                .collect(),
            missing: Vec::new(),
            items: g_items,
            coer,
            skip_missing: true,
            format,
            mtime: now_s(),
            etl: None,
        };
        let (store, shards, run2) = (t.store.clone(), t.shards.clone(), run.clone());
        let (rx, stream) = io::pipe(move |ready, out| {
            ready.send(());
            batch::write(
                &store,
                &shards,
                &asm,
                prep,
                &mut *out,
                &mut progress(&run2, &g_names),
            )?;
            Ok(())
        });
        io::ready(rx).await?;
        put_stream(t, dst, &out_name, stream).await?;
        tracing::info!(job = %run.spec.id, shard = %out_name, objects = group.len(), "shard written");
    }
    Ok(())
}

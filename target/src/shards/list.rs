//! One target's page of a listing with `LsArchDir`: every shard this target stores is followed
//! by its file members, as entries named `shard\0member` (flag `ENTRY_IN_ARCH`); the proxy
//! merges pages by these names and turns the NUL into `/` for the client.
//!
//! Order and paging: the sort key of an object is its name, of a member `shard\0member`.
//! Since names never contain NUL, byte order of keys puts each shard's members (sorted by
//! member name) right after the shard and before any other object — the same total order on
//! every target, so the proxy's k-way merge and its continuation token (the last key) stay
//! exact. A token `shard\0member` resumes inside that shard; the index range scan after it
//! continues with the next object. A prefix may reach into a shard (`a.tar/train/`): such
//! shards' matching members come first, since their keys sort before every name under the
//! prefix.

use std::sync::Arc;

use axum::http::HeaderMap;
use axum::response::Response;
use gristmill_core::api::{ENTRY_IS_CACHED, ListEntry, ListObjectsMsg, ListObjectsPage};
use gristmill_core::shards::{ARCH_KEY_SEP, ENTRY_IN_ARCH, ENTRY_IS_ARCHIVE};
use gristmill_core::{ApiError, Bck};
use gristmill_shard::Format;

use super::catalog::{self, Catalog};
use crate::Target;

/// Objects read from the index per step while filling a page.
const STEP: usize = 1000;

pub(crate) async fn list_objects(
    t: &Target,
    bck: &Bck,
    lso: &ListObjectsMsg,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let limit = lso.page_size();
    let after = lso.after().to_owned();
    let prefix = lso.prefix.clone();
    let mut out: Vec<ListEntry> = Vec::new();

    // Shards whose members sort before every object the index scan returns: the one the
    // token stopped inside, and the ones the prefix reaches into.
    let mut early: Vec<String> = crossing_shards(&prefix);
    match after.split_once(ARCH_KEY_SEP) {
        Some((shard, _)) => early.push(shard.to_owned()),
        // The previous page ended with a shard itself: its members come next.
        None if Format::from_name(&after).is_some() => early.push(after.clone()),
        None => {}
    }
    early.sort();
    early.dedup();
    for shard in early {
        if out.len() >= limit {
            break;
        }
        let Some(cat) = catalog_of(t, bck, &shard).await else {
            continue;
        };
        push_members(&mut out, &shard, &cat, &prefix, &after);
    }

    let mut cursor = after.clone();
    let mut exhausted = false;
    while out.len() < limit {
        let page = t.store.list(bck, &prefix, &cursor, STEP, false).await?;
        let mut done = page.len() < STEP;
        for m in &page {
            if out.len() >= limit {
                // Objects of this page are left: there is more.
                done = false;
                break;
            }
            let cat = if Format::from_name(&m.name).is_some() {
                catalog_of(t, bck, &m.name).await
            } else {
                None
            };
            let mut e = crate::read::local::entry(t, m, lso);
            if cat.is_some() {
                e.flags |= ENTRY_IS_ARCHIVE;
            }
            out.push(e);
            if let Some(cat) = cat {
                push_members(&mut out, &m.name, &cat, &prefix, &after);
            }
        }
        if done {
            exhausted = true;
            break;
        }
        match page.last() {
            Some(last) => cursor = last.name.clone(),
            None => {
                exhausted = true;
                break;
            }
        }
    }
    let more = out.len() >= limit && !(exhausted && out.len() == limit);
    out.truncate(limit);
    let page = ListObjectsPage::answering(lso, out, more);
    // With the drop counter, read after the scan as for plain listings.
    Ok(crate::api::buckets::answer_page(t, &page, headers))
}

/// Appends the file members of `shard` whose keys sort after `after` and whose full names
/// (`shard/member`) start with `prefix`.
fn push_members(out: &mut Vec<ListEntry>, shard: &str, cat: &Catalog, prefix: &str, after: &str) {
    for (member, size) in cat.files_sorted() {
        let key = format!("{shard}{ARCH_KEY_SEP}{member}");
        if key.as_str() <= after {
            continue;
        }
        if !prefix.is_empty() && !format!("{shard}/{member}").starts_with(prefix) {
            continue;
        }
        out.push(ListEntry {
            name: key,
            size,
            flags: ENTRY_IS_CACHED | ENTRY_IN_ARCH,
            ..Default::default()
        });
    }
}

/// Names of shards the prefix reaches into: every `p[..i]` with `p[i] == '/'` that has an
/// archive extension.
fn crossing_shards(prefix: &str) -> Vec<String> {
    prefix
        .match_indices('/')
        .map(|(i, _)| &prefix[..i])
        .filter(|p| Format::from_name(p).is_some())
        .map(str::to_owned)
        .collect()
}

/// The catalog of a shard stored here, or `None` (absent, not a valid archive).
async fn catalog_of(t: &Target, bck: &Bck, name: &str) -> Option<Arc<Catalog>> {
    let (store, shards) = (t.store.clone(), t.shards.clone());
    let (bck, name) = (bck.clone(), name.to_owned());
    tokio::task::spawn_blocking(move || {
        let (meta, file) = super::io::open_local(&store, &bck, &name).ok()?;
        let file = Arc::new(file);
        let format = super::format_of(&name, None, &file).ok()?;
        match catalog::load(&store, &shards.catalogs, &bck, &meta, &file, format) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::debug!(bucket = %bck, object = %name, error = %e.message, "listing: shard not expanded");
                None
            }
        }
    })
    .await
    .ok()
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_reach_into_shards() {
        assert_eq!(crossing_shards("a.tar/x/"), vec!["a.tar"]);
        assert_eq!(
            crossing_shards("d/b.tgz/c.zip/m"),
            vec!["d/b.tgz", "d/b.tgz/c.zip"]
        );
        assert!(crossing_shards("a/b/").is_empty());
    }
}

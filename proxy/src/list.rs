//! List-objects across the cluster: ask every target of the map for its first `page_size` names
//! after the continuation token, merge, keep the first `page_size`. Each target's names are
//! sorted, and a name on two targets (mid-move, or a replica) is listed once, so the merged page
//! is exactly the next `page_size` names of the bucket — no entry is skipped or repeated,
//! whatever the page size. The rule: a page is the union of every target that may hold a name
//! under the maps still being rebalanced (targets leaving the map stay in it until their share
//! is done), taken so that no copy in flight between two targets is missed (see
//! [`list_objects`]). More unreachable targets than a bucket's copies can cover fail the page
//! (a silently short listing is worse than an error).

use gristmill_core::api::{ActionMsg, ListObjectsMsg, ListObjectsPage, action, header as h};
use gristmill_core::{ApiError, Bck, ErrorKind};

use crate::meta::Proxy;

/// Most rounds a page takes while targets drop moved copies; after them the page is the
/// union of the last two rounds (see [`list_objects`]).
const MAX_ROUNDS: usize = 4;

pub(crate) async fn list_objects(
    proxy: &Proxy,
    bck: &Bck,
    mut lso: ListObjectsMsg,
) -> Result<ListObjectsPage, ApiError> {
    let page_size = lso.page_size();
    if lso.uuid.is_empty() {
        lso.uuid = uuid::Uuid::new_v4().to_string();
    }
    let smap = proxy.smap();
    // Every target in the map, not only those placement uses: a target in maintenance or
    // being decommissioned holds objects until its rebalance share is done (a decommissioned
    // one leaves the map only then).
    let targets: Vec<_> = smap.tmap.values().cloned().collect();
    if targets.is_empty() {
        return Err(ApiError::new(
            ErrorKind::Unavailable,
            "no targets in the cluster yet",
        ));
    }
    // With N copies of every object, any N-1 targets may be unreachable and the page is
    // still whole (each object has a copy on a target that answered).
    let copies = proxy.bmd().get(bck).map_or(1, |r| r.props.mirror.copies());
    let msg = ActionMsg {
        action: action::LIST.into(),
        name: String::new(),
        value: serde_json::to_value(&lso).map_err(|e| ApiError::internal(e.to_string()))?,
    };
    // An object moving from A to B is missed only if B's page is taken before it arrives and
    // A's after A dropped it. Targets count their drops (before each one) and send the count
    // with every page: if no answered target's count moved since it was last seen (by this or
    // an earlier listing, always before this round began), no drop happened in between and
    // the round is exact. Otherwise the round is repeated; a move that completes within one
    // round is seen by the next, so the union of two consecutive rounds is exact as well.
    let mut previous: Option<Vec<ListObjectsPage>> = None;
    let mut round = 0;
    let pages = loop {
        round += 1;
        let seen = proxy.list_drops.lock().expect("list_drops lock").clone();
        let answers = fetch_pages(proxy, bck, &targets, &msg, copies).await?;
        let mut stable = true;
        let mut pages = Vec::with_capacity(answers.len());
        {
            let mut cache = proxy.list_drops.lock().expect("list_drops lock");
            for (id, drops, page) in answers {
                if let Some(d) = drops {
                    stable &= seen.get(&id) == Some(&d);
                    cache.insert(id, d);
                }
                pages.push(page);
            }
        }
        if stable {
            break pages;
        }
        if round >= MAX_ROUNDS {
            tracing::debug!(bucket = %bck, rounds = round, "listing: targets kept dropping moved copies; page is the union of two rounds");
            let mut both = pages;
            both.extend(previous.take().unwrap_or_default());
            break both;
        }
        previous = Some(pages);
    };
    let expand = lso.flags & gristmill_core::shards::LS_ARCH_DIR != 0;
    let mut page = merge(pages, page_size, lso.uuid);
    if expand {
        // Targets name archive members `shard\0member` so they sort right after their shard;
        // the token keeps that form, clients see `shard/member`.
        for e in &mut page.entries {
            if e.name.contains(gristmill_core::shards::ARCH_KEY_SEP) {
                e.name = e.name.replace(gristmill_core::shards::ARCH_KEY_SEP, "/");
            }
        }
    }
    Ok(page)
}

/// One round: every target's page, with its drop counter (when it sent one). Up to
/// `copies - 1` targets may fail to answer; more fail the page (a silently short listing is
/// worse than an error).
async fn fetch_pages(
    proxy: &Proxy,
    bck: &Bck,
    targets: &[gristmill_core::Node],
    msg: &ActionMsg,
    copies: usize,
) -> Result<Vec<(String, Option<u64>, ListObjectsPage)>, ApiError> {
    let ns = bck.namespace.uname();
    let requests = targets.iter().map(|t| {
        let req = proxy
            .http
            .get(format!("{}/v1/buckets/{}", t.url(), bck.name))
            .query(&[
                ("provider", bck.provider.as_str()),
                ("namespace", ns.as_str()),
            ])
            .header(reqwest::header::ACCEPT, h::MSGPACK)
            .json(msg)
            .send();
        async move {
            let resp = req.await.map_err(|e| {
                ApiError::new(
                    ErrorKind::Unavailable,
                    format!("listing: target {} unreachable: {e}", t.daemon_id),
                )
            })?;
            let status = resp.status();
            let drops = resp
                .headers()
                .get(h::DROPS)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            let body = resp
                .bytes()
                .await
                .map_err(|e| ApiError::new(ErrorKind::Unavailable, format!("listing: {e}")))?;
            if !status.is_success() {
                return Err(ApiError::from_peer(status.as_u16(), &body, ""));
            }
            let page = ListObjectsPage::from_msgpack(&body).map_err(|e| {
                ApiError::internal(format!("listing: bad page from {}: {e}", t.daemon_id))
            })?;
            Ok((t.daemon_id.clone(), drops, page))
        }
    });
    let results = futures::future::join_all(requests).await;
    let mut pages = Vec::with_capacity(results.len());
    let mut unreachable = Vec::new();
    for r in results {
        match r {
            Ok(p) => pages.push(p),
            Err(e) if e.kind == ErrorKind::Unavailable => unreachable.push(e),
            Err(e) => return Err(e),
        }
    }
    if unreachable.len() >= copies.max(1) {
        return Err(unreachable.swap_remove(0));
    }
    Ok(pages)
}

/// Merges per-target pages into the cluster page.
fn merge(pages: Vec<ListObjectsPage>, page_size: usize, uuid: String) -> ListObjectsPage {
    // A target with a full page may hold more names beyond it.
    let maybe_more = pages.iter().any(|p| !p.continuation_token.is_empty());
    let mut entries: Vec<_> = pages.into_iter().flat_map(|p| p.entries).collect();
    entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    // During a rebalance an object can sit on its old and its new owner at once: list it once.
    entries.dedup_by(|a, b| a.name == b.name);
    let truncated = entries.len() > page_size;
    entries.truncate(page_size);
    let continuation_token = match entries.last() {
        Some(last) if truncated || maybe_more => last.name.clone(),
        _ => String::new(),
    };
    ListObjectsPage {
        uuid,
        continuation_token,
        flags: 0,
        entries,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gristmill_core::api::ListEntry;

    fn page(names: &[&str], full: bool) -> ListObjectsPage {
        ListObjectsPage {
            continuation_token: if full {
                names.last().unwrap().to_string()
            } else {
                String::new()
            },
            entries: names
                .iter()
                .map(|n| ListEntry {
                    name: n.to_string(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn merge_keeps_order_and_exact_token() {
        let m = merge(
            vec![page(&["a", "d"], true), page(&["b", "c"], true)],
            2,
            "u".into(),
        );
        let names: Vec<_> = m.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(m.continuation_token, "b");
        let last = merge(vec![page(&["x"], false), page(&[], false)], 2, "u".into());
        assert_eq!(last.continuation_token, "");
        let dup = merge(
            vec![page(&["a", "b"], false), page(&["b", "c"], false)],
            5,
            "u".into(),
        );
        let names: Vec<_> = dup.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            ["a", "b", "c"],
            "an object on two targets is listed once"
        );
        let empty = merge(vec![page(&[], false)], 2, "u".into());
        assert!(empty.entries.is_empty() && empty.continuation_token.is_empty());
    }
}

//! List-objects across the cluster: ask every target for its first `page_size` names after the
//! continuation token, merge, keep the first `page_size`. Each target's names are disjoint and
//! sorted, so the merged page is exactly the next `page_size` names of the bucket — no entry is
//! skipped or repeated, whatever the page size. A target that does not answer fails the page
//! (a silently short listing is worse than an error).

use gristmill_core::api::{ActionMsg, ListObjectsMsg, ListObjectsPage, action, header as h};
use gristmill_core::{ApiError, Bck, ErrorKind};

use crate::meta::Proxy;

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
    let targets: Vec<_> = smap.active_targets().cloned().collect();
    if targets.is_empty() {
        return Err(ApiError::new(
            ErrorKind::Unavailable,
            "no targets in the cluster yet",
        ));
    }
    let msg = ActionMsg {
        action: action::LIST.into(),
        name: String::new(),
        value: serde_json::to_value(&lso).map_err(|e| ApiError::internal(e.to_string()))?,
    };
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
            .json(&msg)
            .send();
        async move {
            let resp = req.await.map_err(|e| {
                ApiError::new(
                    ErrorKind::Unavailable,
                    format!("listing: target {} unreachable: {e}", t.daemon_id),
                )
            })?;
            let status = resp.status();
            let body = resp
                .bytes()
                .await
                .map_err(|e| ApiError::new(ErrorKind::Unavailable, format!("listing: {e}")))?;
            if !status.is_success() {
                let message = serde_json::from_slice::<gristmill_core::ErrorBody>(&body)
                    .map(|b| b.message)
                    .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned());
                let kind = ErrorKind::from_status(
                    http::StatusCode::from_u16(status.as_u16())
                        .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR),
                );
                return Err(ApiError::new(kind, message));
            }
            ListObjectsPage::from_msgpack(&body).map_err(|e| {
                ApiError::internal(format!("listing: bad page from {}: {e}", t.daemon_id))
            })
        }
    });
    let pages = futures::future::try_join_all(requests).await?;
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

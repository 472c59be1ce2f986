//! List-objects across the cluster: ask every target of the map for its next names after the
//! continuation token, merge, keep the first `page_size`. Each target's names are sorted, and a
//! name on two targets (mid-move, or a replica) is listed once, so the merged page is exactly
//! the next `page_size` names of the bucket — no entry is skipped or repeated, whatever the
//! page size. The rule: a page is the union of every target that may hold a name under the
//! maps still being rebalanced (targets leaving the map stay in it until their share is done),
//! taken so that no copy in flight between two targets is missed (see [`list_objects`]). More
//! unreachable targets than a bucket's copies can cover fail the page (a silently short
//! listing is worse than an error).
//!
//! Each target is asked for a little more than its share of a page, not a whole page (see
//! [`share_of`]): HRW spreads names evenly, so the names fetched per page stay a small
//! multiple of the page whatever the number of targets (a whole page from each of N targets,
//! of which the merge kept 1/N, made a page's cost grow with N). A target whose names end before the page
//! does is asked for more until every target either has no more names or has sent names past
//! the page's last one (see [`fill_round`]).

use gristmill_core::api::{
    ActionMsg, ListEntry, ListObjectsMsg, ListObjectsPage, action, header as h,
};
use gristmill_core::{ApiError, Bck, ErrorKind, Node};

use crate::meta::Proxy;

/// Most rounds a page takes while targets drop moved copies; after them the page is the
/// union of the last two rounds (see [`list_objects`]).
const MAX_ROUNDS: usize = 4;

/// Names asked of each of `targets` targets for a page of `page_size`: an even share plus four
/// standard deviations and a margin. A target's share of a page is binomial (HRW spreads
/// names evenly), so it rarely falls short, and then that target alone is asked again.
fn share_of(page_size: usize, targets: usize) -> usize {
    let even = page_size as f64 / targets.max(1) as f64;
    ((even + 4.0 * even.sqrt()).ceil() as usize + 4).min(page_size)
}

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
    // An object moving from A to B is missed only if B's names are taken before it arrives
    // and A's after A dropped it. Targets count their drops (before each one) and send the
    // count with every answer: if no answer's count moved since the target was last seen (by
    // this or an earlier listing, always before this round began), no drop happened in
    // between and the round is exact. Otherwise the round is repeated; a move that completes
    // within one round is seen by the next, so the union of two consecutive rounds is exact
    // as well.
    let mut previous: Option<Vec<ListObjectsPage>> = None;
    let mut round = 0;
    let pages = loop {
        round += 1;
        let seen = proxy.list_drops.lock().expect("list_drops lock").clone();
        let (answers, drops) = fill_round(proxy, bck, &targets, &lso, copies).await?;
        let mut stable = true;
        {
            let mut cache = proxy.list_drops.lock().expect("list_drops lock");
            for (id, d) in drops {
                stable &= seen.get(&id) == Some(&d);
                cache.insert(id, d);
            }
        }
        if stable {
            break answers;
        }
        if round >= MAX_ROUNDS {
            tracing::debug!(bucket = %bck, rounds = round, "listing: targets kept dropping moved copies; page is the union of two rounds");
            let mut both = answers;
            both.extend(previous.take().unwrap_or_default());
            break both;
        }
        previous = Some(answers);
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

/// What one target sent in a round: its names so far, in order, and where they stop (empty
/// when it has no more).
struct Held {
    target: Node,
    entries: Vec<ListEntry>,
    next_after: String,
    /// Names asked for in its last request.
    asked: usize,
}

/// One round: every target's names from the page's start until they reach past the page's
/// last name (or run out), and every answer's drop counter (target id, count). Up to
/// `copies - 1` targets may fail to answer; more fail the page (a silently short listing is
/// worse than an error). A target that fails after answering once counts as unreachable too,
/// and what it sent stays (it was exact when sent).
async fn fill_round(
    proxy: &Proxy,
    bck: &Bck,
    targets: &[Node],
    lso: &ListObjectsMsg,
    copies: usize,
) -> Result<(Vec<ListObjectsPage>, Vec<(String, u64)>), ApiError> {
    let page_size = lso.page_size();
    // With k copies of each object, a target holds about k/N of a page.
    let first = share_of(page_size * copies.max(1), targets.len()).min(page_size);
    let mut drops = Vec::new();
    let mut unreachable = Vec::new();
    let mut held: Vec<Held> = Vec::with_capacity(targets.len());
    let asks = targets
        .iter()
        .map(|t| ask(proxy, bck, t, lso, lso.after(), first));
    for (t, answer) in targets.iter().zip(futures::future::join_all(asks).await) {
        match answer {
            Ok((d, page)) => {
                drops.extend(d.map(|d| (t.daemon_id.clone(), d)));
                held.push(Held {
                    target: t.clone(),
                    next_after: page.continuation_token,
                    entries: page.entries,
                    asked: first,
                });
            }
            Err(e) if e.kind == ErrorKind::Unavailable => unreachable.push(e),
            Err(e) => return Err(e),
        }
    }
    loop {
        if unreachable.len() >= copies.max(1) {
            return Err(unreachable.swap_remove(0));
        }
        // Targets that may hold names at or before the page's last one that they have not
        // sent yet: their names stop before it (or before the page is full).
        let end = page_end(&held, page_size);
        let short: Vec<usize> = (0..held.len())
            .filter(|&i| {
                let after = &held[i].next_after;
                !after.is_empty() && end.as_ref().is_none_or(|e| after < e)
            })
            .collect();
        if short.is_empty() {
            break;
        }
        let asks = short.iter().map(|&i| {
            let h = &held[i];
            let more = (h.asked * 2).min(page_size);
            ask(proxy, bck, &h.target, lso, &h.next_after, more)
        });
        let answers = futures::future::join_all(asks).await;
        for (i, answer) in short.into_iter().zip(answers) {
            let h = &mut held[i];
            match answer {
                Ok((d, page)) => {
                    drops.extend(d.map(|d| (h.target.daemon_id.clone(), d)));
                    h.asked = (h.asked * 2).min(page_size);
                    h.next_after = page.continuation_token;
                    h.entries.extend(page.entries);
                }
                Err(e) if e.kind == ErrorKind::Unavailable => {
                    // Its copies elsewhere stand in for the rest of its names.
                    h.next_after.clear();
                    unreachable.push(e);
                }
                Err(e) => return Err(e),
            }
        }
    }
    let pages = held
        .into_iter()
        .map(|h| ListObjectsPage {
            continuation_token: h.next_after,
            entries: h.entries,
            ..Default::default()
        })
        .collect();
    Ok((pages, drops))
}

/// The `page_size`-th distinct name among the names held, if there are that many: a merge of
/// the targets' lists (each sorted) that stops there, instead of sorting everything held.
fn page_end(held: &[Held], page_size: usize) -> Option<String> {
    use std::cmp::Reverse;
    let mut heads: std::collections::BinaryHeap<Reverse<(&str, usize, usize)>> = held
        .iter()
        .enumerate()
        .filter_map(|(i, h)| Some(Reverse((h.entries.first()?.name.as_str(), i, 0))))
        .collect();
    let (mut distinct, mut last) = (0, None);
    while let Some(Reverse((name, i, at))) = heads.pop() {
        if last != Some(name) {
            distinct += 1;
            if distinct == page_size {
                return Some(name.to_owned());
            }
            last = Some(name);
        }
        if let Some(next) = held[i].entries.get(at + 1) {
            heads.push(Reverse((next.name.as_str(), i, at + 1)));
        }
    }
    None
}

/// One target's next `limit` names after `after`, with its drop counter (when it sent one).
async fn ask(
    proxy: &Proxy,
    bck: &Bck,
    t: &Node,
    lso: &ListObjectsMsg,
    after: &str,
    limit: usize,
) -> Result<(Option<u64>, ListObjectsPage), ApiError> {
    let this = ListObjectsMsg {
        pagesize: limit as u64,
        continuation_token: after.to_owned(),
        ..lso.clone()
    };
    let msg = ActionMsg {
        action: action::LIST.into(),
        name: String::new(),
        value: serde_json::to_value(&this).map_err(|e| ApiError::internal(e.to_string()))?,
    };
    let ns = bck.namespace.uname();
    let resp = proxy
        .http
        .get(format!("{}/v1/buckets/{}", t.url(), bck.name))
        .query(&[
            ("provider", bck.provider.as_str()),
            ("namespace", ns.as_str()),
        ])
        .header(reqwest::header::ACCEPT, h::MSGPACK)
        .json(&msg)
        .send()
        .await
        .map_err(|e| {
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
    let page = ListObjectsPage::from_msgpack(&body)
        .map_err(|e| ApiError::internal(format!("listing: bad page from {}: {e}", t.daemon_id)))?;
    metrics::counter!("grist_list_target_requests_total").increment(1);
    metrics::counter!("grist_list_target_entries_total").increment(page.entries.len() as u64);
    Ok((drops, page))
}

/// Merges per-target pages into the cluster page: the first `page_size` names up to the
/// lowest last name of a target that has more (past it, that target's names are unknown).
fn merge(pages: Vec<ListObjectsPage>, page_size: usize, uuid: String) -> ListObjectsPage {
    let known_until = pages
        .iter()
        .filter(|p| !p.continuation_token.is_empty())
        .map(|p| p.continuation_token.clone())
        .min();
    let mut entries: Vec<_> = pages.into_iter().flat_map(|p| p.entries).collect();
    entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    // During a rebalance an object can sit on its old and its new owner at once: list it once.
    entries.dedup_by(|a, b| a.name == b.name);
    if let Some(until) = &known_until {
        let known = entries.partition_point(|e| e.name <= *until);
        entries.truncate(known);
    }
    let truncated = entries.len() > page_size || known_until.is_some();
    entries.truncate(page_size);
    let continuation_token = match entries.last() {
        Some(last) if truncated => last.name.clone(),
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

    /// The merge that stops at the page's end finds the name a sort of everything held finds,
    /// copies on two targets (a rebalance) counted once.
    #[test]
    fn page_end_is_the_nth_distinct_name_held() {
        let lists: [&[&str]; 4] = [
            &["a", "c", "e", "g"],
            &["b", "c", "f"],
            &[],
            &["c", "d", "h", "i", "j"],
        ];
        let held: Vec<Held> = lists
            .iter()
            .map(|names| Held {
                target: Node::new("t", "target", "http://t"),
                entries: page(names, false).entries,
                next_after: String::new(),
                asked: 0,
            })
            .collect();
        let mut all: Vec<&str> = lists.iter().flat_map(|l| l.iter().copied()).collect();
        all.sort_unstable();
        all.dedup();
        for n in 1..=all.len() {
            assert_eq!(page_end(&held, n).as_deref(), Some(all[n - 1]), "{n}");
        }
        assert_eq!(page_end(&held, all.len() + 1), None);
        assert_eq!(page_end(&held, 0), None);
    }

    #[test]
    fn a_target_is_asked_for_a_little_more_than_its_share() {
        assert_eq!(share_of(1000, 1), 1000);
        assert_eq!(share_of(1000, 3), 411);
        assert_eq!(share_of(1000, 30), 61);
        assert_eq!(share_of(100, 20), 18);
        assert_eq!(share_of(10_000, 300), 61);
        assert_eq!(share_of(5, 100), 5, "never more than a page");
    }

    #[test]
    fn a_page_stops_where_a_target_with_more_stopped() {
        // The second target has more names after "c": "d" might come after names it has not
        // sent, so the page ends at "c" even though it could hold 4.
        let m = merge(
            vec![page(&["a", "d", "e"], false), page(&["b", "c"], true)],
            4,
            "u".into(),
        );
        let names: Vec<_> = m.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(m.continuation_token, "c");
        // Every target that has more sent names past the page's end: a full page.
        let full = merge(
            vec![page(&["a", "c", "e"], true), page(&["b", "d", "f"], true)],
            4,
            "u".into(),
        );
        let names: Vec<_> = full.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        assert_eq!(full.continuation_token, "d");
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

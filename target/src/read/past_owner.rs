//! A GET or HEAD that missed on the owner during a rebalance: the copy at a past owner.

use crate::Target;
use crate::cluster::peer::bucket_query;
use crate::cluster::peer::gen_of;
use crate::cluster::peer::header_u64;
use crate::cluster::peer::internal_url;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::Response;
use futures::StreamExt;
use gristmill_core::Bck;
use gristmill_core::api::header as h;

/// A GET or HEAD that missed here: if the object's owner under a recent cluster map was
/// another target, the object may not have moved yet — ask it (once, no chains).
pub(crate) async fn fetch_from_past_owner(
    t: &Target,
    bck: &Bck,
    name: &str,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Option<Response> {
    let uname = bck.object_uname(name);
    let mut tried: Vec<String> = vec![t.id.clone()];
    // Where the object may still be: its owners under the maps we saw before, and — for a
    // target that just joined and saw no earlier map — the owner it would have without us
    // (HRW's runner-up).
    let current = t.smap();
    // The current owner first: a request forwarded here while maps disagree (we are not the
    // owner under our map) must still find the object where our map places it.
    let mut candidates: Vec<gristmill_core::Node> =
        current.owner(&uname).cloned().into_iter().collect();
    candidates.extend(
        t.past_smaps()
            .iter()
            .rev()
            .filter_map(|m| m.owner(&uname).cloned()),
    );
    // Replicas (copies > 1) hold it too; the runner-up is the first of them.
    let copies = t
        .bmd()
        .get(bck)
        .map_or(1, |r| r.props.mirror.copies())
        .max(2);
    candidates.extend(current.owners(&uname, copies).into_iter().skip(1).cloned());
    candidates.truncate(7);
    // While a rebalance is unconfirmed a copy may sit anywhere (a map this target never saw,
    // an aborted rebalance): the rest of the map, after the likely places.
    if !t.placement_settled() {
        candidates.extend(current.tmap.values().cloned());
    }
    // A copy no newer than a delete seen here is that deleted object: never served.
    let buried = t.store.tombstone(bck, name).unwrap_or(0);
    let mut holders: Vec<&gristmill_core::Node> = Vec::new();
    for owner in candidates.iter() {
        // A restarting target cannot answer (see `placement::restarting_holder`).
        let restarting = current
            .node(&owner.daemon_id)
            .is_some_and(|n| n.is_restarting());
        if !restarting && !tried.contains(&owner.daemon_id) {
            tried.push(owner.daemon_id.clone());
            // A past owner may have moved: use its current address when it has one.
            holders.push(current.node(&owner.daemon_id).unwrap_or(owner));
        }
    }
    // Several may hold a copy (a leftover of an aborted rebalance beside the newest one):
    // ask them all, and serve the newest generation — the first copy found may be older.
    let asks = holders.iter().map(|node| async move {
        let head = t
            .relay
            .head(internal_url(node, bck, name))
            .query(&bucket_query(bck))
            .timeout(HEAD_TIMEOUT)
            .send()
            .await;
        match head {
            Ok(r) if r.status().is_success() => Some(Held::Copy(gen_of(r.headers()))),
            Ok(r) => Some(Held::Tombstone(header_u64(r.headers(), h::TOMBSTONE_GEN))),
            Err(_) => None,
        }
    });
    let answers = futures::future::join_all(asks).await;
    let deleted = answers
        .iter()
        .filter_map(|a| match a {
            Some(Held::Tombstone(g)) => Some(*g),
            _ => None,
        })
        .fold(buried, u64::max);
    let mut copies: Vec<(u64, &gristmill_core::Node)> = answers
        .iter()
        .zip(&holders)
        .filter_map(|(a, node)| match a {
            Some(Held::Copy(g)) if *g > deleted => Some((*g, *node)),
            _ => None,
        })
        .collect();
    if copies.is_empty() {
        return None;
    }
    copies.sort_by_key(|(g, _)| std::cmp::Reverse(*g));
    let newest = copies[0].0;
    let same: Vec<gristmill_core::Node> = copies
        .iter()
        .filter(|(g, _)| *g == newest)
        .map(|(_, n)| (*n).clone())
        .collect();
    for (i, owner) in same.iter().enumerate() {
        let Some(resp) = request(t, owner, bck, name, method, uri, headers).await else {
            continue;
        };
        if !resp.status().is_success() && resp.status().as_u16() != 304 {
            tracing::debug!(object = %uname, at = %owner.daemon_id, status = %resp.status(), "not at a past owner");
            continue;
        }
        if resp.status().is_success() && gen_of(resp.headers()) != newest {
            continue; // rewritten or moved since it answered the HEAD
        }
        let mut out = Response::builder().status(resp.status().as_u16());
        for (k, v) in resp.headers() {
            if k != "transfer-encoding" && k != "connection" {
                out = out.header(k.as_str(), v.as_bytes());
            }
        }
        tracing::debug!(object = %uname, from = %owner.daemon_id, generation = newest, "served from a past owner");
        // A whole object's body that breaks off (its holder died mid-way) goes on from
        // another holder of the same generation, from where it broke.
        let whole = resp.status() == reqwest::StatusCode::OK
            && *method == Method::GET
            && !headers.contains_key("range");
        let body = if whole {
            let others: Vec<gristmill_core::Node> = same[i + 1..].to_vec();
            Body::from_stream(resumable(
                t.relay.clone(),
                others,
                bck.clone(),
                name.to_owned(),
                uri.query().unwrap_or("").to_owned(),
                newest,
                resp,
            ))
        } else {
            Body::from_stream(resp.bytes_stream())
        };
        return out.body(body).ok();
    }
    None
}

/// A read of one version (`?version_id=`) that missed here: the other possible holders
/// (replicas, past owners while a rebalance is unfinished) are asked in turn; the first that
/// has it (or knows it as a delete marker) answers.
pub(crate) async fn read_version_elsewhere(
    t: &Target,
    bck: &Bck,
    name: &str,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Option<Response> {
    for node in crate::cluster::placement::other_holders(t, bck, name) {
        let Some(resp) = request(t, &node, bck, name, method, uri, headers).await else {
            continue;
        };
        let status = resp.status();
        if !status.is_success() && status != reqwest::StatusCode::METHOD_NOT_ALLOWED {
            continue;
        }
        let mut out = Response::builder().status(status.as_u16());
        for (k, v) in resp.headers() {
            if k != "transfer-encoding" && k != "connection" {
                out = out.header(k.as_str(), v.as_bytes());
            }
        }
        return out.body(Body::from_stream(resp.bytes_stream())).ok();
    }
    None
}

/// How long a holder has to answer whether it has a copy.
const HEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// What a possible holder has of the object.
enum Held {
    Copy(u64),
    Tombstone(u64),
}

/// Sends the reader's request to one holder's own copy.
async fn request(
    t: &Target,
    owner: &gristmill_core::Node,
    bck: &Bck,
    name: &str,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Option<reqwest::Response> {
    let query = uri.query().unwrap_or("");
    let url = format!("{}?{query}", internal_url(owner, bck, name));
    let mut req = t.relay.request(method.clone(), url);
    for k in [
        "range",
        "if-match",
        "if-none-match",
        "if-modified-since",
        "if-unmodified-since",
    ] {
        if let Some(v) = headers.get(k) {
            req = req.header(k, v.as_bytes());
        }
    }
    // A paused or wedged holder must not hold the reader: its answer's head comes in
    // seconds or not at all (the body may then stream for as long as it takes).
    match tokio::time::timeout(HEAD_TIMEOUT, req.send()).await {
        Ok(Ok(resp)) => Some(resp),
        _ => None,
    }
}

/// A holder's body that, if it breaks off, continues with the rest of the same generation
/// from the other holders in turn; an error only when none of them can.
fn resumable(
    relay: gristmill_node::auth::IntraClient,
    others: Vec<gristmill_core::Node>,
    bck: Bck,
    name: String,
    query: String,
    generation: u64,
    first: reqwest::Response,
) -> impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + 'static {
    struct Relay {
        relay: gristmill_node::auth::IntraClient,
        others: std::vec::IntoIter<gristmill_core::Node>,
        bck: Bck,
        name: String,
        query: String,
        generation: u64,
        body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
        sent: u64,
        broken: bool,
    }
    // The next holder of the same generation that serves the rest.
    async fn resume(
        s: &mut Relay,
    ) -> Option<futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>> {
        for node in s.others.by_ref() {
            let url = format!("{}?{}", internal_url(&node, &s.bck, &s.name), s.query);
            let answer = s
                .relay
                .get(url)
                .header("range", format!("bytes={}-", s.sent))
                .timeout(HEAD_TIMEOUT)
                .send();
            if let Ok(r) = answer.await
                && r.status() == reqwest::StatusCode::PARTIAL_CONTENT
                && gen_of(r.headers()) == s.generation
            {
                tracing::info!(object = %s.name, from = %node.daemon_id, offset = s.sent, "relay resumed from another holder");
                return Some(r.bytes_stream().boxed());
            }
        }
        None
    }
    let state = Relay {
        relay,
        others: others.into_iter(),
        bck,
        name,
        query,
        generation,
        body: first.bytes_stream().boxed(),
        sent: 0,
        broken: false,
    };
    futures::stream::unfold(state, |mut s| async move {
        if s.broken {
            return None;
        }
        loop {
            match s.body.next().await {
                None => return None,
                Some(Ok(chunk)) => {
                    s.sent += chunk.len() as u64;
                    return Some((Ok(chunk), s));
                }
                Some(Err(e)) => match resume(&mut s).await {
                    Some(body) => s.body = body,
                    None => {
                        s.broken = true;
                        let msg = format!("relay of {} broke off: {e}", s.name);
                        return Some((Err(std::io::Error::other(msg)), s));
                    }
                },
            }
        }
    })
}

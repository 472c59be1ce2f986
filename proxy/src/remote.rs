//! Remote buckets on the proxy: added to the bucket metadata on first access (after a target
//! confirms the bucket exists on its backend), and listed through one target.

use gristmill_core::api::{ActionMsg, ListObjectsMsg, ListObjectsPage, action, header as h};
use gristmill_core::{ApiError, Bck};

use crate::meta::Proxy;

/// Turns a node's error response into an [`ApiError`] with its kind and message.
pub(crate) async fn node_error(resp: reqwest::Response) -> ApiError {
    gristmill_node::server::peer_error(resp, "").await
}

/// Makes sure a remote bucket is in the bucket metadata, adding it (via the primary) if its
/// backend has it. Native buckets are never added implicitly.
pub(crate) async fn ensure(p: &Proxy, bck: &Bck) -> Result<(), ApiError> {
    if p.bmd().contains(bck) {
        return Ok(());
    }
    // Maybe created through another proxy moments ago, not applied here yet: a linearizable
    // read settles it (no 404 after a create some client saw acknowledged).
    p.linearize().await?;
    if p.bmd().contains(bck) {
        return Ok(());
    }
    if !bck.is_remote() {
        return Err(bck.not_found());
    }
    if p.is_primary() {
        return add(p, bck).await;
    }
    let resp = p
        .http
        .post(format!("{}/v1/buckets/{}", p.primary_url(), bck.name))
        .query(&[
            ("provider", bck.provider.as_str()),
            ("namespace", bck.namespace.uname().as_str()),
        ])
        .json(&ActionMsg::new(action::ADD_REMOTE_BUCKET))
        .send()
        .await
        .map_err(|e| ApiError::unavailable(format!("asking the primary to add {bck}: {e}")))?;
    if !resp.status().is_success() {
        return Err(node_error(resp).await);
    }
    Ok(())
}

/// Primary: verifies the bucket on its backend through a target, then adds it.
pub(crate) async fn add(p: &Proxy, bck: &Bck) -> Result<(), ApiError> {
    add_with(p, bck, &serde_json::Value::Null).await.map(|_| ())
}

/// Primary: adds a remote bucket with properties (`patch`: a `set-bprops`-style JSON object,
/// e.g. `{"extra":{"aws":{"endpoint":...}}}`, or null), after a target verified the bucket on
/// its backend *with those properties*. Returns whether it was added (false: already there).
pub(crate) async fn add_with(
    p: &Proxy,
    bck: &Bck,
    patch: &serde_json::Value,
) -> Result<bool, ApiError> {
    if !bck.is_remote() {
        return Err(ApiError::bad_request(format!(
            "{bck} is not a remote bucket"
        )));
    }
    if p.bmd().contains(bck) {
        return Ok(false);
    }
    let props = if patch.is_null() {
        gristmill_core::api::BucketProps::default()
    } else {
        gristmill_core::api::BucketProps::default().patched(patch)?
    };
    let smap = p.smap();
    let target = smap
        .owner(&bck.uname())
        .ok_or_else(|| ApiError::unavailable("no targets in the cluster yet"))?
        .clone();
    let resp = p
        .http
        .post(format!("{}/v1/remote/{}", target.url(), bck.name))
        .query(&[
            ("provider", bck.provider.as_str()),
            ("namespace", bck.namespace.uname().as_str()),
        ])
        .json(&props)
        .send()
        .await
        .map_err(|e| ApiError::unavailable(format!("checking {bck} through a target: {e}")))?;
    if !resp.status().is_success() {
        return Err(node_error(resp).await);
    }
    let added = p.add_bucket_with(bck, props).await?;
    if added {
        tracing::info!(bucket = %bck, "remote bucket added");
    }
    Ok(added)
}

/// A page of any bucket's listing: a listable remote bucket's from its backend (unless
/// AIStore's `LsCached` flag, bit 0, asks for only what the cluster holds), else the
/// cluster's own.
pub(crate) async fn list_bucket(
    p: &Proxy,
    bck: &Bck,
    lso: ListObjectsMsg,
) -> Result<ListObjectsPage, ApiError> {
    let cached_only = lso.flags & 1 != 0;
    let listable_remote = bck.provider == gristmill_core::Provider::Aws || bck.is_remote_ais();
    if listable_remote && !cached_only {
        list(p, bck, lso).await
    } else {
        crate::list::list_objects(p, bck, lso).await
    }
}

/// A page of a remote bucket's listing: the backend's names, through one target, each flagged
/// if cached somewhere in the cluster.
pub(crate) async fn list(
    p: &Proxy,
    bck: &Bck,
    mut lso: ListObjectsMsg,
) -> Result<ListObjectsPage, ApiError> {
    if lso.uuid.is_empty() {
        lso.uuid = uuid::Uuid::new_v4().to_string();
    }
    let smap = p.smap();
    let target = smap
        .owner(&bck.uname())
        .ok_or_else(|| ApiError::unavailable("no targets in the cluster yet"))?
        .clone();
    let msg = ActionMsg {
        action: action::LIST.into(),
        name: String::new(),
        value: serde_json::to_value(&lso).map_err(|e| ApiError::internal(e.to_string()))?,
    };
    let resp = p
        .http
        .get(format!("{}/v1/buckets/{}", target.url(), bck.name))
        .query(&[
            ("provider", bck.provider.as_str()),
            ("namespace", bck.namespace.uname().as_str()),
            ("list", "remote"),
        ])
        .header(reqwest::header::ACCEPT, h::MSGPACK)
        .json(&msg)
        .send()
        .await
        .map_err(|e| ApiError::unavailable(format!("listing {bck}: {e}")))?;
    if !resp.status().is_success() {
        return Err(node_error(resp).await);
    }
    let body = resp
        .bytes()
        .await
        .map_err(|e| ApiError::unavailable(format!("listing {bck}: {e}")))?;
    ListObjectsPage::from_msgpack(&body)
        .map_err(|e| ApiError::internal(format!("listing {bck}: bad page: {e}")))
}

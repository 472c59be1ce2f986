//! Reads through ETLs: an object streamed through one streaming ETL, or read whole (bounded)
//! and run through a pipeline.

use crate::ApiResult;
use crate::Target;
use crate::read::local::open_or_fetch;
use crate::store::stream::file_stream;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use gristmill_core::{ApiError, Bck};
use std::collections::HashMap;

/// The ETLs a request asks for, in order: `etl_name=a,b`, then `etl_pipeline=c,d`; `None`
/// when it names none.
pub(crate) fn etl_names(params: &HashMap<String, String>) -> Option<Vec<String>> {
    let mut names = Vec::new();
    for key in ["etl_name", "etl_pipeline"] {
        if let Some(v) = params.get(key) {
            names.extend(gristmill_core::etl::pipeline(v));
        }
    }
    (!names.is_empty()).then_some(names)
}

/// `GET ...?etl_name=a,b&etl_args=...`: the object run through the ETLs, in order.
pub(crate) async fn get_transformed(
    t: &Target,
    bck: &Bck,
    name: &str,
    names: &[String],
    params: &HashMap<String, String>,
) -> ApiResult {
    let args = params.get("etl_args").map(String::as_str).unwrap_or("");
    // One streaming ETL and an object bigger than a read-ahead: streamed through it, so the
    // object is never whole in the target's memory (and may exceed the ETL object limit).
    let mut opened = None;
    if let [only] = names
        && t.etls.streams(only)?
    {
        let open = open_or_fetch(t, bck, name).await?;
        if open.data.is_none() {
            return stream_transformed(t, bck, name, only, args, open).await;
        }
        opened = Some(open);
    }
    let data = whole_object(t, bck, name, opened).await?;
    let out = t.etls.pipeline(names, data, name, args).await?;
    let mut resp = Response::new(Body::from(out.clone()));
    resp.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(out.len()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(resp)
}

/// An object streamed through an ETL that streams (python, per-object command, http). The
/// status waits for the first piece of the
/// result (so a transform that fails at once is a clean 502/504); a failure later cuts the
/// body short, as does a corrupt copy (verified like a GET; the repair runs in the background).
pub(crate) async fn stream_transformed(
    t: &Target,
    bck: &Bck,
    name: &str,
    etl: &str,
    args: &str,
    open: crate::store::OpenObject,
) -> ApiResult {
    use futures::StreamExt;
    let len = open.meta.size;
    let input = if crate::verify::validates(t, bck, &HashMap::new()) {
        crate::verify::verified_read(t, bck, open).boxed()
    } else {
        file_stream(open.file, 0, open.meta.size).boxed()
    };
    let mut rx = t.etls.transform_stream(etl, input, len, name, args).await?;
    let first = match rx.recv().await {
        None => Bytes::new(),
        Some(Err(e)) => return Err(e.into()),
        Some(Ok(piece)) => piece,
    };
    let rest = futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
        .map(|r| r.map_err(|e| std::io::Error::other(e.to_string())));
    let body = futures::stream::once(async move { Ok(first) }).chain(rest);
    let mut resp = Response::new(Body::from_stream(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(resp)
}

/// A whole object in memory, for transforms (bounded by [`gristmill_core::etl::MAX_ETL_OBJECT`]);
/// an uncached remote object is cold-fetched (and cached) first.
pub(crate) async fn object_bytes(t: &Target, bck: &Bck, name: &str) -> Result<Bytes, ApiError> {
    whole_object(t, bck, name, None).await
}

/// [`object_bytes`], starting from the object if the caller opened it already.
pub(crate) async fn whole_object(
    t: &Target,
    bck: &Bck,
    name: &str,
    mut opened: Option<crate::store::OpenObject>,
) -> Result<Bytes, ApiError> {
    // Verified like a GET (`checksum.validate_warm_get`): a corrupt copy is repaired once.
    let validate = crate::verify::validates(t, bck, &HashMap::new());
    let mut repaired = false;
    loop {
        let open = match opened.take() {
            Some(o) => o,
            None => open_or_fetch(t, bck, name).await?,
        };
        let meta = open.meta.clone();
        let (data, verdict) = read_whole(bck, name, open, validate).await?;
        let Err(why) = verdict else {
            return Ok(data);
        };
        if repaired {
            return Err(ApiError::internal(format!(
                "object {bck}/{name} is still corrupt after its repair: {why}"
            )));
        }
        crate::verify::quarantine_and_repair(t, bck, &meta, &why, "get").await?;
        repaired = true;
    }
}

/// An opened object's bytes (bounded by the ETL limit), checked against its metadata when
/// `validate` (off the runtime for large ones).
pub(crate) async fn read_whole(
    bck: &Bck,
    name: &str,
    open: crate::store::OpenObject,
    validate: bool,
) -> Result<(Bytes, Result<(), String>), ApiError> {
    let size = open.meta.size;
    if size > gristmill_core::etl::MAX_ETL_OBJECT {
        return Err(ApiError::new(
            gristmill_core::ErrorKind::PayloadTooLarge,
            format!(
                "{bck}/{name} is {size} bytes; ETLs take objects up to {} bytes",
                gristmill_core::etl::MAX_ETL_OBJECT
            ),
        ));
    }
    let meta = open.meta;
    if let Some(data) = open.data {
        let verdict = if validate {
            crate::verify::check_bytes(&meta, &data)
        } else {
            Ok(())
        };
        return Ok((data, verdict));
    }
    let file = open.file;
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; size as usize];
        file.read_exact_at(&mut buf, 0)?;
        let verdict = if validate {
            crate::verify::check_bytes(&meta, &buf)
        } else {
            Ok(())
        };
        Ok::<_, std::io::Error>((Bytes::from(buf), verdict))
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::internal(format!("reading {bck}/{name}: {e}")))
}

//! The read path: a GET is served from the local copy ([`local`]), through ETLs
//! ([`transform`]), from a remote bucket's backend ([`remote`], [`cold`]), or — during a
//! rebalance — from a past owner ([`past_owner`]). Reads are verified by [`crate::verify`].

pub(crate) mod chunks;
pub(crate) mod cold;
pub(crate) mod local;
pub(crate) mod past_owner;
pub(crate) mod ranges;
pub(crate) mod remote;
pub(crate) mod returning;
pub(crate) mod transform;

use crate::ApiResult;
use crate::Target;
use crate::read::local::{ReadRequest, serve_local};
use crate::read::transform::etl_names;
use crate::read::transform::get_transformed;
use gristmill_core::Bck;

pub(crate) async fn get_object(
    t: &Target,
    bck: &Bck,
    name: &str,
    req: &ReadRequest<'_>,
) -> ApiResult {
    let (params, headers) = (req.params, req.headers);
    // Archive and ETL reads are boxed: their futures are large, and every plain GET would
    // move them otherwise.
    if crate::shards::is_archive_read(params) {
        return Box::pin(crate::shards::get(t, bck, name, params, headers)).await;
    }
    if let Some(etls) = etl_names(params) {
        return Box::pin(get_transformed(t, bck, name, &etls, params)).await;
    }
    if bck.is_remote() {
        return remote::get_object(t, bck, name, req).await;
    }
    let open = if t.is_returning() {
        // What `returning::verify_before_serving` judged: the index, not the record cache.
        t.store.open_indexed(bck, name).await?
    } else {
        t.store
            .open_to_send(bck, name, crate::verify::small_object(t, bck, req))
            .await?
    };
    serve_local(t, bck, open, req).await
}

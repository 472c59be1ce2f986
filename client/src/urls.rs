//! Where a request goes: the bucket query (`provider`, `namespace`), object paths, and the
//! HRW direct URL of an object (its owning target under a cluster map), computed exactly as
//! the targets compute ownership.

use anyhow::Context;
use gristmill_core::api::query;
use gristmill_core::{Bck, ClusterMap};
use reqwest::Url;

/// The query that names a bucket's provider and namespace (`provider` always; `namespace`
/// when not global).
pub fn bucket_query(bck: &Bck) -> Vec<(&'static str, String)> {
    let mut q = vec![(query::PROVIDER, bck.provider.as_str().to_owned())];
    if !bck.namespace.is_global() {
        q.push((query::NAMESPACE, bck.namespace.uname()));
    }
    q
}

/// `/v1/objects/<bucket>/<name>`, the name percent-encoded as a path.
pub fn object_path(bck: &Bck, name: &str) -> String {
    format!(
        "/v1/objects/{}/{}",
        bck.name,
        gristmill_core::name::encode_path(name)
    )
}

/// `<base>/v1/objects/<bucket>/<name>?provider=..[&namespace=..]`: an object's URL on the
/// node at `base` (a proxy, or the owning target for a direct request).
pub fn object_url(base: &str, bck: &Bck, name: &str) -> anyhow::Result<Url> {
    let text = format!("{}{}", base.trim_end_matches('/'), object_path(bck, name));
    let mut url = Url::parse(&text).with_context(|| format!("invalid URL {text}"))?;
    url.query_pairs_mut().extend_pairs(bucket_query(bck));
    Ok(url)
}

/// HRW direct mode: the object's URL on its owning target under `smap`, so a body is sent
/// once, to the node that stores it (no proxy hop, no 307). `None` when the map has no active
/// target or the owner's URL is not a valid base.
pub fn direct_url(smap: &ClusterMap, bck: &Bck, name: &str) -> Option<Url> {
    let owner = smap.owner(&bck.object_uname(name))?;
    object_url(owner.url(), bck, name).ok()
}

#[cfg(test)]
mod tests {
    use gristmill_core::Provider;
    use gristmill_core::smap::{self, Node};

    use super::*;

    #[test]
    fn object_urls_name_the_bucket() {
        let bck = Bck::new("b", Provider::Ais).unwrap();
        assert_eq!(
            object_url("http://h:1/", &bck, "p/00000001")
                .unwrap()
                .as_str(),
            "http://h:1/v1/objects/b/p/00000001?provider=ais"
        );
        let remote = Bck::new("r", Provider::Aws).unwrap();
        assert_eq!(
            object_url("http://h:1", &remote, "a b").unwrap().as_str(),
            "http://h:1/v1/objects/r/a%20b?provider=aws"
        );
    }

    #[test]
    fn direct_url_is_the_hrw_owner() {
        let mut m = ClusterMap::new(
            Node::new("p0", smap::PROXY, "http://127.0.0.1:8080"),
            "uuid".into(),
            String::new(),
        );
        let bck = Bck::new("b", Provider::Ais).unwrap();
        assert!(direct_url(&m, &bck, "x").is_none());
        for i in 0..5 {
            let id = format!("t{i}");
            m.tmap.insert(
                id.clone(),
                Node::new(&id, smap::TARGET, &format!("http://127.0.0.1:{}", 9000 + i)),
            );
        }
        for name in ["a", "b/c", "shard-000001.tar"] {
            let owner = m.owner(&bck.object_uname(name)).unwrap();
            let url = direct_url(&m, &bck, name).unwrap();
            assert!(
                url.as_str().starts_with(owner.url()),
                "{url} vs {}",
                owner.url()
            );
        }
    }
}

//! What each fuzz target does with its input. Every function must return normally for any
//! input: a panic (or a failed invariant) is a finding. Found inputs become regression
//! tests next to the code they broke.

use std::collections::HashMap;

use gristmill_core::api::{ActionMsg, BucketProps, ListObjectsMsg, ListObjectsPage};
use gristmill_node::auth::{self, Access, Keys};
use gristmill_core::name::{MAX_OBJECT_NAME, encode_path};
use gristmill_core::range::parse_range;
use gristmill_core::users::{Need, Role, pattern_matches};
use gristmill_core::{Bck, validate_object_name};

/// Object names: validation, and the URL-path encoding of every valid name round-trips.
pub fn object_name(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if validate_object_name(s).is_ok() {
        assert!(!s.is_empty() && s.len() <= MAX_OBJECT_NAME);
        assert!(!s.split('/').any(|seg| seg == "." || seg == ".."));
        assert!(!s.bytes().any(|b| b < 0x20 || b == 0x7f));
        let enc = encode_path(s);
        assert!(!enc.contains(['?', '#', ' ']), "{enc:?}");
        let dec = percent_encoding::percent_decode_str(&enc)
            .decode_utf8()
            .expect("encoded names decode");
        assert_eq!(dec, s);
    }
    if let Ok((bck, rest)) = Bck::parse_uri(s) {
        let _ = bck.uname();
        let _ = bck.object_uname(&rest);
    }
    let mut parts = s.splitn(3, '\n');
    if let (Some(name), provider, namespace) = (parts.next(), parts.next(), parts.next()) {
        if let Ok(b) = Bck::from_request(name, provider, namespace) {
            let _ = b.to_string();
        }
    }
}

/// `Range` headers against object sizes: a range that parses lies inside the object.
pub fn range(data: &[u8]) {
    if data.len() < 8 {
        return;
    }
    let size = u64::from_le_bytes(data[..8].try_into().expect("8 bytes")) >> (data[0] % 64);
    let Ok(value) = std::str::from_utf8(&data[8..]) else {
        return;
    };
    if let Ok(Some(r)) = parse_range(value, size) {
        assert!(r.start <= r.end, "{value:?} {size}: {r:?}");
        assert!(r.end < size, "{value:?} {size}: {r:?}");
        assert_eq!(r.len(), r.end - r.start + 1);
        let _ = r.content_range(size);
    }
}

/// List messages, msgpack pages and S3-style continuation tokens.
pub fn list_token(data: &[u8]) {
    if let Ok(lso) = ListObjectsMsg::from_action_body(data) {
        let n = lso.page_size();
        assert!(n >= 1 && n as u64 <= gristmill_core::api::MAX_PAGE_SIZE);
        let _ = lso.after();
        let _ = lso.wants("checksum");
    }
    if let Ok(page) = ListObjectsPage::from_msgpack(data) {
        let again = ListObjectsPage::from_msgpack(&page.to_msgpack()).expect("re-encoded page");
        assert_eq!(again.entries.len(), page.entries.len());
        assert_eq!(again.continuation_token, page.continuation_token);
    }
    // The S3 front's tokens: base64url of the last key, which must be a valid name to use.
    use base64::Engine as _;
    if let Ok(s) = std::str::from_utf8(data)
        && let Ok(raw) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s)
        && let Ok(key) = String::from_utf8(raw)
    {
        let _ = validate_object_name(&key);
    }
}

fn de<'a, T: s3s::xml::Deserialize<'a>>(data: &'a [u8]) {
    let mut d = s3s::xml::Deserializer::new(data);
    if T::deserialize(&mut d).is_ok() {
        let _ = d.expect_eof();
    }
}

/// S3 XML request bodies, through the same deserializers the S3 front uses.
pub fn s3_xml(data: &[u8]) {
    use s3s::dto;
    let Some((&selector, xml)) = data.split_first() else {
        return;
    };
    match selector % 8 {
        0 => de::<dto::CompletedMultipartUpload>(xml),
        1 => de::<dto::Delete>(xml),
        2 => de::<dto::CreateBucketConfiguration>(xml),
        3 => de::<dto::Tagging>(xml),
        4 => de::<dto::VersioningConfiguration>(xml),
        5 => de::<dto::CORSConfiguration>(xml),
        6 => de::<dto::BucketLifecycleConfiguration>(xml),
        _ => de::<dto::AccessControlPolicy>(xml),
    }
}

/// Action messages: parsing, what the access gate decides they need, and bucket property
/// patches (`set-bprops`).
pub fn action_json(data: &[u8]) {
    let (head, body) = data.split_at(data.len().min(1));
    let method = match head.first().map(|b| b % 5) {
        Some(0) => http::Method::GET,
        Some(1) => http::Method::POST,
        Some(2) => http::Method::DELETE,
        Some(3) => http::Method::PATCH,
        _ => http::Method::PUT,
    };
    let params = HashMap::from([("bck_to".to_string(), "ais://dst".to_string())]);
    for (access, path) in [
        (Access::BucketAction, "/v1/buckets/src"),
        (Access::Batch, "/v1/ml/moss/src"),
        (Access::Batch, "/v1/ml/moss"),
    ] {
        if let Ok(needs) = auth::body_needs(access, &method, path, &params, body) {
            assert!(!needs.is_empty(), "{access:?} needs nothing");
        }
    }
    if let Ok(msg) = serde_json::from_slice::<ActionMsg>(body) {
        let _ = BucketProps::default().patched(&msg.value);
    }
    if let Ok(s) = std::str::from_utf8(body) {
        let _ = gristmill_core::api::decode_custom_md(s);
    }
}

/// Bearer tokens, node signatures, redirect signatures, roles and route classification:
/// nothing forged from random bytes is accepted.
pub fn auth_tokens(data: &[u8]) {
    let keys = Keys::from_secret(&[7u8; 32]);
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    assert!(keys.verify_token(s).is_err(), "a random token verified: {s:?}");
    assert!(keys.verify_intra(s, "GET", "/v1/metasync").is_err());
    let params = auth::query_params(Some(s));
    let bck = Bck::new("b", gristmill_core::Provider::Ais).expect("bucket");
    assert!(keys.verify_redirect(&params, "GET", &bck, "o").is_err());
    if let Ok(role) = s.parse::<Role>() {
        let again: Role = role.to_string().parse().expect("roles round-trip");
        assert_eq!(again, role);
        let _ = role.covers(&Need::Read(bck.clone()));
    }
    let _ = pattern_matches(s, &bck);
    for method in [http::Method::GET, http::Method::PUT, http::Method::DELETE] {
        let a = auth::classify(auth::PROXY_ROUTES, &method, s);
        let b = auth::classify(auth::TARGET_ROUTES, &method, s);
        // Nothing under /v1/ falls to the S3 class.
        if s == "/v1" || s.starts_with("/v1/") {
            assert_ne!(a, Access::S3);
            assert_ne!(b, Access::S3);
        }
    }
}

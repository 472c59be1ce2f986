//! S3 API tests: the real `aws-sdk-s3` client against a cluster with auth on, and malformed
//! requests sent raw.

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier};
use futures::StreamExt;
use gristmill_tests::{Cluster, content};

const USERS: &str = r#"[{"access_key":"admin","secret_key":"admin-secret","read":["*"],"write":["*"]},{"access_key":"reader","secret_key":"reader-secret","read":["*"],"write":[]}]"#;

fn client(c: &Cluster, access: &str, secret: &str) -> Client {
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(&c.endpoint)
        .force_path_style(true)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(access, secret, None, None, "test"))
        .build();
    Client::from_conf(config)
}

/// A multipart upload of `data` in 5 MiB parts (the last one shorter), completed.
pub(super) async fn multipart_put(
    s3: &Client,
    bucket: &str,
    key: &str,
    data: &[u8],
) -> aws_sdk_s3::operation::complete_multipart_upload::CompleteMultipartUploadOutput {
    let up = s3
        .create_multipart_upload()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    let mut parts = Vec::new();
    for (n, chunk) in data.chunks(5 << 20).enumerate() {
        let r = s3
            .upload_part()
            .bucket(bucket)
            .key(key)
            .upload_id(id)
            .part_number(n as i32 + 1)
            .body(ByteStream::from(chunk.to_vec()))
            .send()
            .await
            .unwrap();
        parts.push(
            CompletedPart::builder()
                .part_number(n as i32 + 1)
                .e_tag(r.e_tag().unwrap())
                .build(),
        );
    }
    s3.complete_multipart_upload()
        .bucket(bucket)
        .key(key)
        .upload_id(id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(parts))
                .build(),
        )
        .send()
        .await
        .unwrap()
}

pub(super) fn code<E: aws_sdk_s3::error::ProvideErrorMetadata>(e: &E) -> String {
    e.code().unwrap_or("").to_owned()
}

/// The Rust AWS SDK (path-style, SigV4, default checksum settings) drives the S3 API end to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_sdk_s3_end_to_end_with_auth() {
    let s3_port = gristmill_tests::free_port();
    let s3_listen = format!("127.0.0.1:{s3_port}");
    let c = Cluster::start_with(3, 1, &["--s3-users", USERS, "--s3-listen", &s3_listen])
        .await
        .unwrap();
    let s3 = client(&c, "admin", "admin-secret");
    s3.create_bucket().bucket("rust-sdk").send().await.unwrap();
    // In us-east-1 the owner's second create is a 200 that changes nothing (AWS's rule).
    s3.create_bucket().bucket("rust-sdk").send().await.unwrap();

    for i in 0..6 {
        let key = format!("dir{}/obj-{i}", i % 2);
        s3.put_object()
            .bucket("rust-sdk")
            .key(&key)
            .content_type("application/x-test")
            .metadata("idx", i.to_string())
            .body(ByteStream::from(content(i, 10_000 + i as usize)))
            .send()
            .await
            .unwrap();
    }
    // Multipart: 3 parts of 5 MiB + a short tail.
    let big = content(99, 3 * (5 << 20) + 1234);
    let done = multipart_put(&s3, "rust-sdk", "big", &big).await;
    assert!(
        done.e_tag().unwrap().ends_with("-4\""),
        "{:?}",
        done.e_tag()
    );
    let got = s3
        .get_object()
        .bucket("rust-sdk")
        .key("big")
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        &big[..]
    );

    // Ranged GET passes the SDK's default response-checksum validation.
    let r = s3
        .get_object()
        .bucket("rust-sdk")
        .key("big")
        .range("bytes=100-199")
        .send()
        .await
        .unwrap();
    assert_eq!(r.content_range(), Some("bytes 100-199/15729874"));
    assert_eq!(
        r.body.collect().await.unwrap().into_bytes().as_ref(),
        &big[100..200]
    );
    // Full GET with checksum mode on.
    let head = s3
        .head_object()
        .bucket("rust-sdk")
        .key("dir0/obj-0")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length(), Some(10_000));
    assert_eq!(head.content_type(), Some("application/x-test"));
    assert_eq!(head.metadata().unwrap()["idx"], "0");
    let md5 = format!("\"{:x}\"", md5_of(&content(0, 10_000)));
    assert_eq!(head.e_tag(), Some(md5.as_str()));

    // Listing with prefix and delimiter.
    let l = s3
        .list_objects_v2()
        .bucket("rust-sdk")
        .delimiter("/")
        .send()
        .await
        .unwrap();
    let prefixes: Vec<_> = l
        .common_prefixes()
        .iter()
        .filter_map(|p| p.prefix())
        .collect();
    assert_eq!(prefixes, ["dir0/", "dir1/"]);
    assert_eq!(
        l.contents()
            .iter()
            .filter_map(|o| o.key())
            .collect::<Vec<_>>(),
        ["big"]
    );
    let l = s3
        .list_objects_v2()
        .bucket("rust-sdk")
        .prefix("dir1/")
        .max_keys(2)
        .send()
        .await
        .unwrap();
    assert_eq!(l.is_truncated(), Some(true));
    let l2 = s3
        .list_objects_v2()
        .bucket("rust-sdk")
        .prefix("dir1/")
        .continuation_token(l.next_continuation_token().unwrap())
        .send()
        .await
        .unwrap();
    let keys: Vec<_> = l
        .contents()
        .iter()
        .chain(l2.contents())
        .filter_map(|o| o.key())
        .collect();
    assert_eq!(keys, ["dir1/obj-1", "dir1/obj-3", "dir1/obj-5"]);

    // Copy, then batch delete.
    s3.copy_object()
        .bucket("rust-sdk")
        .key("copied")
        .copy_source("rust-sdk/dir0/obj-2")
        .send()
        .await
        .unwrap();
    let copied = s3
        .get_object()
        .bucket("rust-sdk")
        .key("copied")
        .send()
        .await
        .unwrap();
    assert_eq!(
        copied.content_type(),
        Some("application/x-test"),
        "COPY keeps metadata"
    );
    assert_eq!(
        copied.body.collect().await.unwrap().into_bytes().as_ref(),
        &content(2, 10_002)[..]
    );

    // Same object over the native API: same size.
    let native = c
        .http
        .head(c.url("/v1/objects/rust-sdk/copied"))
        .send()
        .await
        .unwrap();
    assert_eq!(native.headers()["content-length"], "10002");

    // The read-only user may read but not write; nothing is written.
    let reader = client(&c, "reader", "reader-secret");
    reader
        .head_object()
        .bucket("rust-sdk")
        .key("copied")
        .send()
        .await
        .unwrap();
    let err = reader
        .put_object()
        .bucket("rust-sdk")
        .key("forbidden")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err.into_service_error()), "AccessDenied");
    let err = s3
        .head_object()
        .bucket("rust-sdk")
        .key("forbidden")
        .send()
        .await
        .unwrap_err();
    assert!(err.into_service_error().is_not_found());
    // Targets accept S3 requests too (relayed to the proxy; the signature still verifies).
    let target_url = c.first_target_url().await;
    let via_target = Client::from_conf(s3.config().to_builder().endpoint_url(&target_url).build());
    via_target
        .put_object()
        .bucket("rust-sdk")
        .key("via-target")
        .body(ByteStream::from(content(7, 300_000)))
        .send()
        .await
        .unwrap();
    let got = via_target
        .get_object()
        .bucket("rust-sdk")
        .key("via-target")
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        &content(7, 300_000)[..]
    );
    s3.delete_object()
        .bucket("rust-sdk")
        .key("via-target")
        .send()
        .await
        .unwrap();
    // The dedicated S3 port serves the same API.
    let dedicated = Client::from_conf(
        s3.config()
            .to_builder()
            .endpoint_url(format!("http://{s3_listen}"))
            .build(),
    );
    let listed = dedicated
        .list_objects_v2()
        .bucket("rust-sdk")
        .prefix("dir0/")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.key_count(), Some(3));
    // Wrong secret, unknown key.
    let err = client(&c, "admin", "wrong")
        .list_buckets()
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err.into_service_error()), "SignatureDoesNotMatch");
    let err = client(&c, "nobody", "x")
        .list_buckets()
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err.into_service_error()), "InvalidAccessKeyId");
    // Unsigned requests are refused with auth on.
    let r = c.http.get(c.url("/rust-sdk")).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("<Code>AccessDenied</Code>")
    );

    let keys: Vec<ObjectIdentifier> = [
        "copied",
        "big",
        "dir0/obj-0",
        "dir0/obj-2",
        "dir0/obj-4",
        "dir1/obj-1",
        "dir1/obj-3",
        "dir1/obj-5",
    ]
    .iter()
    .map(|k| ObjectIdentifier::builder().key(*k).build().unwrap())
    .collect();
    let err = s3
        .delete_bucket()
        .bucket("rust-sdk")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err.into_service_error()), "BucketNotEmpty");
    let d = s3
        .delete_objects()
        .bucket("rust-sdk")
        .delete(Delete::builder().set_objects(Some(keys)).build().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(d.deleted().len(), 8);
    s3.delete_bucket().bucket("rust-sdk").send().await.unwrap();
    let err = s3
        .head_bucket()
        .bucket("rust-sdk")
        .send()
        .await
        .unwrap_err();
    assert!(err.into_service_error().is_not_found());
}

fn md5_of(data: &[u8]) -> u128 {
    // Tiny wrapper so the test does not need a hex dependency.
    let d = <md5::Md5 as md5::Digest>::digest(data);
    u128::from_be_bytes(d.into())
}

/// Malformed and out-of-range S3 requests get the right S3 error, leave nothing behind, and the
/// node keeps serving (auth off: unsigned raw requests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_s3_requests_are_refused_cleanly() {
    let c = Cluster::start(2, 1).await.unwrap();
    let addr = c.endpoint.trim_start_matches("http://").to_owned();
    let raw = |method: &str, path: &str, body: &str| {
        format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let send = |req: String| {
        let addr = addr.clone();
        async move { super::raw_request(&addr, req.as_bytes(), false).await }
    };
    let (code, _) = send(raw("PUT", "/badxml", "")).await;
    assert_eq!(code, 200);

    // Malformed DeleteObjects body.
    let (code, body) = send(raw(
        "POST",
        "/badxml?delete",
        "<Delete><Object><Key>x</Key>",
    ))
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("MalformedXML"), "{body}");
    // Multipart: create, then malformed complete, out-of-order parts, part 10001.
    let (code, body) = send(raw("POST", "/badxml/mp?uploads", "")).await;
    assert_eq!(code, 200, "{body}");
    let id = body
        .split("<UploadId>")
        .nth(1)
        .unwrap()
        .split('<')
        .next()
        .unwrap()
        .to_owned();
    let (code, body) = send(raw(
        "POST",
        &format!("/badxml/mp?uploadId={id}"),
        "<CompleteMultipartUpload><Part>",
    ))
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("MalformedXML"), "{body}");
    let (code, body) = send(raw(
        "PUT",
        &format!("/badxml/mp?uploadId={id}&partNumber=10001"),
        "x",
    ))
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("InvalidArgument"), "{body}");
    let mut etags = Vec::new();
    for n in 1..=2 {
        let (code, _) = send(raw(
            "PUT",
            &format!("/badxml/mp?uploadId={id}&partNumber={n}"),
            "part",
        ))
        .await;
        assert_eq!(code, 200);
        etags.push(format!("{:032x}", md5_of(b"part")));
    }
    let out_of_order = format!(
        "<CompleteMultipartUpload><Part><PartNumber>2</PartNumber><ETag>\"{}\"</ETag></Part><Part><PartNumber>1</PartNumber><ETag>\"{}\"</ETag></Part></CompleteMultipartUpload>",
        etags[1], etags[0]
    );
    let (code, body) = send(raw(
        "POST",
        &format!("/badxml/mp?uploadId={id}"),
        &out_of_order,
    ))
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("InvalidPartOrder"), "{body}");
    let in_order = format!(
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\"{}\"</ETag></Part><Part><PartNumber>2</PartNumber><ETag>\"{}\"</ETag></Part></CompleteMultipartUpload>",
        etags[0], etags[1]
    );
    let (code, body) = send(raw("POST", &format!("/badxml/mp?uploadId={id}"), &in_order)).await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("EntityTooSmall"), "{body}");
    // Key over 1024 bytes.
    let (code, body) = send(raw("PUT", &format!("/badxml/{}", "k".repeat(1025)), "x")).await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("KeyTooLongError"), "{body}");
    // A body longer than declared: only the declared bytes form the object; the rest is not
    // a valid request and is refused.
    let req = format!(
        "PUT /badxml/longer HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 4\r\n\r\nabcdEXTRA-BYTES-NOT-A-REQUEST\r\n\r\n"
    );
    let _ = super::raw_request(&addr, req.as_bytes(), true).await;
    let r = c.http.get(c.url("/badxml/longer")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"abcd");

    // Nothing of the failed multipart became visible; the node still serves.
    let r = c.http.get(c.url("/badxml/mp")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("NoSuchKey"));
    let (code, _) = send(raw("DELETE", &format!("/badxml/mp?uploadId={id}"), "")).await;
    assert_eq!(code, 204);
    let r = c
        .http
        .get(c.url("/badxml?list-type=2"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let listing = r.text().await.unwrap();
    assert!(
        listing.contains("<Key>longer</Key>") && !listing.contains("<Key>mp</Key>"),
        "{listing}"
    );
}

/// A multipart upload to a bucket with `mirror.copies = 2` is acknowledged only once both
/// copies are stored, like a PUT: the completed object sits on its first two HRW targets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_upload_is_replicated_before_complete_returns() {
    let c = Cluster::start(3, 1).await.unwrap();
    let s3 = client(&c, "gristmill", "gristmill-secret");
    s3.create_bucket().bucket("mpu2").send().await.unwrap();
    c.grist_ok(&["bucket", "props", "set", "ais://mpu2", "mirror.copies=2"]);
    let big = content(7, 2 * (5 << 20) + 99);
    multipart_put(&s3, "mpu2", "twice", &big).await;
    let smap = c.smap().await.unwrap();
    let bck = gristmill_core::Bck::new("mpu2", gristmill_core::Provider::Ais).unwrap();
    let owners = smap.owners(&bck.object_uname("twice"), 2);
    for t in smap.tmap.values() {
        let here = c
            .names_on(t.url(), "mpu2")
            .await
            .contains(&"twice".to_owned());
        let want = owners.iter().any(|o| o.daemon_id == t.daemon_id);
        assert_eq!(here, want, "target {}: holds a copy = {here}", t.daemon_id);
    }
    let got = s3
        .get_object()
        .bucket("mpu2")
        .key("twice")
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        &big[..]
    );
}

/// Tags changed with PutObjectTagging on a bucket with `mirror.copies = 2` reach the replica
/// without a data rewrite: once the owner is killed and gone from the map, the replica's holder
/// (now the owner) answers with the new tags, the same ETag and the same bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_tags_reach_the_replica() {
    use aws_sdk_s3::types::{Tag, Tagging};
    let mut c = Cluster::start(3, 1).await.unwrap();
    let s3 = client(&c, "gristmill", "gristmill-secret");
    s3.create_bucket().bucket("tags2").send().await.unwrap();
    c.grist_ok(&["bucket", "props", "set", "ais://tags2", "mirror.copies=2"]);
    let body = content(3, 200_000);
    let put = s3
        .put_object()
        .bucket("tags2")
        .key("t")
        .tagging("before=1")
        .body(ByteStream::from(body.clone()))
        .send()
        .await
        .unwrap();
    let tagging = Tagging::builder()
        .tag_set(Tag::builder().key("after").value("2").build().unwrap())
        .build()
        .unwrap();
    s3.put_object_tagging()
        .bucket("tags2")
        .key("t")
        .tagging(tagging)
        .send()
        .await
        .unwrap();

    let smap = c.smap().await.unwrap();
    let bck = gristmill_core::Bck::new("tags2", gristmill_core::Provider::Ais).unwrap();
    let owner = smap.owners(&bck.object_uname("t"), 1)[0].daemon_id.clone();
    let mut idx = None;
    for i in 0..c.targets.len() {
        if c.target_id(i).await.unwrap() == owner {
            idx = Some(i);
        }
    }
    let idx = idx.expect("the owner's process");
    c.targets[idx].kill9();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while c.smap().await.unwrap().tmap.contains_key(&owner) {
        assert!(
            std::time::Instant::now() < deadline,
            "the killed owner stays in the map"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let tags = s3
        .get_object_tagging()
        .bucket("tags2")
        .key("t")
        .send()
        .await
        .unwrap();
    let tags: Vec<(&str, &str)> = tags
        .tag_set()
        .iter()
        .map(|t| (t.key(), t.value()))
        .collect();
    assert_eq!(tags, [("after", "2")]);
    let got = s3
        .get_object()
        .bucket("tags2")
        .key("t")
        .send()
        .await
        .unwrap();
    assert_eq!(got.e_tag(), put.e_tag());
    assert_eq!(got.tag_count(), Some(1));
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        &body[..]
    );
}

/// Two clients race `If-None-Match: *` PUTs of one key, 100 rounds, on 3 targets with
/// `mirror.copies = 2` — and rounds 40 to 70 while a target goes into maintenance and comes
/// back (two rebalances): each round exactly one PUT wins, the other gets 412
/// PreconditionFailed, and every later read returns the winner's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_if_none_match_puts_have_exactly_one_winner() {
    let c = Cluster::start(3, 1).await.unwrap();
    let s3 = client(&c, "gristmill", "gristmill-secret");
    s3.create_bucket().bucket("race").send().await.unwrap();
    c.grist_ok(&["bucket", "props", "set", "ais://race", "mirror.copies=2"]);
    // Enough objects that the rebalances take a while: the rounds run during them.
    futures::stream::iter(0..1500usize)
        .map(|i| {
            let (http, url) = (c.http.clone(), c.url(&format!("/v1/objects/race/fill-{i}")));
            async move {
                let r = http
                    .put(url)
                    .body(content(i as u64, 16 << 10))
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success());
            }
        })
        .buffer_unordered(16)
        .collect::<()>()
        .await;
    let leaving = c.smap().await.unwrap().tmap.keys().next().unwrap().clone();
    let maintenance = |action: &'static str| {
        let (http, url, sid) = (c.http.clone(), c.url("/v1/cluster"), leaving.clone());
        async move {
            let r = http
                .put(url)
                .json(&serde_json::json!({"action": action, "value": {"sid": sid}}))
                .send()
                .await
                .unwrap();
            assert!(
                r.status().is_success(),
                "{action}: {}",
                r.text().await.unwrap()
            );
        }
    };
    let mut winners = Vec::new();
    let mut during_rebalance = 0;
    for round in 0..100usize {
        match round {
            40 => maintenance("start-maintenance").await,
            70 => maintenance("stop-maintenance").await,
            _ => {}
        }
        let running: Vec<serde_json::Value> = c
            .http
            .get(c.url("/v1/jobs?kind=rebalance&running=true"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        during_rebalance += usize::from(!running.is_empty());
        let key = format!("k{round:03}");
        let bodies = [
            content(round as u64 * 2, 4096),
            content(round as u64 * 2 + 1, 4096),
        ];
        let put = |body: Vec<u8>| {
            s3.put_object()
                .bucket("race")
                .key(&key)
                .if_none_match("*")
                .body(ByteStream::from(body))
                .send()
        };
        let (a, b) = tokio::join!(put(bodies[0].clone()), put(bodies[1].clone()));
        let won: Vec<usize> = [a.is_ok(), b.is_ok()]
            .iter()
            .enumerate()
            .filter(|(_, ok)| **ok)
            .map(|(i, _)| i)
            .collect();
        let lost: Vec<String> = [a.err(), b.err()]
            .into_iter()
            .flatten()
            .map(|e| code(&e))
            .collect();
        assert_eq!(
            won.len(),
            1,
            "round {round}: winners {won:?}, errors {lost:?}"
        );
        assert_eq!(lost, ["PreconditionFailed"], "round {round}");
        winners.push(bodies[won[0]].clone());
    }
    assert!(during_rebalance > 0, "no round ran during a rebalance");
    eprintln!("{during_rebalance} of 100 rounds started during a rebalance");
    for (round, body) in winners.iter().enumerate() {
        let got = s3
            .get_object()
            .bucket("race")
            .key(format!("k{round:03}"))
            .send()
            .await
            .unwrap();
        let got = got.body.collect().await.unwrap().into_bytes();
        assert!(
            got.as_ref() == &body[..],
            "round {round}: not the winner's bytes"
        );
    }
}

/// An object's (or one version's) tags over S3, as (key, value) pairs.
async fn tags_of(
    s3: &Client,
    bucket: &str,
    key: &str,
    version: Option<&str>,
) -> Vec<(String, String)> {
    s3.get_object_tagging()
        .bucket(bucket)
        .key(key)
        .set_version_id(version.map(str::to_owned))
        .send()
        .await
        .unwrap()
        .tag_set()
        .iter()
        .map(|t| (t.key().to_owned(), t.value().to_owned()))
        .collect()
}

/// Sets a bucket's versioning status over S3.
async fn set_versioning(
    s3: &Client,
    bucket: &str,
    status: aws_sdk_s3::types::BucketVersioningStatus,
) {
    use aws_sdk_s3::types::VersioningConfiguration;
    s3.put_bucket_versioning()
        .bucket(bucket)
        .versioning_configuration(VersioningConfiguration::builder().status(status).build())
        .send()
        .await
        .unwrap();
}

/// Every version and delete marker of a bucket over S3, in S3's order: (key, version id,
/// latest, marker).
async fn all_versions(s3: &Client, bucket: &str) -> Vec<(String, String, bool, bool)> {
    versions_in_pages(s3, bucket, 7).await
}

/// [`all_versions`] in pages of `max_keys`.
async fn versions_in_pages(
    s3: &Client,
    bucket: &str,
    max_keys: i32,
) -> Vec<(String, String, bool, bool)> {
    let mut out = Vec::new();
    let (mut key_marker, mut id_marker) = (None::<String>, None::<String>);
    loop {
        let r = s3
            .list_object_versions()
            .bucket(bucket)
            .max_keys(max_keys)
            .set_key_marker(key_marker.clone())
            .set_version_id_marker(id_marker.clone())
            .send()
            .await
            .unwrap();
        let mut page: Vec<(String, String, bool, bool, i64)> = r
            .versions()
            .iter()
            .map(|v| {
                let t = v.last_modified().unwrap();
                (
                    v.key().unwrap().to_owned(),
                    v.version_id().unwrap().to_owned(),
                    v.is_latest().unwrap(),
                    false,
                    t.secs() * 1_000_000_000 + t.subsec_nanos() as i64,
                )
            })
            .chain(r.delete_markers().iter().map(|m| {
                let t = m.last_modified().unwrap();
                (
                    m.key().unwrap().to_owned(),
                    m.version_id().unwrap().to_owned(),
                    m.is_latest().unwrap(),
                    true,
                    t.secs() * 1_000_000_000 + t.subsec_nanos() as i64,
                )
            }))
            .collect();
        page.sort_by(|a, b| a.0.cmp(&b.0).then(b.4.cmp(&a.4)));
        out.extend(page.into_iter().map(|(k, v, l, m, _)| (k, v, l, m)));
        if !r.is_truncated().unwrap_or(false) {
            return out;
        }
        key_marker = r.next_key_marker().map(str::to_owned);
        id_marker = r.next_version_id_marker().map(str::to_owned);
    }
}

/// Versions are objects of their own to the cluster: with `mirror.copies = 2`, every version
/// and delete marker, with its id and bytes, is still there after every target restarts, after
/// a target joins (a rebalance moves them with their object), and after an owner dies (its
/// replica answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_survive_restarts_rebalance_and_a_dead_owner() {
    use aws_sdk_s3::types::BucketVersioningStatus;
    let mut c = Cluster::start(3, 2).await.unwrap();
    let s3 = client(&c, "gristmill", "gristmill-secret");
    s3.create_bucket().bucket("vers").send().await.unwrap();
    // Versioning turned on natively (`grist bucket props set`); S3 sees the same state.
    c.grist_ok(&[
        "bucket",
        "props",
        "set",
        "ais://vers",
        "mirror.copies=2",
        "versioning.s3=Enabled",
    ]);
    let state = s3
        .get_bucket_versioning()
        .bucket("vers")
        .send()
        .await
        .unwrap();
    assert_eq!(state.status(), Some(&BucketVersioningStatus::Enabled));
    // (key, version id) -> bytes, for every version written.
    let mut bytes = std::collections::BTreeMap::new();
    for k in 0..24 {
        let key = format!("k{k:02}");
        for v in 0..3 {
            let body = content(k * 10 + v, 1000 + k as usize * 97 + v as usize);
            let put = s3
                .put_object()
                .bucket("vers")
                .key(&key)
                .body(ByteStream::from(body.clone()))
                .send()
                .await
                .unwrap();
            bytes.insert((key.clone(), put.version_id().unwrap().to_owned()), body);
        }
        if k % 3 == 0 {
            let d = s3
                .delete_object()
                .bucket("vers")
                .key(&key)
                .send()
                .await
                .unwrap();
            assert_eq!(d.delete_marker(), Some(true));
        }
    }
    // One version of k01 goes for good (`grist rmo --version-id`): on every holder (the
    // replica too), so it never comes back below, when k01's owner dies.
    let gone = bytes
        .keys()
        .find(|(k, _)| k == "k01")
        .map(|(_, id)| id.clone())
        .unwrap();
    c.grist_ok(&["rmo", "ais://vers/k01", "--version-id", &gone]);
    bytes.remove(&("k01".to_owned(), gone.clone()));
    let want = all_versions(&s3, "vers").await;
    assert_eq!(want.len(), 24 * 3 + 8 - 1, "{want:?}");
    let check = |stage: &'static str| {
        let (s3, want, bytes) = (&s3, &want, &bytes);
        async move {
            let got = all_versions(s3, "vers").await;
            assert_eq!(&got, want, "{stage}: the versions listing changed");
            for ((key, id), body) in bytes {
                let r = s3
                    .get_object()
                    .bucket("vers")
                    .key(key)
                    .version_id(id)
                    .send()
                    .await
                    .unwrap_or_else(|e| panic!("{stage}: GET {key} {id}: {e:?}"));
                assert_eq!(r.version_id(), Some(id.as_str()));
                let got = r.body.collect().await.unwrap().into_bytes();
                assert!(
                    got.as_ref() == &body[..],
                    "{stage}: {key} {id}: wrong bytes"
                );
            }
        }
    };
    check("written").await;

    // The native API through `grist`: the same versions listed; one read and one deleted by id.
    let listed: Vec<serde_json::Value> =
        serde_json::from_str(&c.grist_ok(&["--json", "ls", "ais://vers", "--versions"])).unwrap();
    let native: Vec<(String, String, bool, bool)> = listed
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_owned(),
                v["version_id"].as_str().unwrap().to_owned(),
                v["latest"].as_bool().unwrap(),
                v["delete_marker"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(native, want, "grist ls --versions");
    let ((key, id), body) = bytes.iter().find(|((k, _), _)| k == "k04").unwrap();
    let file = c.dir.path().join("k04.version");
    c.grist_ok(&[
        "get",
        &format!("ais://vers/{key}"),
        file.to_str().unwrap(),
        "--version-id",
        id,
    ]);
    assert!(
        std::fs::read(&file).unwrap() == *body,
        "grist get --version-id"
    );

    for i in 0..c.targets.len() {
        c.targets[i].stop();
        c.restart_target(i).await.unwrap();
    }
    check("after every target restarted").await;

    c.add_target().await.unwrap();
    super::elastic::rebalanced(&c).await;
    check("after a target joined and the rebalance finished").await;

    // The owner of k01 dies; its replica holds every version.
    let smap = c.smap().await.unwrap();
    let bck = gristmill_core::Bck::new("vers", gristmill_core::Provider::Ais).unwrap();
    let owner = smap.owners(&bck.object_uname("k01"), 1)[0]
        .daemon_id
        .clone();
    let mut idx = None;
    for i in 0..c.targets.len() {
        if c.target_id(i).await.unwrap() == owner {
            idx = Some(i);
        }
    }
    c.targets[idx.expect("the owner's process")].kill9();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while c.smap().await.unwrap().tmap.contains_key(&owner) {
        assert!(
            std::time::Instant::now() < deadline,
            "the killed owner stays in the map"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    super::elastic::rebalanced(&c).await;
    for ((key, id), body) in bytes.iter().filter(|((k, _), _)| k == "k01") {
        let r = s3
            .get_object()
            .bucket("vers")
            .key(key)
            .version_id(id)
            .send()
            .await
            .unwrap_or_else(|e| panic!("after the owner died: GET {key} {id}: {e:?}"));
        let got = r.body.collect().await.unwrap().into_bytes();
        assert!(
            got.as_ref() == &body[..],
            "after the owner died: {key} {id}"
        );
    }
    check("after the owner of k01 died").await;
    let e = s3
        .get_object()
        .bucket("vers")
        .key("k01")
        .version_id(&gone)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "NoSuchVersion", "{e:?}");
}

/// The versions listing stays exact while a rebalance moves versions: 3,000 versions and
/// markers (1,000 keys), listed over S3 again and again — and single versions read by id —
/// from before a target joins until the join's rebalance finished. Every listing, during and
/// after, equals the one taken before; every read returns its version's bytes. Meanwhile tags
/// are set by version id (never NoSuchVersion; the last one set stays) and a second versioned
/// bucket takes new versions of all its keys (each key keeps every version, in order, with its
/// bytes: fails when a write does not wait for a current version still on a past owner). If a
/// rebalance ends before any listing overlapped it, another target joins (at most 3 times).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn version_listings_stay_exact_while_a_target_joins() {
    use aws_sdk_s3::types::BucketVersioningStatus;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let mut c = Cluster::start(3, 1).await.unwrap();
    let s3 = client(&c, "gristmill", "gristmill-secret");
    s3.create_bucket().bucket("vjoin").send().await.unwrap();
    set_versioning(&s3, "vjoin", BucketVersioningStatus::Enabled).await;
    const KEYS: usize = 1000;
    let writes = futures::stream::iter(0..KEYS * 3)
        .map(|i| {
            let (c, key, v) = (&c, i % KEYS, i / KEYS);
            async move {
                let name = format!("k{key:04}");
                let r = if v == 2 && key % 4 == 0 {
                    c.http
                        .delete(c.url(&format!("/v1/objects/vjoin/{name}")))
                        .send()
                        .await
                        .unwrap()
                } else {
                    super::put(c, "vjoin", &name, content((key * 3 + v) as u64, 300)).await
                };
                assert!(r.status().is_success(), "{name} v{v}: {}", r.status());
            }
        })
        .buffered(16);
    writes.collect::<Vec<()>>().await;
    // A second versioned bucket written throughout the joins: each key's versions are kept,
    // in order, however its current version is placed when a write arrives (a write that
    // finds it still on a past owner waits with 503).
    const WKEYS: usize = 200;
    s3.create_bucket().bucket("vwrite").send().await.unwrap();
    set_versioning(&s3, "vwrite", BucketVersioningStatus::Enabled).await;
    let written: Arc<std::sync::Mutex<Vec<Vec<u64>>>> =
        Arc::new(std::sync::Mutex::new(vec![Vec::new(); WKEYS]));
    let put_version = |s3: aws_sdk_s3::Client, key: usize, seed: u64| async move {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let r = s3
                .put_object()
                .bucket("vwrite")
                .key(format!("w{key:03}"))
                .body(content(seed, 200).into())
                .send()
                .await;
            match r {
                Ok(_) => return,
                Err(e)
                    if e.raw_response().is_some_and(|r| r.status().as_u16() == 503)
                        && std::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await
                }
                Err(e) => panic!("PUT w{key:03}: {e:?}"),
            }
        }
    };
    for key in 0..WKEYS {
        put_version(s3.clone(), key, key as u64 * 1000).await;
        written.lock().unwrap()[key].push(key as u64 * 1000);
    }
    let want = Arc::new(versions_in_pages(&s3, "vjoin", 1000).await);
    assert_eq!(want.len(), KEYS * 3, "versions and markers");
    // Versions to read by id while objects move: every 37th that is not a marker.
    let reads: Arc<Vec<(String, String)>> = Arc::new(
        want.iter()
            .filter(|v| !v.3)
            .step_by(37)
            .map(|v| (v.0.clone(), v.1.clone()))
            .collect(),
    );
    // Tags set by version id while objects move: each call succeeds or asks for a retry
    // (503) — never NoSuchVersion for a version that exists — and the last tag set stays.
    let tagged: Arc<std::sync::Mutex<std::collections::BTreeMap<(String, String), u64>>> =
        Default::default();
    let mut joins = 0;
    loop {
        joins += 1;
        let stop = Arc::new(AtomicBool::new(false));
        let during = Arc::new(AtomicU64::new(0));
        let writer = {
            let (s3, stop, written) = (s3.clone(), stop.clone(), written.clone());
            tokio::spawn(async move {
                // Rounds over every key, 8 keys at a time (one write per key in flight).
                let puts = AtomicU64::new(0);
                while !stop.load(Ordering::SeqCst) {
                    futures::stream::iter(0..WKEYS)
                        .for_each_concurrent(8, |key| {
                            let (s3, stop, written, puts) = (&s3, &stop, &written, &puts);
                            async move {
                                if stop.load(Ordering::SeqCst) {
                                    return;
                                }
                                let seed =
                                    key as u64 * 1000 + written.lock().unwrap()[key].len() as u64;
                                put_version(s3.clone(), key, seed).await;
                                written.lock().unwrap()[key].push(seed);
                                puts.fetch_add(1, Ordering::SeqCst);
                            }
                        })
                        .await;
                }
                puts.into_inner()
            })
        };
        let tagger = {
            let (s3, reads, stop, tagged) =
                (s3.clone(), reads.clone(), stop.clone(), tagged.clone());
            tokio::spawn(async move {
                use aws_sdk_s3::types::{Tag, Tagging};
                let (mut round, mut retry) = (0u64, 0u64);
                while !stop.load(Ordering::SeqCst) {
                    round += 1;
                    let (key, id) = &reads[round as usize % reads.len()];
                    let tagging = Tagging::builder()
                        .tag_set(
                            Tag::builder()
                                .key("round")
                                .value(round.to_string())
                                .build()
                                .unwrap(),
                        )
                        .build()
                        .unwrap();
                    let r = s3
                        .put_object_tagging()
                        .bucket("vjoin")
                        .key(key)
                        .version_id(id)
                        .tagging(tagging)
                        .send()
                        .await;
                    match r {
                        Ok(r) => {
                            assert_eq!(r.version_id(), Some(id.as_str()));
                            tagged
                                .lock()
                                .unwrap()
                                .insert((key.clone(), id.clone()), round);
                        }
                        Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 503) => {
                            retry += 1
                        }
                        Err(e) => panic!("PutObjectTagging {key} {id}: {e:?}"),
                    }
                }
                (round, retry)
            })
        };
        let lister = {
            let (s3, want, reads, stop, during) = (
                s3.clone(),
                want.clone(),
                reads.clone(),
                stop.clone(),
                during.clone(),
            );
            let jobs = c.http.clone();
            let jobs_url = c.url("/v1/jobs?kind=rebalance&running=true");
            tokio::spawn(async move {
                let mut listings = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let running = |url: String| {
                        let jobs = jobs.clone();
                        async move {
                            let r: Vec<serde_json::Value> =
                                jobs.get(url).send().await.unwrap().json().await.unwrap();
                            !r.is_empty()
                        }
                    };
                    let before = running(jobs_url.clone()).await;
                    let got = versions_in_pages(&s3, "vjoin", 1000).await;
                    assert_eq!(&got, &*want, "listing {listings} changed");
                    let (key, id) = &reads[listings as usize % reads.len()];
                    let r = s3
                        .get_object()
                        .bucket("vjoin")
                        .key(key)
                        .version_id(id)
                        .send()
                        .await
                        .unwrap_or_else(|e| panic!("GET {key} {id}: {e:?}"));
                    assert_eq!(r.version_id(), Some(id.as_str()));
                    if before && running(jobs_url.clone()).await {
                        during.fetch_add(1, Ordering::SeqCst);
                    }
                    listings += 1;
                }
                listings
            })
        };
        c.add_target().await.unwrap();
        super::elastic::rebalanced(&c).await;
        stop.store(true, Ordering::SeqCst);
        let listings = lister.await.unwrap();
        let (tag_calls, tag_retries) = tagger.await.unwrap();
        let puts = writer.await.unwrap();
        let during = during.load(Ordering::SeqCst);
        println!(
            "join {joins}: {listings} listings, {during} wholly during the rebalance; \
             {tag_calls} tag changes ({tag_retries} answered 503 after the SDK's retries), \
             {puts} versioned PUTs"
        );
        if during > 0 {
            break;
        }
        assert!(joins < 3, "no listing overlapped any of {joins} rebalances");
    }
    assert_eq!(
        all_versions(&s3, "vjoin").await,
        *want,
        "after, in pages of 7"
    );
    // Every version written to vwrite is there, newest first, with its bytes.
    let listed = all_versions(&s3, "vwrite").await;
    let written = written.lock().unwrap().clone();
    for (key, seeds) in written.iter().enumerate() {
        let name = format!("w{key:03}");
        let ids: Vec<&str> = listed
            .iter()
            .filter(|v| v.0 == name)
            .map(|v| v.1.as_str())
            .collect();
        assert_eq!(ids.len(), seeds.len(), "{name}: versions kept");
        for (id, seed) in ids.iter().zip(seeds.iter().rev()) {
            let got = s3
                .get_object()
                .bucket("vwrite")
                .key(&name)
                .version_id(*id)
                .send()
                .await
                .unwrap();
            let got = got.body.collect().await.unwrap().into_bytes();
            assert!(
                got.as_ref() == &content(*seed, 200)[..],
                "{name} {id}: bytes"
            );
        }
    }
    let tagged = tagged.lock().unwrap().clone();
    assert!(!tagged.is_empty());
    for ((key, id), round) in tagged {
        assert_eq!(
            tags_of(&s3, "vjoin", &key, Some(&id)).await,
            [("round".to_owned(), round.to_string())],
            "{key} {id}"
        );
    }
}

/// Directories under a root (and it) made read-only while this lives, their modes put back
/// when it is dropped (a failing assertion included): a node running as an unprivileged user
/// can then stage files in `tmp/` but not put them in place under `obj/`.
struct ReadOnlyDirs(Vec<(std::path::PathBuf, std::fs::Permissions)>);

impl ReadOnlyDirs {
    fn new(root: &std::path::Path) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let mut kept = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                if e.file_type().unwrap().is_dir() {
                    stack.push(e.path());
                }
            }
            let was = std::fs::metadata(&d).unwrap().permissions();
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(was.mode() & 0o555))
                .unwrap();
            kept.push((d, was));
        }
        Self(kept)
    }
}

impl Drop for ReadOnlyDirs {
    fn drop(&mut self) {
        for (d, was) in self.0.drain(..).rev() {
            let _ = std::fs::set_permissions(&d, was);
        }
    }
}

/// With `mirror.copies = 2`, a versioned PUT whose replica staged the bytes but cannot commit
/// them (its object directories are read-only; nodes run as an unprivileged user so that
/// holds) is undone: it fails, and every key keeps exactly its versions — the current one
/// and its bytes on the owner, and on the replica once the owner is gone. In an Enabled
/// bucket the new version is deleted for good; in a Suspended one, where a null write
/// replaced the null version, the replaced null version is put back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_versioned_put_a_replica_cannot_commit_is_undone() {
    use aws_sdk_s3::types::BucketVersioningStatus;
    let mut c = Cluster::start_unprivileged(3, 1, 10001).await.unwrap();
    let s3 = client(&c, "gristmill", "gristmill-secret");
    let smap = c.smap().await.unwrap();
    let replica = c.target_id(2).await.unwrap();
    let mut owners = std::collections::BTreeMap::new();
    for (bucket, status) in [
        ("undo-on", BucketVersioningStatus::Enabled),
        ("undo-sus", BucketVersioningStatus::Suspended),
    ] {
        s3.create_bucket().bucket(bucket).send().await.unwrap();
        c.grist_ok(&[
            "bucket",
            "props",
            "set",
            &format!("ais://{bucket}"),
            "mirror.copies=2",
        ]);
        // Two versions first (Suspended: one minted, then the null one), then the status.
        let bck = gristmill_core::Bck::new(bucket, gristmill_core::Provider::Ais).unwrap();
        let key = (0..400)
            .map(|i| format!("k{i:03}"))
            .find(|k| smap.owners(&bck.object_uname(k), 2)[1].daemon_id == replica)
            .unwrap();
        owners.insert(
            bucket,
            (
                key.clone(),
                smap.owners(&bck.object_uname(&key), 1)[0].daemon_id.clone(),
            ),
        );
        set_versioning(&s3, bucket, BucketVersioningStatus::Enabled).await;
        for seed in 0..2u64 {
            if seed == 1 && status == BucketVersioningStatus::Suspended {
                set_versioning(&s3, bucket, BucketVersioningStatus::Suspended).await;
            }
            s3.put_object()
                .bucket(bucket)
                .key(&key)
                .body(content(seed, 1000).into())
                .send()
                .await
                .unwrap();
        }
    }
    let before_on = all_versions(&s3, "undo-on").await;
    let before_sus = all_versions(&s3, "undo-sus").await;
    assert_eq!((before_on.len(), before_sus.len()), (2, 2));
    assert_eq!(before_sus[0].1, "null", "{before_sus:?}");

    let read_only = ReadOnlyDirs::new(&c.mountpaths[2][0].join("obj"));
    for (bucket, (key, _)) in &owners {
        let r = super::put(&c, bucket, key, content(7, 1000)).await;
        assert!(
            r.status().is_server_error(),
            "{bucket}/{key}: the PUT answered {}",
            r.status()
        );
    }
    drop(read_only);

    let check = |s3: Client, when: &'static str| {
        let (before_on, before_sus, owners) =
            (before_on.clone(), before_sus.clone(), owners.clone());
        async move {
            for (bucket, before) in [("undo-on", &before_on), ("undo-sus", &before_sus)] {
                let key = &owners[bucket].0;
                let listed = all_versions(&s3, bucket).await;
                let ids = |v: &[(String, String, bool, bool)]| {
                    v.iter().map(|v| (v.1.clone(), v.2)).collect::<Vec<_>>()
                };
                assert_eq!(ids(&listed), ids(before), "{when}: {bucket} versions");
                let got = s3
                    .get_object()
                    .bucket(bucket)
                    .key(key)
                    .send()
                    .await
                    .unwrap();
                let got = got.body.collect().await.unwrap().into_bytes();
                assert!(
                    got.as_ref() == &content(1, 1000)[..],
                    "{when}: {bucket}: the current bytes"
                );
                let old = s3
                    .get_object()
                    .bucket(bucket)
                    .key(key)
                    .version_id(&before[1].1)
                    .send()
                    .await
                    .unwrap();
                let old = old.body.collect().await.unwrap().into_bytes();
                assert!(
                    old.as_ref() == &content(0, 1000)[..],
                    "{when}: {bucket}: the older version's bytes"
                );
            }
        }
    };
    check(s3.clone(), "after the undo").await;
    let mut undone = 0;
    for i in 0..2 {
        undone += c.targets[i]
            .log_text()
            .matches("a replica did not commit: undoing the PUT")
            .count();
    }
    assert_eq!(undone, 2, "both PUTs were undone after the local commit");

    // The owners gone, the replica answers the same.
    let ids = [c.target_id(0).await.unwrap(), c.target_id(1).await.unwrap()];
    let gone: Vec<&String> = owners.values().map(|(_, owner)| owner).collect();
    for (i, id) in ids.iter().enumerate() {
        if gone.contains(&id) {
            c.targets[i].kill9();
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let tmap = c.smap().await.unwrap().tmap;
        if !gone.iter().any(|id| tmap.contains_key(*id)) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the killed owners stay in the map"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    check(s3.clone(), "from the replica").await;
}

/// Issue 28: multipart uploads begun before a target joins complete after its rebalance —
/// those whose object changed owner included: the new owner takes the staged parts over from
/// the target they were uploaded to — and a CompleteMultipartUpload retried while the first
/// is still assembling waits for it: same ETag, one version. (Before, an upload whose owner
/// changed answered NoSuchUpload, and two concurrent completions both committed a version.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn multipart_uploads_survive_an_owner_change_and_a_retried_complete() {
    use aws_sdk_s3::types::BucketVersioningStatus;
    let mut c = Cluster::start(2, 1).await.unwrap();
    let s3 = client(&c, "gristmill", "gristmill-secret");
    s3.create_bucket().bucket("mpj").send().await.unwrap();
    set_versioning(&s3, "mpj", BucketVersioningStatus::Enabled).await;
    let before = c.smap().await.unwrap();
    const KEYS: usize = 12;
    let first = content(1, 5 << 20);
    let mut uploads = Vec::new();
    for k in 0..KEYS {
        let key = format!("big-{k:02}");
        let id = s3
            .create_multipart_upload()
            .bucket("mpj")
            .key(&key)
            .send()
            .await
            .unwrap()
            .upload_id()
            .unwrap()
            .to_owned();
        let part = s3
            .upload_part()
            .bucket("mpj")
            .key(&key)
            .upload_id(&id)
            .part_number(1)
            .body(ByteStream::from(first.clone()))
            .send()
            .await
            .unwrap();
        uploads.push((key, id, part.e_tag().unwrap().to_owned()));
    }
    c.add_target().await.unwrap();
    super::elastic::rebalanced(&c).await;
    let after = c.smap().await.unwrap();
    let bck = gristmill_core::Bck::new("mpj", gristmill_core::Provider::Ais).unwrap();
    let moved = uploads
        .iter()
        .filter(|(key, _, _)| {
            let uname = bck.object_uname(key);
            before.owner(&uname).map(|n| &n.daemon_id) != after.owner(&uname).map(|n| &n.daemon_id)
        })
        .count();
    assert!(moved > 0, "no upload changed owner");
    for (k, (key, id, etag1)) in uploads.iter().enumerate() {
        let last = content(100 + k as u64, 1000 + k);
        let part = s3
            .upload_part()
            .bucket("mpj")
            .key(key)
            .upload_id(id)
            .part_number(2)
            .body(ByteStream::from(last.clone()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{key}: part 2 after the join: {e:?}"));
        let listed = s3
            .list_parts()
            .bucket("mpj")
            .key(key)
            .upload_id(id)
            .send()
            .await
            .unwrap();
        assert_eq!(listed.parts().len(), 2, "{key}: parts after the join");
        let parts = vec![
            CompletedPart::builder().part_number(1).e_tag(etag1).build(),
            CompletedPart::builder()
                .part_number(2)
                .e_tag(part.e_tag().unwrap())
                .build(),
        ];
        let complete = || {
            s3.complete_multipart_upload()
                .bucket("mpj")
                .key(key)
                .upload_id(id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts.clone()))
                        .build(),
                )
                .send()
        };
        // The first few are completed twice at once (a client's retry of a slow answer).
        let (a, b) = if k < 4 {
            let (a, b) = tokio::join!(complete(), complete());
            (a.unwrap(), Some(b.unwrap()))
        } else {
            (complete().await.unwrap(), None)
        };
        if let Some(b) = &b {
            assert_eq!(a.e_tag(), b.e_tag(), "{key}: the retry's ETag");
            assert_eq!(a.version_id(), b.version_id(), "{key}: the retry's version");
        }
        let got = s3.get_object().bucket("mpj").key(key).send().await.unwrap();
        assert_eq!(got.e_tag(), a.e_tag());
        let body = got.body.collect().await.unwrap().into_bytes();
        assert_eq!(body.len(), first.len() + last.len());
        assert!(body[..first.len()] == first[..] && body[first.len()..] == last[..]);
    }
    let versions = all_versions(&s3, "mpj").await;
    assert_eq!(versions.len(), KEYS, "one version per upload: {versions:?}");
    // Nothing of the uploads is left in progress anywhere.
    let left = s3
        .list_multipart_uploads()
        .bucket("mpj")
        .send()
        .await
        .unwrap();
    assert!(left.uploads().is_empty(), "{:?}", left.uploads());
    println!("{KEYS} uploads across a join, {moved} of them taken over by a new owner");
}

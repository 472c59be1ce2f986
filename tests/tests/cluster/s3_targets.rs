//! Targets serving S3 reads on ports of their own (`--s3-listen` on a target): every read
//! answered exactly as the proxy's S3 front answers it, plain reads served by the targets
//! (counted), everything else — writes, listings, SSE-C, refusals — relayed to a proxy.

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketVersioningStatus, ChecksumAlgorithm, ChecksumMode, VersioningConfiguration,
};
use base64::Engine as _;
use gristmill_tests::{Cluster, content};

use super::s3::code;

const USERS: &str = r#"[{"access_key":"admin","secret_key":"admin-secret","read":["*"],"write":["*"]},{"access_key":"other","secret_key":"other-secret","read":["elsewhere"],"write":[]}]"#;

fn client(endpoint: &str, access: &str, secret: &str) -> Client {
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .force_path_style(true)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(access, secret, None, None, "test"))
        .build();
    Client::from_conf(config)
}

/// Every field of a GET's answer a client sees, and its body.
type Answer = (Vec<(&'static str, Option<String>)>, Vec<u8>);

async fn get(s3: &Client, bucket: &str, key: &str, range: Option<&str>, sums: bool) -> Answer {
    let mut req = s3.get_object().bucket(bucket).key(key);
    if let Some(r) = range {
        req = req.range(r);
    }
    if sums {
        req = req.checksum_mode(ChecksumMode::Enabled);
    }
    let o = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {bucket}/{key}: {e:?}"));
    let mut metadata: Vec<_> = o.metadata().into_iter().flatten().collect();
    metadata.sort();
    let fields = vec![
        ("etag", o.e_tag().map(str::to_owned)),
        ("content-length", o.content_length().map(|n| n.to_string())),
        ("content-range", o.content_range().map(str::to_owned)),
        ("accept-ranges", o.accept_ranges().map(str::to_owned)),
        ("last-modified", o.last_modified().map(|t| t.to_string())),
        ("content-type", o.content_type().map(str::to_owned)),
        ("content-encoding", o.content_encoding().map(str::to_owned)),
        ("cache-control", o.cache_control().map(str::to_owned)),
        (
            "content-disposition",
            o.content_disposition().map(str::to_owned),
        ),
        ("content-language", o.content_language().map(str::to_owned)),
        ("expires", o.expires_string().map(str::to_owned)),
        ("metadata", Some(format!("{metadata:?}"))),
        ("tag-count", o.tag_count().map(|n| n.to_string())),
        ("version-id", o.version_id().map(str::to_owned)),
        ("crc32", o.checksum_crc32().map(str::to_owned)),
        ("crc32c", o.checksum_crc32_c().map(str::to_owned)),
        ("sha256", o.checksum_sha256().map(str::to_owned)),
        (
            "checksum-type",
            o.checksum_type().map(|t| t.as_str().to_owned()),
        ),
        ("parts-count", o.parts_count().map(|n| n.to_string())),
    ];
    (
        fields,
        o.body.collect().await.unwrap().into_bytes().to_vec(),
    )
}

async fn head(s3: &Client, bucket: &str, key: &str) -> Vec<(&'static str, Option<String>)> {
    let o = s3
        .head_object()
        .bucket(bucket)
        .key(key)
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    let mut metadata: Vec<_> = o.metadata().into_iter().flatten().collect();
    metadata.sort();
    vec![
        ("etag", o.e_tag().map(str::to_owned)),
        ("content-length", o.content_length().map(|n| n.to_string())),
        ("last-modified", o.last_modified().map(|t| t.to_string())),
        ("content-type", o.content_type().map(str::to_owned)),
        ("cache-control", o.cache_control().map(str::to_owned)),
        ("expires", o.expires_string().map(str::to_owned)),
        ("metadata", Some(format!("{metadata:?}"))),
        ("version-id", o.version_id().map(str::to_owned)),
        ("sha256", o.checksum_sha256().map(str::to_owned)),
        (
            "checksum-type",
            o.checksum_type().map(|t| t.as_str().to_owned()),
        ),
        ("accept-ranges", o.accept_ranges().map(str::to_owned)),
    ]
}

/// S3 requests a target counted as `answer` (`served`, `relayed`).
async fn counted(c: &Cluster, target_url: &str, answer: &str) -> u64 {
    super::restarts::metric(
        c,
        target_url,
        "grist_s3_target_requests_total",
        &format!("answer=\"{answer}\""),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_answer_s3_reads_as_the_proxy_does() {
    let ports: Vec<u16> = (0..3).map(|_| gristmill_tests::free_port()).collect();
    let c = Cluster::start_each(3, 1, &["--s3-users", USERS], |i| {
        vec![
            (
                "GRISTD_S3_LISTEN".to_owned(),
                format!("127.0.0.1:{}", ports[i]),
            ),
            ("GRISTD_S3_USERS".to_owned(), USERS.to_owned()),
        ]
    })
    .await
    .unwrap();
    let smap = c.smap().await.unwrap();
    // Target i's main URL, for its metrics (targets start in index order, ports with them).
    let mut target_urls = Vec::new();
    for i in 0..3 {
        let id = c.target_id(i).await.unwrap();
        target_urls.push(smap.tmap[&id].url().to_owned());
    }
    let endpoints: Vec<String> = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    let proxy = client(&c.endpoint, "admin", "admin-secret");

    // Objects with every kind of metadata the S3 front keeps.
    proxy.create_bucket().bucket("tgt").send().await.unwrap();
    let plain = content(1, 16 << 10);
    proxy
        .put_object()
        .bucket("tgt")
        .key("plain/a")
        .body(ByteStream::from(plain.clone()))
        .send()
        .await
        .unwrap();
    proxy
        .put_object()
        .bucket("tgt")
        .key("meta/b c+d")
        .content_type("image/jpeg")
        .metadata("label", "cat")
        .metadata("split", "train")
        .cache_control("max-age=60")
        .content_disposition("attachment; filename=\"b.jpg\"")
        .content_language("en")
        .content_encoding("identity")
        .expires(aws_sdk_s3::primitives::DateTime::from_secs(2_000_000_000))
        .tagging("k=v&x=y")
        .checksum_algorithm(ChecksumAlgorithm::Sha256)
        .body(ByteStream::from(content(2, 3000)))
        .send()
        .await
        .unwrap();
    let big = content(3, (5 << 20) + 77);
    super::s3::multipart_put(&proxy, "tgt", "mp/c", &big).await;
    proxy.create_bucket().bucket("tgtv").send().await.unwrap();
    proxy
        .put_bucket_versioning()
        .bucket("tgtv")
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
    for seed in [4, 5] {
        proxy
            .put_object()
            .bucket("tgtv")
            .key("v")
            .body(ByteStream::from(content(seed, 5000)))
            .send()
            .await
            .unwrap();
    }
    let objects = [
        ("tgt", "plain/a"),
        ("tgt", "meta/b c+d"),
        ("tgt", "mp/c"),
        ("tgtv", "v"),
    ];

    // Every target answers every read as the proxy does: whole, ranged, with checksums, HEAD.
    // Each target owns some of them and forwards the rest to their owners.
    for (i, endpoint) in endpoints.iter().enumerate() {
        let s3 = client(endpoint, "admin", "admin-secret");
        let served_before = counted(&c, &target_urls[i], "served").await;
        for (bucket, key) in objects {
            for (range, sums) in [(None, false), (Some("bytes=5-1099"), false), (None, true)] {
                let want = get(&proxy, bucket, key, range, sums).await;
                let got = get(&s3, bucket, key, range, sums).await;
                assert_eq!(got.0, want.0, "target {i}: {bucket}/{key} {range:?} {sums}");
                assert!(got.1 == want.1, "target {i}: {bucket}/{key}: bytes differ");
            }
            assert_eq!(
                head(&s3, bucket, key).await,
                head(&proxy, bucket, key).await,
                "target {i}: HEAD {bucket}/{key}"
            );
        }
        let served = counted(&c, &target_urls[i], "served").await - served_before;
        assert_eq!(
            served,
            4 * objects.len() as u64,
            "target {i} served every read itself"
        );
    }
    let whole = get(
        &client(&endpoints[0], "admin", "admin-secret"),
        "tgt",
        "plain/a",
        None,
        false,
    )
    .await;
    assert!(whole.1 == plain);

    // An overwrite through the proxy is what every target serves next.
    let newer = content(6, 16 << 10);
    proxy
        .put_object()
        .bucket("tgt")
        .key("plain/a")
        .body(ByteStream::from(newer.clone()))
        .send()
        .await
        .unwrap();
    for endpoint in &endpoints {
        let s3 = client(endpoint, "admin", "admin-secret");
        assert!(get(&s3, "tgt", "plain/a", None, false).await.1 == newer);
    }

    // What the fast path leaves to the proxies comes back exactly as they answer it.
    let s3 = client(&endpoints[1], "admin", "admin-secret");
    let relayed_before = counted(&c, &target_urls[1], "relayed").await;
    // Writes and listings, signed for the target's address.
    s3.put_object()
        .bucket("tgt")
        .key("via/target")
        .body(ByteStream::from(content(7, 100)))
        .send()
        .await
        .unwrap();
    let listed = s3
        .list_objects_v2()
        .bucket("tgt")
        .prefix("via/")
        .send()
        .await
        .unwrap();
    let keys: Vec<_> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["via/target"]);
    // SSE-C objects.
    let key = [7u8; 32];
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let key_md5 = b64(&<md5::Md5 as md5::Digest>::digest(key));
    proxy
        .put_object()
        .bucket("tgt")
        .key("sse/d")
        .sse_customer_algorithm("AES256")
        .sse_customer_key(b64(&key))
        .sse_customer_key_md5(&key_md5)
        .body(ByteStream::from(content(8, 4000)))
        .send()
        .await
        .unwrap();
    let sse = s3
        .get_object()
        .bucket("tgt")
        .key("sse/d")
        .sse_customer_algorithm("AES256")
        .sse_customer_key(b64(&key))
        .sse_customer_key_md5(&key_md5)
        .send()
        .await
        .unwrap();
    assert!(sse.body.collect().await.unwrap().into_bytes().as_ref() == &content(8, 4000)[..]);
    let no_key = s3.get_object().bucket("tgt").key("sse/d").send().await;
    assert_eq!(
        code(&no_key.unwrap_err().into_service_error()),
        "InvalidRequest"
    );
    // Refusals: a missing key, a user without access, a wrong secret, no signature.
    let missing = s3.get_object().bucket("tgt").key("nope").send().await;
    assert_eq!(
        code(&missing.unwrap_err().into_service_error()),
        "NoSuchKey"
    );
    let other = client(&endpoints[1], "other", "other-secret");
    let denied = other.get_object().bucket("tgt").key("plain/a").send().await;
    assert_eq!(
        code(&denied.unwrap_err().into_service_error()),
        "AccessDenied"
    );
    let forger = client(&endpoints[1], "admin", "not-the-secret");
    let forged = forger
        .get_object()
        .bucket("tgt")
        .key("plain/a")
        .send()
        .await;
    assert_eq!(
        code(&forged.unwrap_err().into_service_error()),
        "SignatureDoesNotMatch"
    );
    let unsigned = c
        .http
        .get(format!("{}/tgt/plain/a", endpoints[1]))
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 403);
    assert!(
        unsigned
            .text()
            .await
            .unwrap()
            .contains("<Code>AccessDenied</Code>")
    );
    let relayed = counted(&c, &target_urls[1], "relayed").await - relayed_before;
    assert!(relayed >= 8, "relayed {relayed}");
    // The object written through the target is there for the proxy too.
    assert!(get(&proxy, "tgt", "via/target", None, false).await.1 == content(7, 100));
}

/// With auth on, a target's S3 port checks cluster users' keys itself (secrets derived from
/// the cluster secret, permissions from their roles, as the proxies do): a reader's GETs are
/// served by the targets, a user without access to the bucket is refused, and a removed
/// user's key stops working on every target at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_judge_cluster_users_s3_keys_as_the_proxy_does() {
    use gristmill_tests::secure::{SecureCluster, SecureOptions};
    let ports: Vec<u16> = (0..2).map(|_| gristmill_tests::free_port()).collect();
    let c = SecureCluster::start(SecureOptions {
        targets: 2,
        auth: true,
        target_args: ports
            .iter()
            .map(|p| vec!["--s3-listen".into(), format!("127.0.0.1:{p}")])
            .collect(),
        ..Default::default()
    })
    .await
    .unwrap();
    c.create_bucket("data").await.unwrap();
    let names: Vec<String> = (0..6).map(|i| format!("obj-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let r = c
            .http
            .put(c.url(&format!("/v1/objects/data/{name}")))
            .body(content(i as u64, 2000))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }
    let reader = c.add_user("reader", &["read:data"], true).await.unwrap();
    let stranger = c.add_user("stranger", &["read:other"], true).await.unwrap();
    let smap = c.smap().await.unwrap();
    let mut target_urls = Vec::new();
    for i in 0..2 {
        let id = c.target_id(i).await.unwrap();
        target_urls.push(smap.tmap[&id].url().to_owned());
    }
    for (i, port) in ports.iter().enumerate() {
        let endpoint = format!("http://127.0.0.1:{port}");
        let s3 = client(&endpoint, &reader.s3_access_key, &reader.s3_secret_key);
        let before = counted(&c, &target_urls[i], "served").await;
        for (n, name) in names.iter().enumerate() {
            let got = get(&s3, "data", name, None, false).await;
            assert!(got.1 == content(n as u64, 2000), "target {i}: {name}");
        }
        assert_eq!(
            counted(&c, &target_urls[i], "served").await - before,
            names.len() as u64,
            "target {i} served the reader's GETs"
        );
        let s3 = client(&endpoint, &stranger.s3_access_key, &stranger.s3_secret_key);
        let denied = s3.get_object().bucket("data").key("obj-0").send().await;
        assert_eq!(
            code(&denied.unwrap_err().into_service_error()),
            "AccessDenied"
        );
    }
    let r = c
        .http
        .delete(c.url("/v1/auth/users/reader"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    for port in &ports {
        let endpoint = format!("http://127.0.0.1:{port}");
        let s3 = client(&endpoint, &reader.s3_access_key, &reader.s3_secret_key);
        let gone = s3.get_object().bucket("data").key("obj-0").send().await;
        assert_eq!(
            code(&gone.unwrap_err().into_service_error()),
            "InvalidAccessKeyId",
            "a removed user's key on {endpoint}"
        );
    }
}

/// A target paused past the keepalive window (SIGSTOP) while a user is removed: the removed
/// user's S3 GET that waited in its socket is judged only after the target heard from the
/// primary, never on the bucket metadata it held when it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_target_never_serves_a_removed_users_key() {
    use gristmill_tests::secure::{SecureCluster, SecureOptions};
    let port = gristmill_tests::free_port();
    let c = SecureCluster::start(SecureOptions {
        targets: 2,
        auth: true,
        target_args: vec![vec!["--s3-listen".into(), format!("127.0.0.1:{port}")]],
        env: vec![
            ("GRISTD_KEEPALIVE_INTERVAL_MS".into(), "500".into()),
            ("GRISTD_KEEPALIVE_RETRIES".into(), "4".into()),
            ("GRISTD_SUSPECT_GRACE_MS".into(), "60000".into()),
        ],
        ..Default::default()
    })
    .await
    .unwrap();
    c.create_bucket("paused").await.unwrap();
    let r = c
        .http
        .put(c.url("/v1/objects/paused/obj"))
        .body(content(1, 1000))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let reader = c.add_user("reader", &["read:paused"], true).await.unwrap();
    let endpoint = format!("http://127.0.0.1:{port}");
    let s3 = client(&endpoint, &reader.s3_access_key, &reader.s3_secret_key);
    assert!(get(&s3, "paused", "obj", None, false).await.1 == content(1, 1000));
    let id = c.target_id(0).await.unwrap();
    let url = c.smap().await.unwrap().tmap[&id].url().to_owned();
    assert_eq!(counted(&c, &url, "served").await, 1);

    c.targets[0].signal("STOP");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let m = c.smap().await.unwrap();
        if m.tmap[&id].flags & gristmill_core::smap::FLAG_SUSPECT != 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never taken for a suspect"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let r = c
        .http
        .delete(c.url("/v1/auth/users/reader"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    // Sent to the stopped target: it waits in its socket.
    let waiting = tokio::spawn(async move {
        s3.get_object()
            .bucket("paused")
            .key("obj")
            .send()
            .await
            .map(|_| ())
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!waiting.is_finished());
    c.targets[0].signal("CONT");
    let answer = waiting.await.unwrap();
    let code = answer.map_err(|e| code(&e.into_service_error()));
    assert!(
        matches!(
            code.as_ref().map_err(String::as_str),
            Err("InvalidAccessKeyId") | Err("ServiceUnavailable")
        ),
        "the removed user's GET that waited: {code:?}"
    );
    assert_eq!(counted(&c, &url, "served").await, 1, "nothing more served");
}

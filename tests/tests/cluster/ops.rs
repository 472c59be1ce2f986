//! Operating a cluster: liveness and readiness probes (`/v1/health`, `?ready=true`).

use std::time::{Duration, Instant};

use gristmill_tests::Cluster;

/// (status, body) of `GET <url>/v1/health[?ready=true]`.
async fn probe(c: &Cluster, url: &str, ready: bool) -> (u16, String) {
    let q = if ready { "?ready=true" } else { "" };
    match c.http.get(format!("{url}/v1/health{q}")).send().await {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(e) => (0, e.to_string()),
    }
}

/// Polls the readiness of `url` until `want` (status) with a body containing `says`.
async fn ready_becomes(c: &Cluster, url: &str, want: u16, says: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = probe(c, url, true).await;
        if status == want && body.contains(says) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{url}: readiness {status} {body}, waiting for {want} with {says:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_says_why_a_node_cannot_serve_and_liveness_stays_200() {
    let c = Cluster::start(2, 1).await.unwrap();
    let smap = c.smap().await.unwrap();
    let targets: Vec<(String, String)> = smap
        .tmap
        .values()
        .map(|n| (n.daemon_id.clone(), n.url().to_owned()))
        .collect();
    ready_becomes(&c, &c.endpoint, 200, r#""ready":true"#).await;
    for (_, url) in &targets {
        ready_becomes(&c, url, 200, r#""ready":true"#).await;
    }

    // A target in maintenance takes no new placements: not ready, still live.
    let (tid, turl) = &targets[0];
    c.grist_ok(&["cluster", "maintenance", "start", tid]);
    let body = ready_becomes(&c, turl, 503, "maintenance").await;
    assert!(body.contains(tid), "{body}");
    assert_eq!(probe(&c, turl, false).await.0, 200, "live in maintenance");
    c.grist_ok(&["cluster", "maintenance", "stop", tid]);
    ready_becomes(&c, turl, 200, r#""ready":true"#).await;

    // A target whose mountpath is gone (a lost disk): not ready, still live.
    let layout = super::scrub::mountpaths_by_id(&c, &smap).await;
    let (other, ourl) = &targets[1];
    let mps = &layout.iter().find(|(id, _)| id == other).unwrap().1;
    std::fs::remove_dir_all(&mps[0]).unwrap();
    let body = ready_becomes(&c, ourl, 503, "not writable").await;
    assert!(body.contains(&*mps[0].to_string_lossy()), "{body}");
    assert_eq!(
        probe(&c, ourl, false).await.0,
        200,
        "live without its mountpath"
    );

    // A proxy that has no cluster map yet (its primary cannot be reached): not ready, live.
    let dir = tempfile::tempdir().unwrap();
    let port = gristmill_tests::free_port();
    let dead = gristmill_tests::free_port();
    let mut lone = gristmill_tests::NodeProcess::spawn(
        "lone-proxy",
        vec![
            "proxy".into(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--state-dir".into(),
            dir.path().join("state").display().to_string(),
            "--join".into(),
            format!("http://127.0.0.1:{dead}"),
        ],
        Vec::new(),
        dir.path(),
    )
    .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while probe(&c, &url, false).await.0 != 200 {
        assert!(Instant::now() < deadline, "{}", lone.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let body = ready_becomes(&c, &url, 503, "no cluster map").await;
    assert!(body.contains("not ready"), "{body}");
    lone.stop();
}

/// Issue 19: every request has an id — the client's `X-Request-Id` or a new one — that the
/// proxy and the target serving it both log (JSON log lines with `--log-format json`, one
/// access line each with `--access-log`), that comes back on the answer and in a JSON error
/// body, and that travels with the S3 front's own requests to the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_is_logged_by_every_node_it_passes() {
    let env = vec![
        ("GRISTD_LOG_FORMAT".to_string(), "json".to_string()),
        ("GRISTD_ACCESS_LOG".to_string(), "true".to_string()),
    ];
    let c = Cluster::start_full(2, 1, &["--log-format", "json", "--access-log"], &env)
        .await
        .unwrap();
    c.create_bucket("rid").await.unwrap();
    let put = c
        .http
        .put(c.url("/v1/objects/rid/obj"))
        .header("x-request-id", "rid-put-0001")
        .body(vec![7u8; 1000])
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success());
    let get = c
        .http
        .get(c.url("/v1/objects/rid/obj"))
        .header("x-request-id", "rid-get-0002")
        .send()
        .await
        .unwrap();
    assert_eq!(get.headers()["x-request-id"], "rid-get-0002");
    assert_eq!(get.bytes().await.unwrap().len(), 1000);
    // The S3 front fetches from the target itself: the id goes along.
    let s3 = c
        .http
        .get(c.url("/rid/obj"))
        .header("x-request-id", "rid-s3-0003")
        .send()
        .await
        .unwrap();
    assert_eq!(s3.status(), 200);
    assert_eq!(s3.headers()["x-request-id"], "rid-s3-0003");
    // An error body names the request; without an id from the client the node makes one.
    let missing = c
        .http
        .get(c.url("/v1/objects/rid/nope"))
        .header("x-request-id", "rid-404-0004")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let body: serde_json::Value = missing.json().await.unwrap();
    assert_eq!(body["request_id"], "rid-404-0004", "{body}");
    let fresh = c.http.get(c.url("/v1/health")).send().await.unwrap();
    let made = fresh.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(made.len(), 32, "{made}");

    let smap = c.smap().await.unwrap();
    let bck = gristmill_core::Bck::new("rid", gristmill_core::Provider::Ais).unwrap();
    let owner = &smap.owner(&bck.object_uname("obj")).unwrap().daemon_id;
    let owner_log = (0..c.targets.len())
        .find(|i| {
            let dir = c.dir.path().join(format!("target-{i}"));
            std::fs::read_to_string(dir.join("node_id")).unwrap().trim() == owner
        })
        .map(|i| c.targets[i].log_text())
        .unwrap();
    let proxy_log = c.proxy.log_text();
    // JSON lines that name the id: the access line on each node, and everything logged inside
    // the request's span.
    let lines_with = |log: &str, id: &str| -> Vec<serde_json::Value> {
        log.lines()
            .filter(|l| l.contains(id))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    };
    for id in [
        "rid-put-0001",
        "rid-get-0002",
        "rid-s3-0003",
        "rid-404-0004",
    ] {
        let p = lines_with(&proxy_log, id);
        assert!(!p.is_empty(), "the proxy did not log {id}");
        let t = lines_with(&owner_log, id);
        assert!(!t.is_empty(), "the owner {owner} did not log {id}");
        assert!(
            t.iter()
                .any(|l| l["target"] == "access" && l["fields"]["id"] == id),
            "{t:?}"
        );
    }
}

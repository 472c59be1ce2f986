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

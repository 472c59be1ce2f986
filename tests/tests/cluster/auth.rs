//! Access control with auth on: a table test over every classified route of proxies and
//! targets (missing, expired, tampered, foreign and under-privileged tokens refused; allowed
//! calls pass the gate; internal endpoints refuse client credentials), the S3 operations with
//! access keys of the same users, a read-only user's limits, captured redirect URLs, token
//! revocation, the first admin printed once, and the `grist auth` commands.
//!
//! The route list comes from the routers' source (`proxy/src/**`, `target/src/**`): a route
//! that is not in the gate's tables fails `every_route_is_classified`.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;
use gristmill_core::users::User;
use gristmill_node::auth::{self, Access, Keys, Route};
use gristmill_tests::secure::{SecureCluster, SecureOptions};
use reqwest::{Method, StatusCode};

// ---- the route list, from the routers' source ------------------------------------------------

/// Every `.route("path", methods)` call in the `.rs` files under `dir`, as (path, methods);
/// `any(...)` is reported as `*`.
fn routes_in_source(dir: &Path) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut files = Vec::new();
    collect_rs(dir, &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut rest = text.as_str();
        while let Some(i) = rest.find(".route(") {
            rest = &rest[i + ".route(".len()..];
            // The call's argument text, up to the matching parenthesis.
            let mut depth = 1;
            let mut end = 0;
            for (j, c) in rest.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = j;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let call = &rest[..end];
            let Some(q1) = call.find('"') else { continue };
            let Some(q2) = call[q1 + 1..].find('"') else {
                continue;
            };
            let path = call[q1 + 1..q1 + 1 + q2].to_owned();
            let handlers = &call[q1 + 2 + q2..];
            let mut methods = Vec::new();
            for m in ["get", "post", "put", "delete", "patch", "head", "any"] {
                let needle = format!("{m}(");
                let mut from = 0;
                while let Some(k) = handlers[from..].find(&needle) {
                    let at = from + k;
                    let before = handlers[..at].chars().last().unwrap_or(' ');
                    if !(before.is_alphanumeric() || before == '_') {
                        methods.push(if m == "any" {
                            "*".to_owned()
                        } else {
                            m.to_uppercase()
                        });
                    }
                    from = at + needle.len();
                }
            }
            assert!(
                !methods.is_empty(),
                "no method found for route {path} in {f:?}"
            );
            out.push((path, methods));
        }
    }
    out
}

fn collect_rs(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            collect_rs(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Whether a table has an entry for exactly this path pattern and method.
fn classified(table: &[Route], path: &str, method: &str) -> bool {
    table.iter().any(|r| {
        r.path == path
            && r.methods
                .iter()
                .any(|m| *m == "*" || *m == method || (*m == "GET" && method == "HEAD"))
    })
}

#[test]
fn every_route_is_classified() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for (crate_dir, table, name) in [
        ("proxy/src", auth::PROXY_ROUTES, "PROXY_ROUTES"),
        ("target/src", auth::TARGET_ROUTES, "TARGET_ROUTES"),
    ] {
        let routes = routes_in_source(&root.join(crate_dir));
        assert!(
            routes.len() > 10,
            "found only {} routes in {crate_dir}",
            routes.len()
        );
        let mut missing = Vec::new();
        for (path, methods) in &routes {
            for m in methods {
                let ms: Vec<&str> = if m == "*" {
                    vec!["GET", "HEAD", "PUT", "POST", "DELETE", "PATCH"]
                } else {
                    vec![m.as_str()]
                };
                for m in ms {
                    if !classified(table, path, m) {
                        missing.push(format!("{m} {path}"));
                    }
                }
            }
        }
        assert!(
            missing.is_empty(),
            "routes in {crate_dir} without an access class in gristmill_node::auth::{name} \
             (classify them): {missing:?}"
        );
        // And the table names no route that no longer exists.
        let paths: BTreeSet<&str> = routes.iter().map(|(p, _)| p.as_str()).collect();
        for r in table {
            assert!(
                paths.contains(r.path),
                "{name} classifies {} {:?}, which {crate_dir} does not route",
                r.path,
                r.methods
            );
        }
    }
}

// ---- the table test over a running cluster -------------------------------------------------

/// Credentials a request is sent with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cred {
    None,
    Expired,
    Tampered,
    Foreign,
    Admin,
    ReadOnly,
    ReadWrite,
    ClusterRead,
    Stranger,
    Node,
}

struct Tokens {
    admin: String,
    ro: String,
    rw: String,
    cr: String,
    stranger: String,
    expired: String,
    tampered: String,
    foreign: String,
    keys: Keys,
}

impl Tokens {
    fn header(&self, cred: Cred, method: &Method, path: &str) -> Option<(&'static str, String)> {
        let bearer = |t: &str| Some(("authorization", format!("Bearer {t}")));
        match cred {
            Cred::None => None,
            Cred::Expired => bearer(&self.expired),
            Cred::Tampered => bearer(&self.tampered),
            Cred::Foreign => bearer(&self.foreign),
            Cred::Admin => bearer(&self.admin),
            Cred::ReadOnly => bearer(&self.ro),
            Cred::ReadWrite => bearer(&self.rw),
            Cred::ClusterRead => bearer(&self.cr),
            Cred::Stranger => bearer(&self.stranger),
            Cred::Node => Some((
                auth::NODE_AUTH_HEADER,
                self.keys.sign_intra("test-node", method.as_str(), path),
            )),
        }
    }
}

/// The concrete path of a route pattern.
fn concrete(pattern: &str) -> String {
    pattern
        .split('/')
        .map(|seg| match seg {
            "{bucket}" => "data",
            "{*object}" => "tbl/obj",
            "{op}" => "start",
            s if s.starts_with('{') => "nope",
            s => s,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// A request body that gets a bucket action or a get-batch past parsing.
fn body_for(access: Access, method: &Method) -> Option<serde_json::Value> {
    match (access, method.as_str()) {
        (Access::BucketAction, "POST") => Some(serde_json::json!({"action": "prefetch-listrange"})),
        (Access::BucketAction, "DELETE") => Some(serde_json::json!({"action": "evict-listrange"})),
        (Access::BucketAction, _) => Some(serde_json::json!({"action": "set-bprops", "value": {}})),
        (Access::BucketRead, "GET") => Some(serde_json::json!({"action": "list"})),
        (Access::Batch, _) => {
            Some(serde_json::json!({"in": [{"objname": "obj", "bucket": "data"}]}))
        }
        _ => None,
    }
}

fn methods_of(r: &Route) -> Vec<Method> {
    r.methods
        .iter()
        .flat_map(|m| match *m {
            "*" => vec![Method::GET, Method::PUT, Method::DELETE],
            m => vec![m.parse().unwrap()],
        })
        .collect()
}

/// What `cred` must get on a route: `Some(status)` for a refusal, `None` = passes the gate.
fn expected(access: Access, method: &Method, cred: Cred) -> Option<StatusCode> {
    use Cred::*;
    let read = matches!(*method, Method::GET | Method::HEAD);
    let refused = Some(StatusCode::FORBIDDEN);
    match (access, cred) {
        (Access::Public, _) => Option::None,
        (_, None | Expired | Tampered | Foreign) => Some(StatusCode::UNAUTHORIZED),
        (Access::Internal, Node) => Option::None,
        (Access::Internal, _) => refused,
        (_, Node | Admin) => Option::None,
        (Access::Authenticated, _) => Option::None,
        (Access::ClusterRead | Access::ClusterQuery, ClusterRead) => Option::None,
        (Access::ClusterRead | Access::ClusterQuery | Access::Admin, _) => refused,
        (Access::Object, ReadOnly) if read => Option::None,
        (Access::Object, ReadWrite) => Option::None,
        (Access::BucketRead | Access::Batch, ReadOnly | ReadWrite) => Option::None,
        (Access::BucketAction, ReadWrite) => Option::None,
        _ => refused,
    }
}

/// A client that shows redirects instead of following them.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn table(c: &SecureCluster, tokens: &Tokens, base: &str, routes: &[Route], who: &str) {
    let http = no_redirects();
    let mut failures = Vec::new();
    let mut checked = 0;
    for route in routes {
        if route.access == Access::S3 {
            continue;
        }
        let path = concrete(route.path);
        // Cluster queries: the metadata (cluster-read); the map is checked separately.
        let query = if route.access == Access::ClusterQuery {
            "?what=bmd"
        } else {
            ""
        };
        for method in methods_of(route) {
            for cred in [
                Cred::None,
                Cred::Expired,
                Cred::Tampered,
                Cred::Foreign,
                Cred::Stranger,
                Cred::ReadOnly,
                Cred::ReadWrite,
                Cred::ClusterRead,
                Cred::Admin,
                Cred::Node,
            ] {
                let mut req = http.request(method.clone(), format!("{base}{path}{query}"));
                if let Some((k, v)) = tokens.header(cred, &method, &path) {
                    req = req.header(k, v);
                }
                if let Some(b) = body_for(route.access, &method) {
                    req = req.json(&b);
                }
                let status = req.send().await.unwrap().status();
                checked += 1;
                let want = expected(route.access, &method, cred);
                let ok = match want {
                    Some(s) => status == s,
                    None => status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN,
                };
                if !ok {
                    failures.push(format!(
                        "{who} {method} {path} ({:?}) as {cred:?}: got {status}, want {}",
                        route.access,
                        want.map_or("the gate to let it through".into(), |s| s.to_string())
                    ));
                }
            }
        }
    }
    let _ = c;
    assert!(checked > 100, "only {checked} requests checked on {who}");
    assert!(
        failures.is_empty(),
        "{} of {checked} checks failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A token with its payload rewritten (`sub` → admin) and the old signature.
fn tamper(token: &str) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let parts: Vec<&str> = token.split('.').collect();
    let payload = String::from_utf8(b64.decode(parts[1]).unwrap()).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&payload).unwrap();
    v["sub"] = "admin".into();
    v["exp"] = (v["exp"].as_u64().unwrap() + 3600).into();
    format!("{}.{}.{}", parts[0], b64.encode(v.to_string()), parts[2])
}

async fn setup() -> (
    SecureCluster,
    Tokens,
    [gristmill_core::users::NewCredentials; 3],
) {
    let c = SecureCluster::start(SecureOptions {
        targets: 2,
        auth: true,
        node_args: vec!["--redirect-ttl".into(), "2s".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    c.create_bucket("data").await.unwrap();
    for (name, body) in [("obj", "object one"), ("obj2", "object two")] {
        let r = c
            .http
            .put(c.url(&format!("/v1/objects/data/{name}")))
            .body(body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    }
    let ro = c.add_user("ro", &["read:data"], true).await.unwrap();
    let rw = c.add_user("rw", &["write:data"], true).await.unwrap();
    let cr = c.add_user("cr", &["cluster-read"], false).await.unwrap();
    let stranger = c
        .add_user("stranger", &["read:elsewhere"], true)
        .await
        .unwrap();
    let secret = auth::load_secret(&c.secret_file).unwrap();
    let foreign_keys = Keys::from_secret(&[9u8; 32]);
    let admin_user = User {
        name: "admin".into(),
        roles: vec![gristmill_core::users::Role::Admin],
        password: None,
        s3_keys: vec![],
        generation: 0,
        created: String::new(),
    };
    let expired = c.login("ro", &ro.password, "1s").await.unwrap();
    let ro_token = c.login("ro", &ro.password, "").await.unwrap();
    let tokens = Tokens {
        admin: c.admin_token.clone(),
        tampered: tamper(&ro_token),
        ro: ro_token,
        rw: c.login("rw", &rw.password, "").await.unwrap(),
        cr: c.login("cr", &cr.password, "").await.unwrap(),
        stranger: c.login("stranger", &stranger.password, "").await.unwrap(),
        expired,
        foreign: foreign_keys
            .issue_token(&admin_user, Duration::from_secs(600))
            .unwrap()
            .0,
        keys: Keys::from_secret(&secret),
    };
    // Let the short token expire.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    (c, tokens, [ro, rw, stranger])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_route_refuses_bad_tokens_and_lets_allowed_calls_through() {
    let (c, tokens, _) = setup().await;
    table(&c, &tokens, &c.endpoint, auth::PROXY_ROUTES, "proxy").await;
    let smap = c.smap().await.unwrap();
    for t in smap.tmap.values() {
        table(&c, &tokens, t.url(), auth::TARGET_ROUTES, "target").await;
    }
    // Any user reads the cluster map (clients route by it), but not the bucket metadata.
    let stranger = c.client(Some(&tokens.stranger));
    let t = smap.tmap.values().next().unwrap().url().to_owned();
    for url in [
        c.url("/v1/cluster?what=smap"),
        c.url("/v1/daemon?what=smap"),
        format!("{t}/v1/daemon?what=smap"),
        format!("{t}/v1/daemon"),
    ] {
        let r = stranger.get(&url).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{url}");
    }
    let r = stranger
        .get(c.url("/v1/cluster?what=bmd"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    // A refused upload that waits for `100 Continue` is refused before it is sent: the
    // first answer is the 401/403 (not an invitation to upload), and the connection closes.
    let target = t.trim_start_matches("http://").to_owned();
    let proxy = c.endpoint.trim_start_matches("http://").to_owned();
    let bearer = format!("Authorization: Bearer {}\r\n", tokens.ro);
    for (addr, auth_line, status) in [
        (&target, "", "401"),
        (&proxy, "", "401"),
        (&proxy, bearer.as_str(), "403"),
    ] {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "PUT /v1/objects/data/upload HTTP/1.1\r\nHost: x\r\n{auth_line}\
             Content-Length: 1000000\r\nExpect: 100-continue\r\n\r\n"
        );
        s.write_all(head.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
        assert!(
            answer.starts_with(&format!("http/1.1 {status}")),
            "{addr} {auth_line:?}: {answer}"
        );
        assert!(answer.contains("connection: close"), "{answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_only_user_redirects_internal_endpoints_and_s3() {
    let (c, tokens, [ro, rw, stranger]) = setup().await;
    let ro_http = c.client(Some(&tokens.ro));
    let admin_http = c.client(Some(&tokens.admin));

    // A read-only user lists and gets (through the proxy's signed redirect: the client drops
    // its token when it follows a redirect to another port)...
    let r = ro_http
        .get(c.url("/v1/buckets/data"))
        .json(&serde_json::json!({"action": "list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let page: gristmill_core::api::ListObjectsPage = r.json().await.unwrap();
    assert_eq!(page.entries.len(), 2);
    let r = ro_http
        .get(c.url("/v1/objects/data/obj"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.text().await.unwrap(), "object one");
    // ...but cannot put, delete, create buckets, init an ETL, or change the cluster.
    let forbidden = [
        ro_http.put(c.url("/v1/objects/data/new")).body("x"),
        ro_http.delete(c.url("/v1/objects/data/obj")),
        ro_http
            .post(c.url("/v1/buckets/newb"))
            .json(&serde_json::json!({"action": "create-bck"})),
        ro_http
            .delete(c.url("/v1/buckets/data"))
            .json(&serde_json::json!({"action": "destroy-bck"})),
        ro_http
            .put(c.url("/v1/etl"))
            .json(&serde_json::json!({"name": "x", "runtime": "command", "command": ["cat"]})),
        ro_http
            .put(c.url("/v1/cluster"))
            .json(&serde_json::json!({"action": "start", "value": {"kind": "lru"}})),
        ro_http
            .put(c.url("/v1/auth/users/mallory"))
            .json(&serde_json::json!({"roles": ["admin"]})),
    ];
    for req in forbidden {
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{:?}", r.url());
    }
    // The object is intact; an admin can do what the read-only user could not.
    let r = admin_http
        .post(c.url("/v1/buckets/newb"))
        .json(&serde_json::json!({"action": "create-bck"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = admin_http
        .put(c.url("/v1/cluster"))
        .json(&serde_json::json!({"action": "start", "value": {"kind": "lru"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    // A read-write user of the bucket writes it.
    let rw_http = c.client(Some(&tokens.rw));
    let r = rw_http
        .put(c.url("/v1/objects/data/by-rw"))
        .body("rw")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    // Captured redirect URLs: good for this object and method, until they expire.
    let no_follow = no_redirects();
    let r = no_follow
        .get(c.url("/v1/objects/data/obj"))
        .bearer_auth(&tokens.ro)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TEMPORARY_REDIRECT);
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    assert!(location.contains("gsig="), "{location}");
    let r = no_follow.get(&location).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.text().await.unwrap(), "object one");
    for (what, url, method) in [
        (
            "another object",
            location.replace("/data/obj?", "/data/obj2?"),
            Method::GET,
        ),
        (
            "another bucket",
            location.replace("/data/obj?", "/newb/obj?"),
            Method::GET,
        ),
        ("a PUT", location.clone(), Method::PUT),
        ("a DELETE", location.clone(), Method::DELETE),
        (
            "a forged user",
            location.replace("guser=ro", "guser=admin"),
            Method::GET,
        ),
    ] {
        let r = no_follow
            .request(method, &url)
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            StatusCode::UNAUTHORIZED,
            "redirect reused for {what}"
        );
    }
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let r = no_follow.get(&location).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "expired redirect");
    assert!(r.text().await.unwrap().contains("expired"));

    // Internal endpoints refuse client credentials, the admin's included; a forged node
    // signature is refused too; and a rebalance write is internal even on the object path.
    let smap = c.smap().await.unwrap();
    let target = smap.tmap.values().next().unwrap().url().to_owned();
    for (url, method) in [
        (c.url("/v1/metasync"), Method::PUT),
        (c.url("/v1/cluster/join"), Method::POST),
        (c.url("/v1/cluster/keepalive"), Method::POST),
        (format!("{target}/v1/metasync"), Method::PUT),
        (format!("{target}/v1/jobs"), Method::POST),
        (format!("{target}/v1/buckets/data"), Method::GET),
        (
            format!("{target}/v1/internal/objects/data/obj?transfer=rebalance"),
            Method::PUT,
        ),
    ] {
        let r = admin_http
            .request(method.clone(), &url)
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{method} {url} as admin");
        let r = no_follow
            .request(method.clone(), &url)
            .header(auth::NODE_AUTH_HEADER, "v1 p1 99999999999 AAAA")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            StatusCode::UNAUTHORIZED,
            "{method} {url} forged"
        );
    }
    // A node signature for one path does not open another.
    let sig = tokens.keys.sign_intra("t1", "GET", "/v1/daemon");
    let r = no_follow
        .put(format!("{target}/v1/metasync"))
        .header(auth::NODE_AUTH_HEADER, sig)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    // Bucket metadata as clients see it carries no credential verifiers.
    let bmd: serde_json::Value = admin_http
        .get(c.url("/v1/cluster?what=bmd"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(bmd["users"]["ro"]["roles"].is_array());
    assert!(bmd["users"]["ro"].get("password").is_none());
    assert!(bmd["users"]["ro"].get("s3_keys").is_none());

    // S3 with the same users: access keys map to users and roles.
    let s3 = |key: &str, secret: &str| {
        let conf = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(&c.endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new(key, secret, None, None, "test"))
            .force_path_style(true)
            .build();
        aws_sdk_s3::Client::from_conf(conf)
    };
    let s3_ro = s3(&ro.s3_access_key, &ro.s3_secret_key);
    let s3_rw = s3(&rw.s3_access_key, &rw.s3_secret_key);
    let s3_stranger = s3(&stranger.s3_access_key, &stranger.s3_secret_key);
    let s3_bad = s3(
        &ro.s3_access_key,
        "not-the-secret-not-the-secret-not-the-se",
    );
    assert!(s3_ro.list_buckets().send().await.is_ok());
    assert!(s3_ro.head_bucket().bucket("data").send().await.is_ok());
    assert!(s3_ro.list_objects_v2().bucket("data").send().await.is_ok());
    let got = s3_ro
        .get_object()
        .bucket("data")
        .key("obj")
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        b"object one"
    );
    assert!(
        s3_ro
            .head_object()
            .bucket("data")
            .key("obj")
            .send()
            .await
            .is_ok()
    );
    let denied = |r: Result<(), String>, what: &str| {
        let e = r.expect_err(what);
        assert!(
            e.contains("AccessDenied")
                || e.contains("SignatureDoesNotMatch")
                || e.contains("InvalidAccessKeyId"),
            "{what}: {e}"
        );
    };
    let err = |e: &dyn std::fmt::Debug| format!("{e:?}");
    denied(
        s3_ro
            .put_object()
            .bucket("data")
            .key("s3-ro")
            .body(ByteStream::from_static(b"x"))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| err(&e)),
        "read-only PutObject",
    );
    denied(
        s3_ro
            .delete_object()
            .bucket("data")
            .key("obj")
            .send()
            .await
            .map(|_| ())
            .map_err(|e| err(&e)),
        "read-only DeleteObject",
    );
    denied(
        s3_ro
            .create_bucket()
            .bucket("s3new")
            .send()
            .await
            .map(|_| ())
            .map_err(|e| err(&e)),
        "read-only CreateBucket",
    );
    denied(
        s3_ro
            .create_multipart_upload()
            .bucket("data")
            .key("mp")
            .send()
            .await
            .map(|_| ())
            .map_err(|e| err(&e)),
        "read-only CreateMultipartUpload",
    );
    denied(
        s3_ro
            .copy_object()
            .bucket("data")
            .key("copy")
            .copy_source("data/obj")
            .send()
            .await
            .map(|_| ())
            .map_err(|e| err(&e)),
        "read-only CopyObject",
    );
    denied(
        s3_stranger
            .get_object()
            .bucket("data")
            .key("obj")
            .send()
            .await
            .map(|_| ())
            .map_err(|e| err(&e)),
        "stranger GetObject",
    );
    denied(
        s3_bad
            .list_objects_v2()
            .bucket("data")
            .send()
            .await
            .map(|_| ())
            .map_err(|e| err(&e)),
        "wrong secret",
    );
    s3_rw
        .put_object()
        .bucket("data")
        .key("s3-rw")
        .body(ByteStream::from_static(b"rw"))
        .send()
        .await
        .unwrap();
    let mp = s3_rw
        .create_multipart_upload()
        .bucket("data")
        .key("mp")
        .send()
        .await
        .unwrap();
    s3_rw
        .abort_multipart_upload()
        .bucket("data")
        .key("mp")
        .upload_id(mp.upload_id().unwrap())
        .send()
        .await
        .unwrap();
    s3_rw
        .delete_object()
        .bucket("data")
        .key("s3-rw")
        .send()
        .await
        .unwrap();
    // Unsigned S3 requests are refused (the playground's default key is off too).
    for (method, path) in [
        (Method::GET, "/"),
        (Method::GET, "/data"),
        (Method::GET, "/data?list-type=2"),
        (Method::HEAD, "/data"),
        (Method::GET, "/data?location"),
        (Method::GET, "/data?uploads"),
        (Method::GET, "/data/obj"),
        (Method::HEAD, "/data/obj"),
        (Method::PUT, "/data/anon"),
        (Method::DELETE, "/data/obj"),
        (Method::POST, "/data?delete"),
        (Method::POST, "/data/anon?uploads"),
        (Method::PUT, "/newbkt"),
        (Method::DELETE, "/data"),
    ] {
        let r = no_follow
            .request(method, c.url(path))
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "anonymous S3 {path}");
    }
    let anon_default = s3(gristmill_tests_default_key(), "gristmill-secret");
    assert!(anon_default.list_buckets().send().await.is_err());
    // Presigned URLs: good until they expire; a tampered one is refused.
    let presigned = s3_ro
        .get_object()
        .bucket("data")
        .key("obj")
        .presigned(
            aws_sdk_s3::presigning::PresigningConfig::expires_in(Duration::from_secs(2)).unwrap(),
        )
        .await
        .unwrap();
    let url = presigned.uri().to_owned();
    let r = no_follow.get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let tampered = url.replace("/data/obj?", "/data/obj2?");
    let r = no_follow.get(&tampered).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "tampered presigned URL");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let r = no_follow.get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "expired presigned URL");
}

fn gristmill_tests_default_key() -> &'static str {
    "gristmill"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn internal_object_operations_are_closed_to_users() {
    // Method, URL and headers of one internal operation.
    type InternalOp<'a> = (Method, String, Vec<(&'a str, String)>);
    // Issue 14: every node-to-node object operation lives on `/v1/internal/...` and only a
    // node credential opens it; the old query flags on the user route are a 400 for anyone.
    let (c, tokens, _) = setup().await;
    let rw_http = c.client(Some(&tokens.rw));
    let admin_http = c.client(Some(&tokens.admin));
    let anon = no_redirects();
    let smap = c.smap().await.unwrap();
    let generation = gristmill_core::api::header::GEN;
    let before = admin_http
        .get(c.url("/v1/objects/data/obj"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut checked = 0;
    for t in smap.tmap.values() {
        let base = format!("{}/v1/internal/objects/data", t.url());
        let ops: Vec<InternalOp> = vec![
            (
                Method::PUT,
                format!("{base}/obj?transfer=rebalance"),
                vec![(generation, "999".into())],
            ),
            (
                Method::PUT,
                format!("{base}/obj?transfer=replica"),
                vec![(generation, "999".into())],
            ),
            (
                Method::PUT,
                format!("{base}/planted?transfer=replica"),
                vec![(generation, "9".into())],
            ),
            (
                Method::DELETE,
                format!("{base}/obj"),
                vec![(generation, "999".into())],
            ),
            (Method::GET, format!("{base}/obj"), vec![]),
            (Method::HEAD, format!("{base}/obj"), vec![]),
            // A staged replica write, its commit and its abort.
            (Method::PUT, format!("{base}/obj?stage=s1"), vec![]),
            (
                Method::POST,
                format!("{base}/obj?stage=s1"),
                vec![(generation, "999".into())],
            ),
            (Method::DELETE, format!("{base}/obj?stage=s1"), vec![]),
        ];
        for (method, url, headers) in ops {
            for (who, client, want) in [
                ("no credential", &anon, StatusCode::UNAUTHORIZED),
                ("a bucket writer", &rw_http, StatusCode::FORBIDDEN),
                ("the admin", &admin_http, StatusCode::FORBIDDEN),
            ] {
                let mut req = client.request(method.clone(), &url).body("poison");
                for (k, v) in &headers {
                    req = req.header(*k, v);
                }
                let r = req.send().await.unwrap();
                assert_eq!(r.status(), want, "{method} {url} as {who}");
                checked += 1;
            }
        }
        // A node credential opens them (a HEAD of the owner's or a missing copy).
        let path = "/v1/internal/objects/data/obj";
        let r = anon
            .head(format!("{}{path}", t.url()))
            .header(
                auth::NODE_AUTH_HEADER,
                tokens.keys.sign_intra("test-node", "HEAD", path),
            )
            .send()
            .await
            .unwrap();
        assert!(
            r.status() == StatusCode::OK || r.status() == StatusCode::NOT_FOUND,
            "node HEAD on {}: {}",
            t.daemon_id,
            r.status()
        );
        // The old flags on the user route: 400 for the writer and the admin, on every target
        // and through the proxy.
        for flag in gristmill_core::api::NODE_ONLY_PARAMS {
            for base in [t.url().to_owned(), c.endpoint.clone()] {
                for method in [Method::PUT, Method::DELETE, Method::GET] {
                    for (who, client) in [("writer", &rw_http), ("admin", &admin_http)] {
                        let r = client
                            .request(
                                method.clone(),
                                format!("{base}/v1/objects/data/obj?{flag}=1&tfwd=1"),
                            )
                            .body("poison")
                            .send()
                            .await
                            .unwrap();
                        assert_eq!(
                            r.status(),
                            StatusCode::BAD_REQUEST,
                            "{method} {base} ?{flag} as {who}"
                        );
                        assert!(r.text().await.unwrap().contains("internal"));
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 100, "{checked}");
    // Nothing was stored or deleted: the object reads as before and nothing was planted.
    let after = admin_http
        .get(c.url("/v1/objects/data/obj"))
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), StatusCode::OK);
    assert_eq!(after.text().await.unwrap(), before);
    let planted = admin_http
        .head(c.url("/v1/objects/data/planted"))
        .send()
        .await
        .unwrap();
    assert_eq!(planted.status(), StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_die_with_their_user_and_the_cli_logs_in() {
    let mut c = SecureCluster::start(SecureOptions {
        targets: 1,
        auth: true,
        ..Default::default()
    })
    .await
    .unwrap();
    c.create_bucket("cli").await.unwrap();
    // Revocation: removing a user kills its tokens on every node; re-creating it does not
    // bring old tokens back.
    let v = c.add_user("victim", &["write:cli"], false).await.unwrap();
    let old = c.login("victim", &v.password, "").await.unwrap();
    let smap = c.smap().await.unwrap();
    let target = smap.tmap.values().next().unwrap().url().to_owned();
    let put = |token: String, url: String| async move {
        reqwest::Client::new()
            .put(url)
            .bearer_auth(token)
            .body("v")
            .send()
            .await
            .unwrap()
            .status()
    };
    assert_eq!(
        put(old.clone(), format!("{target}/v1/objects/cli/v")).await,
        StatusCode::OK
    );
    let r = c
        .http
        .delete(c.url("/v1/auth/users/victim"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        put(old.clone(), format!("{target}/v1/objects/cli/v")).await,
        StatusCode::UNAUTHORIZED
    );
    let v2 = c.add_user("victim", &["write:cli"], false).await.unwrap();
    assert_eq!(
        put(old.clone(), c.url("/v1/objects/cli/v")).await,
        StatusCode::UNAUTHORIZED
    );
    let new = c.login("victim", &v2.password, "").await.unwrap();
    assert_eq!(
        put(new, format!("{target}/v1/objects/cli/v")).await,
        StatusCode::OK
    );
    // Wrong passwords and the last admin.
    assert!(c.login("victim", "wrong-password", "").await.is_err());
    let r = c
        .http
        .delete(c.url("/v1/auth/users/admin"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);

    // The CLI: login saves a token (0600); later commands use it.
    let home = c.dir.path().join("home");
    let token_file = home.join("token");
    let grist = |args: &[&str], password: Option<&str>| {
        let bin = gristmill_tests::gristd_bin().with_file_name("grist");
        let mut cmd = std::process::Command::new(&bin);
        cmd.args(args)
            .env("GRIST_ENDPOINT", &c.endpoint)
            .env("GRIST_TOKEN_FILE", &token_file)
            .env_remove("GRIST_TOKEN");
        if let Some(p) = password {
            cmd.env("GRIST_PASSWORD", p);
        }
        cmd.output().unwrap()
    };
    let ok = |out: std::process::Output| {
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = grist(&["auth", "login", "admin"], Some(&c.admin_password));
    assert!(ok(out).contains("logged in as admin"));
    // On a terminal (a pty from `script`) the password prompt does not echo what is typed.
    // Echo goes off before the prompt shows, so writing after the prompt cannot race it.
    {
        use std::io::{Read, Write};
        let bin = gristmill_tests::gristd_bin().with_file_name("grist");
        let mut child = std::process::Command::new("script")
            .args([
                "-qfe",
                "-E",
                "always",
                "-c",
                &format!("{} auth login admin", bin.display()),
                "/dev/null",
            ])
            .env("GRIST_ENDPOINT", &c.endpoint)
            .env("GRIST_TOKEN_FILE", &token_file)
            .env_remove("GRIST_TOKEN")
            .env_remove("GRIST_PASSWORD")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("script (util-linux) runs");
        let mut stdout = child.stdout.take().unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 256];
        while !String::from_utf8_lossy(&seen).contains("password: ") {
            let n = stdout.read(&mut buf).unwrap();
            assert!(n > 0, "no prompt: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "{}", c.admin_password).unwrap();
        stdout.read_to_end(&mut seen).unwrap();
        drop(stdin);
        assert!(child.wait().unwrap().success());
        let shown = String::from_utf8_lossy(&seen);
        assert!(shown.contains("logged in as admin"), "{shown}");
        assert!(
            !shown.contains(&c.admin_password),
            "the password was echoed: {shown}"
        );
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(ok(grist(&["auth", "whoami"], None)).contains("admin"));
    let created: serde_json::Value = serde_json::from_str(&ok(grist(
        &[
            "auth", "user", "add", "carol", "--role", "read:cli", "--s3-key", "--json",
        ],
        None,
    )))
    .unwrap();
    let carol_pw = created["password"].as_str().unwrap().to_owned();
    assert!(!created["s3_secret_key"].as_str().unwrap().is_empty());
    let ls = ok(grist(&["auth", "user", "ls"], None));
    assert!(ls.contains("carol") && ls.contains("read:cli") && ls.contains("admin"));
    let token = ok(grist(&["auth", "token", "--ttl", "1h"], None));
    assert_eq!(token.trim().split('.').count(), 3);
    ok(grist(&["bucket", "create", "ais://cli2"], None));
    let src = c.dir.path().join("f.txt");
    std::fs::write(&src, "from the cli").unwrap();
    ok(grist(
        &["put", src.to_str().unwrap(), "ais://cli/f.txt"],
        None,
    ));
    // As carol (read-only): get works, put is refused with a clear message.
    ok(grist(&["auth", "login", "carol"], Some(&carol_pw)));
    let got = ok(grist(&["get", "ais://cli/f.txt", "-"], None));
    assert_eq!(got, "from the cli");
    assert!(ok(grist(&["ls", "ais://cli"], None)).contains("f.txt"));
    let out = grist(&["put", src.to_str().unwrap(), "ais://cli/g.txt"], None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("403") && err.contains("write access to ais://cli"),
        "{err}"
    );
    let out = grist(&["auth", "user", "rm", "victim"], None);
    assert!(!out.status.success());
    ok(grist(&["auth", "logout"], None));
    assert!(!token_file.exists());
    let out = grist(&["ls", "ais://cli"], None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("401"));

    // The first admin's password was printed once, and a restart prints nothing new.
    let log_path = c.dir.path().join("proxy.log");
    let log = || std::fs::read_to_string(&log_path).unwrap();
    assert_eq!(log().matches("password: ").count(), 1);
    c.proxy.stop();
    c.proxy.start().unwrap();
    c.wait_for_targets(1).await.unwrap();
    assert_eq!(log().matches("password: ").count(), 1);
    assert!(!log().contains(&format!("\"{}\"", c.admin_password)));
    let r = c.http.get(c.url("/v1/auth/whoami")).send().await.unwrap();
    assert_eq!(
        r.status(),
        StatusCode::OK,
        "the admin token survives a restart"
    );
}

/// A second proxy forwards metadata changes to the primary after checking the client itself:
/// no redirect (so a client that drops its token on redirects, like reqwest or curl, is
/// served), and the client's rights, not the proxy's, decide.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_non_primary_proxy_forwards_changes_with_the_clients_rights() {
    let c = SecureCluster::start(SecureOptions {
        targets: 1,
        auth: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let port = gristmill_tests::free_port();
    let second = format!("http://127.0.0.1:{port}");
    let _proxy = gristmill_tests::NodeProcess::spawn(
        "proxy-1",
        vec![
            "proxy".into(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--state-dir".into(),
            c.dir.path().join("proxy-1").display().to_string(),
            "--join".into(),
            c.endpoint.clone(),
            "--auth".into(),
            "--cluster-secret-file".into(),
            c.secret_file.display().to_string(),
        ],
        Vec::new(),
        c.dir.path(),
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while c.smap().await.map_or(0, |m| m.pmap.len()) < 2
        || reqwest::get(format!("{second}/v1/health")).await.is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "second proxy did not join"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reader = c.add_user("reader", &["read:*"], false).await.unwrap();
    let reader = c.login("reader", &reader.password, "").await.unwrap();
    let send = |token: Option<String>, method: Method, path: &str, body: serde_json::Value| {
        let mut r = no_redirects()
            .request(method, format!("{second}{path}"))
            .json(&body);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        async move { r.send().await.unwrap() }
    };
    let create = serde_json::json!({"action": "create-bck"});
    let admin = Some(c.admin_token.clone());
    let r = send(
        admin.clone(),
        Method::POST,
        "/v1/buckets/fwd",
        create.clone(),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    let names = || async {
        let v: Vec<serde_json::Value> = c
            .http
            .get(c.url("/v1/buckets"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v.iter()
            .map(|b| b["name"].as_str().unwrap_or("").to_owned())
            .collect::<Vec<_>>()
    };
    assert!(names().await.contains(&"fwd".to_owned()));
    // The bucket is its creator's, whichever proxy the request came through, and a client
    // cannot claim to act for someone else.
    let cr = &c;
    let owner_of = |bucket: &'static str| async move {
        let bmd: serde_json::Value = cr
            .http
            .get(cr.url("/v1/cluster?what=bmd"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        bmd["buckets"]
            .as_object()
            .unwrap()
            .values()
            .find(|r| r["bck"]["name"] == bucket)
            .map(|r| r["props"]["owner"].as_str().unwrap_or("").to_owned())
    };
    assert_eq!(owner_of("fwd").await.as_deref(), Some("admin"));
    let forged = no_redirects()
        .post(format!("{second}/v1/buckets/fwd2"))
        .bearer_auth(&c.admin_token)
        .header("ais-on-behalf-of", "mallory")
        .json(&create)
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::OK);
    assert_eq!(owner_of("fwd2").await.as_deref(), Some("admin"));
    // Creating it again: the owner hears it has it; another admin, that it is taken.
    let again = send(
        admin.clone(),
        Method::POST,
        "/v1/buckets/fwd",
        create.clone(),
    )
    .await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    assert!(again.text().await.unwrap().contains("\"already_exists\""));
    let other = c.add_user("other-admin", &["admin"], false).await.unwrap();
    let other = c.login("other-admin", &other.password, "").await.unwrap();
    let taken = send(Some(other), Method::POST, "/v1/buckets/fwd", create.clone()).await;
    assert_eq!(taken.status(), StatusCode::CONFLICT);
    assert!(
        taken
            .text()
            .await
            .unwrap()
            .contains("\"bucket_already_exists\"")
    );
    // Opening a bucket to anonymous S3 reads is its owner's or an admin's, natively too.
    let writer = c
        .add_user("fwd-writer", &["write:fwd"], false)
        .await
        .unwrap();
    let writer = c.login("fwd-writer", &writer.password, "").await.unwrap();
    let open = serde_json::json!({"action": "set-bprops", "value": {"public": {"acl_read": true}}});
    let r = send(
        Some(writer.clone()),
        Method::PATCH,
        "/v1/buckets/fwd",
        open.clone(),
    )
    .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let mirror = serde_json::json!({"action": "set-bprops", "value": {"lru": {"enabled": false}}});
    let r = send(Some(writer), Method::PATCH, "/v1/buckets/fwd", mirror).await;
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    let r = send(admin.clone(), Method::PATCH, "/v1/buckets/fwd", open).await;
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    let deny = serde_json::json!({"action": "set-bprops", "value": {"public": {"policy":
        r#"{"Statement":[{"Effect":"Deny","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::fwd/*"}]}"#}}});
    let r = send(admin.clone(), Method::PATCH, "/v1/buckets/fwd", deny).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let etl = serde_json::json!({"name": "cat", "runtime": "command", "command": ["cat"]});
    let r = send(admin, Method::PUT, "/v1/etl", etl.clone()).await;
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    // The second proxy's gate decides with the client's token, before forwarding.
    let r = send(
        Some(reader),
        Method::POST,
        "/v1/buckets/nope",
        create.clone(),
    )
    .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = send(None, Method::PUT, "/v1/etl", etl).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(!names().await.contains(&"nope".to_owned()));
}

/// get-batch through the proxy with auth on: the redirect to the designated target is signed
/// for the path and the user (clients drop their token on it), and the target still checks
/// the user's rights on every bucket the body names; the signature opens nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn get_batch_redirects_are_signed_for_the_user() {
    let c = SecureCluster::start(SecureOptions {
        targets: 2,
        auth: true,
        ..Default::default()
    })
    .await
    .unwrap();
    for b in ["open", "closed"] {
        c.create_bucket(b).await.unwrap();
        for i in 0..6 {
            let r = c
                .http
                .put(c.url(&format!("/v1/objects/{b}/o{i}")))
                .body(format!("{b} {i}"))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success());
        }
    }
    let reader = c.add_user("batcher", &["read:open"], false).await.unwrap();
    let token = c.login("batcher", &reader.password, "").await.unwrap();
    // reqwest, like curl, drops Authorization on a redirect to another port.
    let follow = reqwest::Client::new();
    let batch = |bucket: &str| {
        let items: Vec<serde_json::Value> = (0..6)
            .map(|i| serde_json::json!({"objname": format!("o{i}"), "bucket": bucket}))
            .collect();
        follow
            .get(c.url("/v1/ml/moss"))
            .bearer_auth(&token)
            .json(&serde_json::json!({"in": items, "strm": true}))
    };
    let r = batch("open").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    assert!(r.bytes().await.unwrap().windows(6).any(|w| w == b"open 5"));
    let r = batch("closed").send().await.unwrap();
    assert_eq!(
        r.status(),
        StatusCode::FORBIDDEN,
        "the target checks every bucket"
    );

    // The signed URL: good for get-batch at that path, as that user, and nothing else.
    let no_follow = no_redirects();
    let r = no_follow
        .get(c.url("/v1/ml/moss"))
        .bearer_auth(&token)
        .json(&serde_json::json!({"in": [{"objname": "o1", "bucket": "open"}], "strm": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TEMPORARY_REDIRECT);
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    assert!(location.contains("gsig="), "{location}");
    let r = no_follow
        .get(&location)
        .json(&serde_json::json!({"in": [{"objname": "o2", "bucket": "open"}], "strm": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let (base, query) = location.split_once('?').unwrap();
    let elsewhere = format!("{base}/open?{query}");
    let r = no_follow
        .get(&elsewhere)
        .json(&serde_json::json!({"in": [{"objname": "o2"}], "strm": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "another path");
    let target = base.trim_end_matches("/v1/ml/moss");
    let r = no_follow
        .get(format!("{target}/v1/objects/open/o1?{query}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "an object GET");
}

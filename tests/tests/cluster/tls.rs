//! HTTPS with a test CA (auth on too): the Python SDK, `grist`, boto3 and s5cmd work over
//! TLS, nodes talk to each other over TLS, plain HTTP on a TLS port is refused, and SIGHUP
//! reloads the certificate.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gristmill_tests::secure::{SecureCluster, SecureOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn venv_bin(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join(".venv/bin")
        .join(name)
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The serial number of the certificate served on `addr`.
fn served_serial(addr: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo | openssl s_client -connect {addr} 2>/dev/null | openssl x509 -noout -serial"
        ))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The pid of the process whose command line has all of `parts`.
fn pid_of(parts: &[&str]) -> Option<i32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if parts.iter().all(|p| cmd.contains(p)) {
            return Some(pid);
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn https_for_sdk_cli_boto3_s5cmd_and_plain_http_is_refused() {
    let c = SecureCluster::start(SecureOptions {
        targets: 2,
        auth: true,
        tls: true,
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(c.endpoint.starts_with("https://"));
    let ca = c.ca.clone().unwrap();
    let ca_path = ca.ca.display().to_string();
    // Targets advertise HTTPS URLs; the proxy reached them over TLS to build this map.
    let smap = c.smap().await.unwrap();
    assert!(smap.tmap.values().all(|t| t.url().starts_with("https://")));
    c.create_bucket("tls").await.unwrap();
    let user = c.add_user("tlsuser", &["write:tls"], true).await.unwrap();
    let token = c.login("tlsuser", &user.password, "").await.unwrap();
    let dir = c.dir.path().to_owned();

    // Python SDK: put through the owner, get through the proxy's redirect, list.
    let py = format!(
        "import gristmill\n\
         c = gristmill.Client({ep:?}, token={token:?}, ca_bundle={ca_path:?})\n\
         b = c.bucket('tls')\n\
         b.object('py').put(b'from python')\n\
         assert b.object('py').get() == b'from python'\n\
         assert 'py' in [e.name for e in b.list_objects_iter()]\n\
         try:\n\
         \x20   gristmill.Client({ep:?}, token={token:?}).bucket('tls').object('py').get()\n\
         \x20   raise SystemExit('an unknown CA was trusted')\n\
         except SystemExit:\n\
         \x20   raise\n\
         except Exception:\n\
         \x20   pass\n\
         assert gristmill.Client({ep:?}, token={token:?}, insecure=True).bucket('tls').object('py').get() == b'from python'\n\
         print('sdk ok')\n",
        ep = c.endpoint
    );
    let out = run_ok(Command::new(venv_bin("python")).arg("-c").arg(&py));
    assert!(out.contains("sdk ok"));

    // grist with --ca-bundle (and --insecure); without either the certificate is refused.
    let grist = |args: &[&str]| {
        let mut cmd = Command::new(gristmill_tests::gristd_bin().with_file_name("grist"));
        cmd.args(args)
            .env("GRIST_ENDPOINT", &c.endpoint)
            .env("GRIST_TOKEN", &token)
            .env("GRIST_TOKEN_FILE", dir.join("no-token"));
        cmd
    };
    let file = dir.join("cli.txt");
    std::fs::write(&file, "from grist").unwrap();
    run_ok(&mut grist(&[
        "--ca-bundle",
        &ca_path,
        "put",
        file.to_str().unwrap(),
        "ais://tls/cli",
    ]));
    let got = run_ok(&mut grist(&[
        "--ca-bundle",
        &ca_path,
        "get",
        "ais://tls/cli",
        "-",
    ]));
    assert_eq!(got, "from grist");
    let got = run_ok(&mut grist(&["--insecure", "get", "ais://tls/py", "-"]));
    assert_eq!(got, "from python");
    let out = grist(&["ls", "ais://tls"]).output().unwrap();
    assert!(!out.status.success(), "grist trusted an unknown CA");

    // boto3 with verify=<CA>.
    let py = format!(
        "import boto3\n\
         s3 = boto3.client('s3', endpoint_url={ep:?}, verify={ca_path:?}, region_name='us-east-1',\n\
         \x20   aws_access_key_id={ak:?}, aws_secret_access_key={sk:?})\n\
         s3.put_object(Bucket='tls', Key='boto', Body=b'from boto3')\n\
         assert s3.get_object(Bucket='tls', Key='boto')['Body'].read() == b'from boto3'\n\
         keys = [o['Key'] for o in s3.list_objects_v2(Bucket='tls')['Contents']]\n\
         assert 'boto' in keys and 'py' in keys, keys\n\
         print('boto3 ok')\n",
        ep = c.endpoint,
        ak = user.s3_access_key,
        sk = user.s3_secret_key
    );
    let out = run_ok(Command::new(venv_bin("python")).arg("-c").arg(&py));
    assert!(out.contains("boto3 ok"));

    // s5cmd with the CA from the environment.
    let s5 = |args: &[&str]| {
        let mut cmd = Command::new(venv_bin("s5cmd"));
        cmd.arg("--endpoint-url")
            .arg(&c.endpoint)
            .args(args)
            .env("AWS_ACCESS_KEY_ID", &user.s3_access_key)
            .env("AWS_SECRET_ACCESS_KEY", &user.s3_secret_key)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_CA_BUNDLE", &ca_path)
            .env("SSL_CERT_FILE", &ca_path);
        cmd
    };
    run_ok(&mut s5(&["cp", file.to_str().unwrap(), "s3://tls/s5"]));
    let listing = run_ok(&mut s5(&["ls", "s3://tls/"]));
    assert!(
        listing.contains("s5") && listing.contains("boto"),
        "{listing}"
    );
    let got = run_ok(&mut s5(&["cat", "s3://tls/s5"]));
    assert_eq!(got, "from grist");

    // Plain HTTP on the TLS ports: a clear 400 in plain text, never served.
    let proxy_addr = c.endpoint.trim_start_matches("https://").to_owned();
    let target_addr = smap
        .tmap
        .values()
        .next()
        .unwrap()
        .url()
        .trim_start_matches("https://")
        .to_owned();
    for addr in [&proxy_addr, &target_addr] {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /v1/objects/tls/py HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("HTTP/1.1 400"), "{addr}: {text}");
        assert!(text.contains("HTTPS only"), "{text}");
        assert!(!text.contains("from python"));
    }
    let r = reqwest::get(format!("http://{proxy_addr}/v1/health"))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);

    // SIGHUP reloads the certificate: a new serial is served, old connections are not needed.
    let before = served_serial(&proxy_addr);
    assert_eq!(before, "serial=01");
    let tls_dir = ca.ca.parent().unwrap().to_owned();
    ca.issue(&tls_dir, "next", 2).unwrap();
    std::fs::copy(tls_dir.join("next.pem"), &ca.cert).unwrap();
    std::fs::copy(tls_dir.join("next.key"), &ca.key).unwrap();
    let state = c.dir.path().join("proxy").display().to_string();
    let pid = pid_of(&["gristd", "proxy", &state]).expect("proxy pid");
    nix_kill_hup(pid);
    let deadline = Instant::now() + Duration::from_secs(10);
    while served_serial(&proxy_addr) != "serial=02" {
        assert!(
            Instant::now() < deadline,
            "the proxy did not reload its certificate"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Still serving, with the new certificate from the same CA.
    let r = c.http.get(c.url("/v1/health")).send().await.unwrap();
    assert!(r.status().is_success());
}

fn nix_kill_hup(pid: i32) {
    let st = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

//! Clusters with access control and/or TLS on, for the auth and TLS tests: a cluster secret
//! written by the test, the first admin's password read from the proxy's log (where it is
//! printed once), and a test CA made with the `openssl` command.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use gristmill_core::users::{NewCredentials, TokenResponse, UserSpec};

use crate::{Cluster, NodeProcess, free_port};

/// A throwaway CA and one server certificate for 127.0.0.1 / localhost signed by it.
#[derive(Debug, Clone)]
pub struct TestCa {
    /// The CA certificate (PEM): what clients trust.
    pub ca: PathBuf,
    /// The server certificate (PEM) and its key, used by every node.
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn openssl(args: &[&str], dir: &Path) -> anyhow::Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .context("running openssl")?;
    if !out.status.success() {
        bail!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

impl TestCa {
    /// Generates a CA and a server certificate in `dir`. With `name`, files are prefixed
    /// (a second certificate for the reload test).
    pub fn generate(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        let mut args = vec!["req", "-x509", "-nodes", "-days", "2"];
        args.extend(ec);
        args.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-subj",
            "/CN=gristmill test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(&args, dir)?;
        let ca = Self {
            ca: dir.join("ca.pem"),
            cert: dir.join("node.pem"),
            key: dir.join("node.key"),
        };
        ca.issue(dir, "node", 1)?;
        Ok(ca)
    }

    /// Issues `<name>.pem` / `<name>.key` for 127.0.0.1 and localhost, with a serial number
    /// (so a reloaded certificate is told apart).
    pub fn issue(&self, dir: &Path, name: &str, serial: u32) -> anyhow::Result<()> {
        let mut args = vec!["req", "-nodes"];
        args.extend(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]);
        let key = format!("{name}.key");
        let csr = format!("{name}.csr");
        let pem = format!("{name}.pem");
        args.extend(["-keyout", &key, "-out", &csr, "-subj", "/CN=127.0.0.1"]);
        openssl(&args, dir)?;
        std::fs::write(
            dir.join("ext.cnf"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )?;
        let serial = serial.to_string();
        openssl(
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-set_serial",
                &serial,
                "-days",
                "2",
                "-out",
                &pem,
                "-extfile",
                "ext.cnf",
            ],
            dir,
        )
    }
}

/// What to turn on.
#[derive(Debug, Clone, Default)]
pub struct SecureOptions {
    pub targets: usize,
    pub auth: bool,
    pub tls: bool,
    /// Extra arguments for every node (e.g. `--redirect-ttl 2s`).
    pub node_args: Vec<String>,
    /// Extra environment for every node.
    pub env: Vec<(String, String)>,
    /// Extra arguments for target i (`target_args[i]`, when there is one).
    pub target_args: Vec<Vec<String>>,
}

/// A running cluster with auth and/or TLS, and what its tests need to reach it.
pub struct SecureCluster {
    /// The cluster; its `http` client trusts the test CA and sends the admin's token.
    pub cluster: Cluster,
    pub admin_password: String,
    pub admin_token: String,
    /// The cluster secret (tests mint foreign or expired tokens with other secrets).
    pub secret_file: PathBuf,
    pub ca: Option<TestCa>,
}

impl std::ops::Deref for SecureCluster {
    type Target = Cluster;
    fn deref(&self) -> &Cluster {
        &self.cluster
    }
}

impl std::ops::DerefMut for SecureCluster {
    fn deref_mut(&mut self) -> &mut Cluster {
        &mut self.cluster
    }
}

/// A reqwest client trusting `ca`, sending `token` when given.
pub fn client(ca: Option<&TestCa>, token: Option<&str>) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .tcp_nodelay(true)
        .redirect(reqwest::redirect::Policy::limited(5));
    if let Some(ca) = ca {
        let pem = std::fs::read(&ca.ca).expect("reading the test CA");
        b = b.add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("test CA"));
    }
    if let Some(t) = token {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {t}").parse().expect("token header"),
        );
        b = b.default_headers(h);
    }
    b.build().expect("client")
}

/// The first admin's password, from the proxy log line printed once.
fn admin_password_from_log(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("password: "))
        .map(|p| p.trim().to_owned())
}

impl SecureCluster {
    pub async fn start(opts: SecureOptions) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("gristmill-secure-")
            .tempdir()?;
        let port = free_port();
        let ca = if opts.tls {
            Some(TestCa::generate(&dir.path().join("tls"))?)
        } else {
            None
        };
        let scheme = if opts.tls { "https" } else { "http" };
        let endpoint = format!("{scheme}://127.0.0.1:{port}");
        let secret_file = dir.path().join("cluster.secret");
        let mut common: Vec<String> = Vec::new();
        if opts.auth {
            let secret: String = (0..32)
                .map(|_| format!("{:02x}", rand::random::<u8>()))
                .collect();
            std::fs::write(&secret_file, secret)?;
            common.extend([
                "--auth".into(),
                "--cluster-secret-file".into(),
                secret_file.display().to_string(),
            ]);
        }
        if let Some(ca) = &ca {
            common.extend([
                "--tls-cert".into(),
                ca.cert.display().to_string(),
                "--tls-key".into(),
                ca.key.display().to_string(),
                "--tls-ca".into(),
                ca.ca.display().to_string(),
            ]);
        }
        common.extend(opts.node_args.iter().cloned());
        let mut proxy_args: Vec<String> = vec![
            "proxy".into(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--state-dir".into(),
            dir.path().join("proxy").display().to_string(),
        ];
        proxy_args.extend(common.iter().cloned());
        let proxy = NodeProcess::spawn("proxy", proxy_args, opts.env.clone(), dir.path())?;
        let mut targets = Vec::new();
        let mut mountpaths = Vec::new();
        for i in 0..opts.targets {
            let state = dir.path().join(format!("target-{i}"));
            let mp = state.join("mp0");
            let mut args: Vec<String> = vec![
                "target".into(),
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--state-dir".into(),
                state.display().to_string(),
                "--join".into(),
                endpoint.clone(),
                "--mountpath".into(),
                mp.display().to_string(),
            ];
            args.extend(common.iter().cloned());
            args.extend(opts.target_args.get(i).into_iter().flatten().cloned());
            targets.push(NodeProcess::spawn(
                &format!("target-{i}"),
                args,
                opts.env.clone(),
                dir.path(),
            )?);
            mountpaths.push(vec![mp]);
        }
        let (admin_password, admin_token) = if opts.auth {
            let log = dir.path().join("proxy.log");
            let deadline = Instant::now() + Duration::from_secs(30);
            let password = loop {
                if let Some(p) = admin_password_from_log(&log) {
                    break p;
                }
                if Instant::now() > deadline {
                    bail!("the proxy printed no admin password:\n{}", proxy.log_tail());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            let token = login_at(&endpoint, ca.as_ref(), "admin", &password, "").await?;
            (password, token)
        } else {
            (String::new(), String::new())
        };
        let token = (!admin_token.is_empty()).then_some(admin_token.as_str());
        let cluster = Cluster {
            dir,
            endpoint,
            proxy,
            targets,
            mountpaths,
            http: client(ca.as_ref(), token),
        };
        cluster.wait_for_targets(opts.targets).await?;
        Ok(Self {
            cluster,
            admin_password,
            admin_token,
            secret_file,
            ca,
        })
    }

    /// A client of this cluster (trusting its CA) with `token`, or none.
    pub fn client(&self, token: Option<&str>) -> reqwest::Client {
        client(self.ca.as_ref(), token)
    }

    pub async fn login(&self, name: &str, password: &str, ttl: &str) -> anyhow::Result<String> {
        login_at(&self.endpoint, self.ca.as_ref(), name, password, ttl).await
    }

    /// Creates a user as the admin; returns its one-time credentials.
    pub async fn add_user(
        &self,
        name: &str,
        roles: &[&str],
        s3_key: bool,
    ) -> anyhow::Result<NewCredentials> {
        let spec = UserSpec {
            roles: roles
                .iter()
                .map(|r| r.parse())
                .collect::<Result<_, _>>()
                .map_err(|e: gristmill_core::ApiError| anyhow::anyhow!(e.message))?,
            password: String::new(),
            s3_key,
        };
        let r = self
            .http
            .put(self.url(&format!("/v1/auth/users/{name}")))
            .json(&spec)
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("adding user {name}: {} {}", r.status(), r.text().await?);
        }
        Ok(r.json().await?)
    }
}

pub async fn login_at(
    endpoint: &str,
    ca: Option<&TestCa>,
    name: &str,
    password: &str,
    ttl: &str,
) -> anyhow::Result<String> {
    let r = client(ca, None)
        .post(format!("{endpoint}/v1/auth/login"))
        .json(&serde_json::json!({"name": name, "password": password, "ttl": ttl}))
        .send()
        .await?;
    if !r.status().is_success() {
        bail!("login {name}: {} {}", r.status(), r.text().await?);
    }
    let t: TokenResponse = r.json().await?;
    Ok(t.token)
}

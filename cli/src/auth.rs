//! `grist auth ...`: log in, tokens, users; and the connection flags every `grist` command
//! takes (`--token`, `--ca-bundle`, `--insecure`).
//!
//! `grist auth login` stores the token in the credential file of `gristmill_client::credentials`
//! (`$GRIST_TOKEN_FILE`, else `$XDG_CONFIG_HOME/grist/token`, else `~/.config/grist/token`,
//! mode 0600); every later command sends it unless `--token` / `$GRIST_TOKEN` says otherwise.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use comfy_table::{Table, presets::NOTHING};
use gristmill_client::credentials::{save_token, saved_token};
use gristmill_client::{Client, ClientOptions, Method};
use gristmill_core::users::{
    LoginRequest, NewCredentials, TokenRequest, TokenResponse, UserInfo, UserSpec,
};

/// Connection flags of every `grist` command.
#[derive(Args, Debug, Clone, Default)]
pub struct ConnArgs {
    /// Bearer token (default: the one `grist auth login` saved).
    #[arg(long, global = true, env = "GRIST_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// PEM bundle of CAs to trust for HTTPS endpoints.
    #[arg(long, global = true, env = "GRIST_CA_BUNDLE")]
    pub ca_bundle: Option<PathBuf>,
    /// Do not verify the cluster's TLS certificate (tests only).
    #[arg(long, global = true, env = "GRIST_INSECURE")]
    pub insecure: bool,
    /// Give up on a connection not made within this long.
    #[arg(
        long,
        global = true,
        env = "GRIST_CONNECT_TIMEOUT",
        default_value = "10s"
    )]
    pub connect_timeout: String,
    /// Give up on a request whose answer has not begun this long after it was sent (the
    /// upload included), or whose answer then stalls this long; off by default (0), since
    /// uploads and long actions take as long as they take.
    #[arg(long, global = true, env = "GRIST_READ_TIMEOUT", default_value = "0")]
    pub read_timeout: String,
}

/// Where `grist auth login` saves the token: `$GRIST_TOKEN_FILE`, else
/// `$XDG_CONFIG_HOME/grist/token`, else `~/.config/grist/token`.
pub fn token_path() -> std::path::PathBuf {
    let var = |k| std::env::var_os(k).map(std::path::PathBuf::from);
    gristmill_client::credentials::token_path(
        var("GRIST_TOKEN_FILE"),
        var("XDG_CONFIG_HOME"),
        var("HOME"),
    )
}

impl ConnArgs {
    /// Client options: the token from the flag, the environment or the saved file; the
    /// timeouts (`0` turns one off).
    pub fn client_options(&self) -> anyhow::Result<ClientOptions> {
        let token = self
            .token
            .clone()
            .filter(|t| !t.is_empty())
            .or_else(|| saved_token(&token_path()));
        let timeout = |flag: &str, v: &str| -> anyhow::Result<Option<std::time::Duration>> {
            let d = gristmill_core::time::parse_duration(v)
                .map_err(|e| anyhow::anyhow!("--{flag} {v}: {}", e.message))?;
            Ok((!d.is_zero()).then_some(d))
        };
        Ok(ClientOptions {
            token,
            ca_bundle: self.ca_bundle.clone(),
            insecure: self.insecure,
            connect_timeout: timeout("connect-timeout", &self.connect_timeout)?,
            read_timeout: timeout("read-timeout", &self.read_timeout)?,
        })
    }
}

#[derive(Subcommand, Debug)]
pub enum AuthCmd {
    /// Log in and save a token for later commands.
    Login {
        name: String,
        /// Password (default: $GRIST_PASSWORD, else read from stdin).
        #[arg(long, env = "GRIST_PASSWORD", hide_env_values = true)]
        password: Option<String>,
        /// Token lifetime, e.g. 12h or 30d (default 24h).
        #[arg(long, default_value = "")]
        ttl: String,
    },
    /// Forget the saved token.
    Logout,
    /// Print a fresh token (for scripts, SDKs, Prometheus); admins may name another user.
    Token {
        #[arg(long)]
        user: Option<String>,
        #[arg(long, default_value = "")]
        ttl: String,
    },
    /// Who the current token belongs to.
    Whoami,
    /// Users: add, remove, list.
    #[command(subcommand)]
    User(UserCmd),
}

#[derive(Subcommand, Debug)]
pub enum UserCmd {
    /// Create a user; a generated password (and S3 secret) is printed once.
    Add {
        name: String,
        /// Role: admin, cluster-read, read:<bucket>, write:<bucket> (repeat for several;
        /// <bucket> is a name, ais://name, a prefix*, or *).
        #[arg(long = "role", required = true)]
        roles: Vec<String>,
        /// Choose the password instead of generating one.
        #[arg(long, env = "GRIST_NEW_PASSWORD", hide_env_values = true)]
        password: Option<String>,
        /// Also issue an S3 access key for the user.
        #[arg(long)]
        s3_key: bool,
    },
    /// Remove a user (its tokens and S3 keys stop working).
    Rm { name: String },
    /// List users and their roles.
    Ls,
}

/// Reads a password from stdin; on a terminal with echo off (turned off before the prompt
/// is shown, back on when this returns).
fn read_password() -> anyhow::Result<String> {
    let hidden = EchoOff::on_terminal();
    eprint!("password: ");
    std::io::stderr().flush().ok();
    let mut line = String::new();
    let read = std::io::stdin().read_line(&mut line);
    if hidden.is_some() {
        eprintln!(); // the newline the terminal did not echo
    }
    drop(hidden);
    read?;
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

/// A terminal's echo, turned off while this lives (stdin only, when it is a terminal).
struct EchoOff {
    saved: nix::sys::termios::Termios,
}

impl EchoOff {
    fn on_terminal() -> Option<Self> {
        use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
        use std::io::IsTerminal;
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return None;
        }
        let saved = tcgetattr(&stdin).ok()?;
        let mut quiet = saved.clone();
        quiet.local_flags.remove(LocalFlags::ECHO);
        tcsetattr(&stdin, SetArg::TCSANOW, &quiet).ok()?;
        Some(Self { saved })
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        use nix::sys::termios::{SetArg, tcsetattr};
        let _ = tcsetattr(std::io::stdin(), SetArg::TCSANOW, &self.saved);
    }
}

fn expiry(secs: u64) -> String {
    gristmill_core::time::rfc3339_from_ns((secs as i64).saturating_mul(1_000_000_000))
}

pub async fn run(client: &Client, cmd: AuthCmd, json: bool) -> anyhow::Result<()> {
    match cmd {
        AuthCmd::Login {
            name,
            password,
            ttl,
        } => {
            let password = match password {
                Some(p) => p,
                None => read_password()?,
            };
            let body = LoginRequest {
                name: name.clone(),
                password,
                ttl,
            };
            let resp = Client::send(client.request(Method::POST, "/v1/auth/login").json(&body))
                .await
                .context("login failed")?;
            let t: TokenResponse = resp.json().await?;
            let path = save_token(&token_path(), &t.token)?;
            if json {
                println!(
                    "{}",
                    serde_json::json!({"user": t.user, "expires": t.expires, "token_file": path})
                );
            } else {
                println!(
                    "logged in as {}; token saved to {} (expires {})",
                    t.user,
                    path.display(),
                    expiry(t.expires)
                );
            }
        }
        AuthCmd::Logout => {
            let path = token_path();
            match std::fs::remove_file(&path) {
                Ok(()) => crate::report(
                    json,
                    format!("token {} removed", path.display()),
                    serde_json::json!({"token_file": path, "removed": true}),
                ),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => crate::report(
                    json,
                    "not logged in",
                    serde_json::json!({"token_file": path, "removed": false}),
                ),
                Err(e) => return Err(e.into()),
            }
        }
        AuthCmd::Token { user, ttl } => {
            let body = TokenRequest {
                name: user.unwrap_or_default(),
                ttl,
            };
            let resp =
                Client::send(client.request(Method::POST, "/v1/auth/token").json(&body)).await?;
            let t: TokenResponse = resp.json().await?;
            if json {
                println!("{}", serde_json::to_string(&t)?);
            } else {
                println!("{}", t.token);
            }
        }
        AuthCmd::Whoami => {
            let resp = Client::send(client.request(Method::GET, "/v1/auth/whoami")).await?;
            let me: serde_json::Value = resp.json().await?;
            if json {
                println!("{me}");
            } else {
                let roles: Vec<String> = me["roles"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r.as_str().map(str::to_owned))
                    .collect();
                println!(
                    "{} ({})",
                    me["name"].as_str().unwrap_or("?"),
                    roles.join(", ")
                );
            }
        }
        AuthCmd::User(UserCmd::Add {
            name,
            roles,
            password,
            s3_key,
        }) => {
            let roles = roles
                .iter()
                .map(|r| r.parse())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e: gristmill_core::ApiError| anyhow::anyhow!(e.message))?;
            let spec = UserSpec {
                roles,
                password: password.unwrap_or_default(),
                s3_key,
            };
            let path = format!(
                "/v1/auth/users/{}",
                gristmill_core::name::encode_path(&name)
            );
            let resp = Client::send(client.request(Method::PUT, &path).json(&spec)).await?;
            let c: NewCredentials = resp.json().await?;
            if json {
                println!("{}", serde_json::to_string(&c)?);
            } else {
                println!("user {} created", c.name);
                if !c.password.is_empty() {
                    println!("  password: {} (shown once)", c.password);
                }
                if !c.s3_access_key.is_empty() {
                    println!("  S3 access key: {}", c.s3_access_key);
                    println!("  S3 secret key: {} (shown once)", c.s3_secret_key);
                }
            }
        }
        AuthCmd::User(UserCmd::Rm { name }) => {
            let path = format!(
                "/v1/auth/users/{}",
                gristmill_core::name::encode_path(&name)
            );
            Client::send(client.request(Method::DELETE, &path)).await?;
            crate::report(
                json,
                format!("user {name} removed"),
                serde_json::json!({"user": name, "removed": true}),
            );
        }
        AuthCmd::User(UserCmd::Ls) => {
            let resp = Client::send(client.request(Method::GET, "/v1/auth/users")).await?;
            let users: Vec<UserInfo> = resp.json().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&users)?);
                return Ok(());
            }
            if users.is_empty() {
                bail!("no users (is auth on?)");
            }
            let mut t = Table::new();
            t.load_preset(NOTHING)
                .set_header(["NAME", "ROLES", "S3 KEYS", "CREATED"]);
            for u in users {
                let roles: Vec<String> = u.roles.iter().map(|r| r.to_string()).collect();
                t.add_row([
                    u.name,
                    roles.join(","),
                    u.s3_access_keys.join(","),
                    u.created,
                ]);
            }
            println!("{t}");
        }
    }
    Ok(())
}

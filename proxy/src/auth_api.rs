//! Users, logins and tokens on the proxy (`/v1/auth/...`), the first admin of a new cluster,
//! and the gate in front of the whole proxy API (see `gristmill_node::auth`).
//!
//! Users live in the bucket metadata, so they are versioned, persisted and pushed to every
//! node like buckets: a target checks a token against the same list the proxy does. Only the
//! primary changes them; any proxy logs users in (the verifiers are everywhere).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use gristmill_core::users::{
    self, LoginRequest, NewCredentials, Role, TokenRequest, TokenResponse, User, UserSpec,
};
use gristmill_core::{ApiError, ErrorKind};
use gristmill_node::auth::{self, Gate, Keys, Principal};

use crate::meta::{Changed, Proxy};

type ApiResult = Result<Response, ApiError>;

/// The proxy API with the auth endpoints added and, when auth is on, behind the gate.
pub(crate) fn secure(proxy: &Arc<Proxy>, app: Router) -> Router {
    // Forwarding to the primary runs inside the gate: this proxy checks the client first.
    let app = crate::forward::to_primary(proxy, app.merge(routes(proxy.clone())));
    let Some(keys) = proxy.auth.clone() else {
        return app;
    };
    let p = proxy.clone();
    let fresh = proxy.clone();
    let current = proxy.clone();
    Gate::new(keys, auth::PROXY_ROUTES, Arc::new(move || p.bmd()))
        .with_refresh(Arc::new(move || {
            let p = fresh.clone();
            Box::pin(async move {
                // Without a quorum the token is judged on what this proxy has applied.
                let _ = p.linearize().await;
            })
        }))
        .with_fresh(Arc::new(move || {
            let p = current.clone();
            Box::pin(async move { p.ensure_fresh().await.map_err(|e| e.message) })
        }))
        .protect(app)
}

fn routes(proxy: Arc<Proxy>) -> Router {
    Router::new()
        .route("/v1/auth/login", post(login))
        .route("/v1/auth/token", post(token))
        .route("/v1/auth/whoami", get(whoami))
        .route("/v1/auth/users", get(list_users))
        .route("/v1/auth/users/{name}", delete(remove_user).put(add_user))
        .layer(axum::middleware::from_fn(
            gristmill_node::server::track_requests,
        ))
        .with_state(proxy)
}

fn keys(p: &Proxy) -> Result<Arc<Keys>, ApiError> {
    p.auth.clone().ok_or_else(|| {
        ApiError::bad_request("auth is off on this cluster (start the proxy with --auth)")
    })
}

fn ttl(s: &str) -> Result<Duration, ApiError> {
    if s.is_empty() {
        return Ok(auth::DEFAULT_TOKEN_TTL);
    }
    let d = gristmill_core::time::parse_duration(s)?;
    if d.is_zero() || d > auth::MAX_TOKEN_TTL {
        return Err(ApiError::bad_request(format!(
            "token lifetime {s:?} out of range (1s to 366d)"
        )));
    }
    Ok(d)
}

fn token_response(keys: &Keys, user: &User, ttl: Duration) -> ApiResult {
    let (token, expires) = keys.issue_token(user, ttl)?;
    Ok(axum::Json(TokenResponse {
        token,
        user: user.name.clone(),
        expires,
    })
    .into_response())
}

fn json_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("invalid body: {e}")))
}

async fn read_body(req: Request) -> Result<axum::body::Bytes, ApiError> {
    axum::body::to_bytes(req.into_body(), 64 << 10)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading body: {e}")))
}

/// `POST /v1/auth/login {"name","password","ttl"}` → a token.
async fn login(State(p): State<Arc<Proxy>>, req: Request) -> ApiResult {
    let keys = keys(&p)?;
    let body: LoginRequest = json_body(&read_body(req).await?)?;
    let ttl = ttl(&body.ttl)?;
    let mut user = p.bmd().users.get(&body.name).cloned();
    if user.is_none() {
        // Maybe created through another proxy moments ago: a linearizable read settles it.
        p.linearize().await?;
        user = p.bmd().users.get(&body.name).cloned();
    }
    let verified = match &user {
        Some(User {
            password: Some(hash),
            ..
        }) => {
            let (k, pw, hash) = (keys.clone(), body.password.clone(), hash.clone());
            tokio::task::spawn_blocking(move || k.verify_password(&pw, &hash))
                .await
                .unwrap_or(false)
        }
        _ => false,
    };
    match user {
        Some(user) if verified => {
            tracing::info!(target: "audit", user = %user.name, "login");
            token_response(&keys, &user, ttl)
        }
        _ => {
            // Slow down guessing; say nothing about which half was wrong.
            tracing::warn!(target: "audit", user = %body.name, "login failed");
            tokio::time::sleep(Duration::from_millis(250)).await;
            Err(ApiError::new(
                ErrorKind::Unauthorized,
                "invalid user name or password",
            ))
        }
    }
}

fn principal(req: &Request) -> Option<Principal> {
    req.extensions().get::<Principal>().cloned()
}

/// `POST /v1/auth/token {"ttl","name"}`: a fresh token for the caller (admins: for anyone).
async fn token(State(p): State<Arc<Proxy>>, req: Request) -> ApiResult {
    let keys = keys(&p)?;
    let caller = principal(&req);
    let body: TokenRequest = match read_body(req).await? {
        b if b.is_empty() => TokenRequest::default(),
        b => json_body(&b)?,
    };
    let bmd = p.bmd();
    let (caller_name, caller_admin) = match &caller {
        Some(Principal::User(n)) => (n.clone(), bmd.users.get(n).is_some_and(|u| u.is_admin())),
        Some(Principal::Node(_)) => (String::new(), true),
        None => return Err(ApiError::new(ErrorKind::Unauthorized, "log in first")),
    };
    let name = if body.name.is_empty() {
        caller_name.clone()
    } else {
        body.name.clone()
    };
    if name != caller_name && !caller_admin {
        return Err(ApiError::new(
            ErrorKind::Forbidden,
            "only admins issue tokens for other users",
        ));
    }
    let user = bmd
        .users
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("no such user {name:?}")))?;
    tracing::info!(target: "audit", caller = %caller_name, user = %name, ttl = %body.ttl, "token issued");
    token_response(&keys, user, ttl(&body.ttl)?)
}

/// `GET /v1/auth/whoami`: the caller's name and roles.
async fn whoami(State(p): State<Arc<Proxy>>, req: Request) -> ApiResult {
    keys(&p)?;
    match principal(&req) {
        Some(Principal::User(name)) => {
            let bmd = p.bmd();
            let user = bmd
                .users
                .get(&name)
                .ok_or_else(|| ApiError::not_found(format!("no such user {name:?}")))?;
            Ok(axum::Json(user.redacted()).into_response())
        }
        Some(Principal::Node(id)) => {
            Ok(axum::Json(serde_json::json!({"name": id, "roles": ["node"]})).into_response())
        }
        None => Err(ApiError::new(ErrorKind::Unauthorized, "log in first")),
    }
}

/// `GET /v1/auth/users`: every user, without credentials.
async fn list_users(State(p): State<Arc<Proxy>>) -> ApiResult {
    p.linearize().await?;
    keys(&p)?;
    let list: Vec<users::UserInfo> = p.bmd().users.values().map(User::redacted).collect();
    Ok(axum::Json(list).into_response())
}

/// `PUT /v1/auth/users/{name} {"roles":[...],"password":"","s3_key":true}`: creates a user;
/// the generated password and S3 secret are in the answer, and nowhere else.
async fn add_user(
    State(p): State<Arc<Proxy>>,
    Path(name): Path<String>,
    req: Request,
) -> ApiResult {
    let keys = keys(&p)?;
    users::validate_user_name(&name)?;
    let spec: UserSpec = json_body(&read_body(req).await?)?;
    let created = create_user(&p, &keys, &name, spec).await?;
    // A user re-created with other roles or password revokes the old tokens.
    p.wait_followers_applied().await;
    Ok((StatusCode::CREATED, axum::Json(created)).into_response())
}

async fn create_user(
    p: &Proxy,
    keys: &Arc<Keys>,
    name: &str,
    spec: UserSpec,
) -> Result<NewCredentials, ApiError> {
    if spec.roles.is_empty() {
        return Err(ApiError::bad_request(
            "give the user at least one role (admin, cluster-read, read:<bucket>, write:<bucket>)",
        ));
    }
    let (password, generated) = if spec.password.is_empty() {
        (auth::generate_password(), true)
    } else if spec.password.len() < 8 {
        return Err(ApiError::bad_request(
            "passwords have at least 8 characters",
        ));
    } else {
        (spec.password.clone(), false)
    };
    let k = keys.clone();
    let pw = password.clone();
    let hash = tokio::task::spawn_blocking(move || k.hash_password(&pw))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let s3 = spec.s3_key.then(|| keys.new_s3_key());
    let mut roles: Vec<Role> = spec.roles.clone();
    roles.sort();
    roles.dedup();
    let user_name = name.to_owned();
    let s3_key = s3.clone();
    p.change(move |_, bmd| {
        if bmd.users.contains_key(&user_name) {
            return Err(ApiError::new(
                ErrorKind::AlreadyExists,
                format!("user {user_name:?} already exists (remove it first)"),
            ));
        }
        let user = User {
            name: user_name.clone(),
            roles,
            password: Some(hash),
            s3_keys: s3_key.into_iter().collect(),
            // Unique and increasing: a re-created user never accepts an old token.
            generation: bmd.version + 1,
            created: gristmill_core::time::rfc3339_from_ns(crate::meta::now_ns()),
        };
        bmd.users.insert(user_name.clone(), user);
        Ok(Changed {
            smap: false,
            bmd: true,
        })
    })
    .await?;
    tracing::info!(target: "audit", user = %name, roles = ?spec.roles, "user created");
    Ok(NewCredentials {
        name: name.to_owned(),
        password: if generated { password } else { String::new() },
        s3_access_key: s3
            .as_ref()
            .map(|k| k.access_key.clone())
            .unwrap_or_default(),
        s3_secret_key: s3.as_ref().map(|k| keys.s3_secret(k)).unwrap_or_default(),
    })
}

/// `DELETE /v1/auth/users/{name}`: removes a user (its tokens and S3 keys stop working on
/// every node as the metadata arrives). The last admin cannot be removed.
async fn remove_user(State(p): State<Arc<Proxy>>, Path(name): Path<String>) -> ApiResult {
    keys(&p)?;
    let target = name.clone();
    p.change(move |_, bmd| {
        let user = bmd
            .users
            .get(&target)
            .ok_or_else(|| ApiError::not_found(format!("no such user {target:?}")))?;
        let admins = bmd.users.values().filter(|u| u.is_admin()).count();
        if user.is_admin() && admins == 1 {
            return Err(ApiError::new(
                ErrorKind::Conflict,
                "cannot remove the last admin",
            ));
        }
        bmd.users.remove(&target);
        Ok(Changed {
            smap: false,
            bmd: true,
        })
    })
    .await?;
    // Acknowledged once no proxy can still accept its tokens on state from before.
    p.wait_followers_applied().await;
    tracing::info!(target: "audit", user = %name, "user removed");
    Ok(StatusCode::OK.into_response())
}

/// On the primary of a cluster with auth on and no users yet: creates `admin` and prints its
/// password once (`chosen` when set, else generated).
pub(crate) async fn bootstrap(p: &Arc<Proxy>, chosen: Option<&str>) -> anyhow::Result<()> {
    let Some(keys) = p.auth.clone() else {
        return Ok(());
    };
    if !p.is_primary() || !p.bmd().users.is_empty() {
        return Ok(());
    }
    let chosen = chosen.unwrap_or_default().to_owned();
    let spec = UserSpec {
        roles: vec![Role::Admin],
        password: chosen.clone(),
        s3_key: true,
    };
    let creds = create_user(p, &keys, "admin", spec)
        .await
        .map_err(|e| anyhow::anyhow!("creating the first admin: {e}"))?;
    let password = if chosen.is_empty() {
        creds.password.as_str()
    } else {
        "(from GRISTD_ADMIN_PASSWORD)"
    };
    // Printed once, on stdout: it is not stored anywhere in the clear.
    println!(
        "Gristmill auth is on. First admin credential (shown once, store it now):\n  \
         user: admin\n  password: {password}\n  S3 access key: {}\n  S3 secret key: {}\n  \
         log in: grist auth login admin",
        creds.s3_access_key, creds.s3_secret_key
    );
    tracing::warn!("created the first admin user; its credentials were printed on stdout once");
    Ok(())
}

//! CORS for browsers that talk S3: Put/Get/DeleteBucketCors keep a bucket's rules (bucket
//! property `s3.cors`), OPTIONS preflights are answered from them before any signature check
//! (browsers send none), and every other answer to a request with an `Origin` carries the
//! `Access-Control-*` headers of the first rule that allows it — the rules S3 documents:
//! an origin or header pattern may hold one `*`; the method is the preflight's
//! `Access-Control-Request-Method`, else the request's own.

use super::common::*;
use gristmill_core::api::{CorsRule, S3BucketProps};
use http::{HeaderMap, Method, StatusCode};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

/// Methods a CORS rule may allow.
const METHODS: &[&str] = &["GET", "PUT", "HEAD", "POST", "DELETE"];
/// Most rules in one configuration (S3's limit).
const MAX_RULES: usize = 100;

pub(super) async fn put_bucket_cors(
    s: &GristS3,
    req: S3Request<PutBucketCorsInput>,
) -> S3Result<S3Response<PutBucketCorsOutput>> {
    let (bck, _) = super::public::administered(
        s,
        &req.input.bucket,
        req.credentials.as_ref(),
        Some("s3:PutBucketCORS"),
    )
    .await?;
    let rules = &req.input.cors_configuration.cors_rules;
    if rules.is_empty() || rules.len() > MAX_RULES {
        return Err(s3_error!(
            MalformedXML,
            "a CORS configuration has 1 to {MAX_RULES} rules"
        ));
    }
    let mut kept = Vec::with_capacity(rules.len());
    for r in rules {
        if let Some(m) = r
            .allowed_methods
            .iter()
            .find(|m| !METHODS.contains(&m.as_str()))
        {
            return Err(s3_error!(
                InvalidRequest,
                "Found unsupported HTTP method in CORS config. Unsupported method is {m}"
            ));
        }
        let one_wildcard = |p: &String| p.matches('*').count() <= 1;
        if let Some(o) = r.allowed_origins.iter().find(|o| !one_wildcard(o)) {
            return Err(s3_error!(
                InvalidRequest,
                "AllowedOrigin \"{o}\" can not have more than one wildcard."
            ));
        }
        if r.allowed_methods.is_empty() || r.allowed_origins.is_empty() {
            return Err(s3_error!(
                MalformedXML,
                "each CORS rule needs an AllowedMethod and an AllowedOrigin"
            ));
        }
        kept.push(CorsRule {
            id: r.id.clone().unwrap_or_default(),
            allowed_methods: r.allowed_methods.clone(),
            allowed_origins: r.allowed_origins.clone(),
            allowed_headers: r.allowed_headers.clone().unwrap_or_default(),
            expose_headers: r.expose_headers.clone().unwrap_or_default(),
            max_age_seconds: r.max_age_seconds,
        });
    }
    s.set_props(&bck, serde_json::json!({ "s3": { "cors": kept } }))
        .await?;
    Ok(S3Response::new(PutBucketCorsOutput::default()))
}

pub(super) async fn get_bucket_cors(
    s: &GristS3,
    req: S3Request<GetBucketCorsInput>,
) -> S3Result<S3Response<GetBucketCorsOutput>> {
    let props = super::public::props_of(s, &req.input.bucket).await?;
    if props.s3.cors.is_empty() {
        return Err(s3_error!(
            NoSuchCORSConfiguration,
            "The CORS configuration does not exist"
        ));
    }
    let rules = props
        .s3
        .cors
        .into_iter()
        .map(|r| CORSRule {
            id: (!r.id.is_empty()).then_some(r.id),
            allowed_methods: r.allowed_methods,
            allowed_origins: r.allowed_origins,
            allowed_headers: (!r.allowed_headers.is_empty()).then_some(r.allowed_headers),
            expose_headers: (!r.expose_headers.is_empty()).then_some(r.expose_headers),
            max_age_seconds: r.max_age_seconds,
        })
        .collect();
    Ok(S3Response::new(GetBucketCorsOutput {
        cors_rules: Some(rules),
    }))
}

pub(super) async fn delete_bucket_cors(
    s: &GristS3,
    req: S3Request<DeleteBucketCorsInput>,
) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
    let (bck, _) = super::public::administered(
        s,
        &req.input.bucket,
        req.credentials.as_ref(),
        Some("s3:PutBucketCORS"),
    )
    .await?;
    s.set_props(&bck, serde_json::json!({ "s3": { "cors": [] } }))
        .await?;
    Ok(S3Response::new(DeleteBucketCorsOutput::default()))
}

/// `pattern` with at most one `*` (any run of characters) matches `value`.
fn wildcard(pattern: &str, value: &str, ignore_case: bool) -> bool {
    let (p, v) = if ignore_case {
        (pattern.to_ascii_lowercase(), value.to_ascii_lowercase())
    } else {
        (pattern.to_owned(), value.to_owned())
    };
    match p.split_once('*') {
        Some((head, tail)) => {
            v.len() >= head.len() + tail.len() && v.starts_with(head) && v.ends_with(tail)
        }
        None => p == v,
    }
}

/// What a request asks of the CORS rules.
struct CorsAsk<'a> {
    origin: &'a str,
    method: &'a str,
    /// `Access-Control-Request-Headers`, lowercase.
    headers: Vec<String>,
}

impl<'a> CorsAsk<'a> {
    /// From a request's headers: `None` without an `Origin`. The method is the preflight's
    /// `Access-Control-Request-Method`, else `method`.
    fn of(headers: &'a HeaderMap, method: &'a str) -> Option<Self> {
        let origin = headers.get(http::header::ORIGIN)?.to_str().ok()?;
        let method = headers
            .get(http::header::ACCESS_CONTROL_REQUEST_METHOD)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(method);
        let asked = headers
            .get(http::header::ACCESS_CONTROL_REQUEST_HEADERS)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        Some(Self {
            origin,
            method,
            headers: asked
                .split(',')
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
        })
    }

    /// The first rule that allows this origin, method and every requested header.
    fn rule<'r>(&self, rules: &'r [CorsRule]) -> Option<&'r CorsRule> {
        rules.iter().find(|r| {
            r.allowed_origins
                .iter()
                .any(|o| wildcard(o, self.origin, false))
                && r.allowed_methods.iter().any(|m| m == self.method)
                && self.headers.iter().all(|h| {
                    r.allowed_headers
                        .iter()
                        .any(|allowed| wildcard(allowed, h, true))
                })
        })
    }

    /// The `Access-Control-*` headers that `rule` grants this request.
    fn grant(&self, rule: &CorsRule, out: &mut HeaderMap) {
        let set = |out: &mut HeaderMap, name: http::header::HeaderName, value: &str| {
            if let Ok(v) = HeaderValue::from_str(value) {
                out.insert(name, v);
            }
        };
        use http::header::*;
        // A rule for any origin answers `*` (no credentials); otherwise the origin itself.
        let any = rule.allowed_origins.iter().any(|o| o == "*");
        set(
            out,
            ACCESS_CONTROL_ALLOW_ORIGIN,
            if any { "*" } else { self.origin },
        );
        set(
            out,
            ACCESS_CONTROL_ALLOW_METHODS,
            &rule.allowed_methods.join(", "),
        );
        if !self.headers.is_empty() {
            set(out, ACCESS_CONTROL_ALLOW_HEADERS, &self.headers.join(", "));
        }
        if !rule.expose_headers.is_empty() {
            set(
                out,
                ACCESS_CONTROL_EXPOSE_HEADERS,
                &rule.expose_headers.join(", "),
            );
        }
        if let Some(age) = rule.max_age_seconds {
            set(out, ACCESS_CONTROL_MAX_AGE, &age.to_string());
        }
        out.insert(
            VARY,
            HeaderValue::from_static(
                "Origin, Access-Control-Request-Headers, Access-Control-Request-Method",
            ),
        );
    }
}

/// The S3 settings of the bucket an S3 name means (`None`: no such bucket).
fn bucket_settings(proxy: &crate::meta::Proxy, name: Option<&str>) -> Option<S3BucketProps> {
    let name = name?;
    let bmd = proxy.bmd();
    let bck = resolve(&bmd, name).ok().flatten()?;
    bmd.get(&bck).map(|r| r.props.s3.clone())
}

/// An OPTIONS preflight, answered from the bucket's rules: 200 with what the first matching
/// rule grants; 400 without `Origin` and `Access-Control-Request-Method`; 403 when no rule
/// allows it (or the bucket has none).
pub(super) fn preflight(
    proxy: &crate::meta::Proxy,
    bucket: Option<&str>,
    headers: &HeaderMap,
) -> Response {
    let ask = CorsAsk::of(headers, "OPTIONS")
        .filter(|_| headers.contains_key(http::header::ACCESS_CONTROL_REQUEST_METHOD));
    let Some(ask) = ask else {
        return super::error_xml(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "Insufficient information. Origin request header needed.",
        );
    };
    let rules = bucket_settings(proxy, bucket)
        .map(|p| p.cors)
        .unwrap_or_default();
    let Some(rule) = ask.rule(&rules) else {
        return super::error_xml(
            StatusCode::FORBIDDEN,
            "AccessForbidden",
            "CORSResponse: This CORS request is not allowed. This is usually because the evalution of Origin, request method / Access-Control-Request-Method or Access-Control-Request-Headers are not whitelisted by the resource's CORS spec.",
        );
    };
    let mut resp = StatusCode::OK.into_response();
    ask.grant(rule, resp.headers_mut());
    resp
}

/// Adds the CORS headers a request with an `Origin` is granted to its answer.
pub(super) fn decorate(
    proxy: &crate::meta::Proxy,
    bucket: Option<&str>,
    method: &Method,
    request: &HeaderMap,
    answer: &mut HeaderMap,
) {
    let Some(ask) = CorsAsk::of(request, method.as_str()) else {
        return;
    };
    let Some(settings) = bucket_settings(proxy, bucket) else {
        return;
    };
    if let Some(rule) = ask.rule(&settings.cors) {
        ask.grant(rule, answer);
    }
}

use axum::response::{IntoResponse, Response};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_as_s3_documents() {
        assert!(wildcard("*suffix", "foo.suffix", false));
        assert!(!wildcard("*suffix", "foo.suffix.get", false));
        assert!(wildcard("start*end", "startend", false));
        assert!(wildcard("start*end", "start12end", false));
        assert!(!wildcard("start*end", "0start12end", false));
        assert!(wildcard("prefix*", "prefix.suffix", false));
        assert!(!wildcard("prefix*", "bla.prefix", false));
        assert!(wildcard("x-amz-*", "X-Amz-Date", true));
        assert!(!wildcard("Example", "example", false));
    }

    #[test]
    fn the_first_rule_that_allows_origin_method_and_headers_answers() {
        let rule = |origin: &str, method: &str, headers: &[&str]| CorsRule {
            allowed_origins: vec![origin.into()],
            allowed_methods: vec![method.into()],
            allowed_headers: headers.iter().map(|h| h.to_string()).collect(),
            ..Default::default()
        };
        let rules = [
            rule("*suffix", "GET", &[]),
            rule("*.put", "PUT", &["x-amz-*"]),
            rule("*", "GET", &[]),
        ];
        let ask = |origin: &'static str, method: &'static str, headers: &[&str]| CorsAsk {
            origin,
            method,
            headers: headers.iter().map(|h| h.to_string()).collect(),
        };
        assert_eq!(ask("a.suffix", "GET", &[]).rule(&rules), Some(&rules[0]));
        assert_eq!(
            ask("a.put", "PUT", &["x-amz-date"]).rule(&rules),
            Some(&rules[1])
        );
        assert_eq!(ask("a.put", "PUT", &["authorization"]).rule(&rules), None);
        assert_eq!(ask("other", "GET", &[]).rule(&rules), Some(&rules[2]));
        assert_eq!(ask("other", "DELETE", &[]).rule(&rules), None);
        let mut out = HeaderMap::new();
        ask("other", "GET", &[]).grant(&rules[2], &mut out);
        assert_eq!(out["access-control-allow-origin"], "*");
        assert_eq!(out["access-control-allow-methods"], "GET");
    }
}

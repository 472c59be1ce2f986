//! S3 Object Lock: buckets created with it (CreateBucket `x-amz-bucket-object-lock-enabled`)
//! or given it (PutObjectLockConfiguration on a versioned bucket), default retention, the
//! lock headers of PutObject / CreateMultipartUpload / CopyObject, Put/GetObjectRetention and
//! Put/GetObjectLegalHold, and the lock fields of GET and HEAD.
//!
//! A version's lock is custom metadata (`gristmill_core::object_lock`); the owning target
//! enforces it when a version is deleted, inside the delete's index transaction, so the check
//! and the delete cannot be split by a concurrent retention change. A lock bucket stays
//! versioned (suspending is refused), so overwrites and plain deletes only add versions or
//! delete markers.

use super::common::*;
use gristmill_core::api::ObjectLockProps;
use gristmill_core::object_lock::{COMPLIANCE, GOVERNANCE, LEGAL_HOLD_KEY, MODE_KEY, UNTIL_NS_KEY};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

/// The bucket's Object Lock settings.
pub(super) fn props(s: &GristS3, bck: &gristmill_core::Bck) -> ObjectLockProps {
    s.proxy
        .bmd()
        .get(bck)
        .map(|r| r.props.s3.object_lock.clone())
        .unwrap_or_default()
}

fn missing_configuration() -> s3s::S3Error {
    s3_error!(
        InvalidRequest,
        "Bucket is missing Object Lock Configuration"
    )
}

fn ns_of(t: &Timestamp) -> i64 {
    let t: time::OffsetDateTime = t.clone().into();
    i64::try_from(t.unix_timestamp_nanos()).unwrap_or(i64::MAX)
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

fn check_mode(mode: &str) -> S3Result<&'static str> {
    match mode {
        GOVERNANCE => Ok(GOVERNANCE),
        COMPLIANCE => Ok(COMPLIANCE),
        other => Err(s3_error!(
            MalformedXML,
            "the retention mode is GOVERNANCE or COMPLIANCE, not {other:?}"
        )),
    }
}

fn check_hold(status: &str) -> S3Result<&'static str> {
    match status {
        "ON" => Ok("ON"),
        "OFF" => Ok("OFF"),
        other => Err(s3_error!(
            MalformedXML,
            "the legal hold status is ON or OFF, not {other:?}"
        )),
    }
}

/// The lock a new object gets, as custom metadata: the request's (mode and retain-until date
/// together; a legal hold) or else the bucket's default retention. Lock headers on a bucket
/// without Object Lock are refused, never ignored.
pub(super) fn for_new_object(
    lock: &ObjectLockProps,
    mode: Option<&ObjectLockMode>,
    until: Option<&Timestamp>,
    hold: Option<&ObjectLockLegalHoldStatus>,
) -> S3Result<Vec<(String, String)>> {
    let asked = mode.is_some() || until.is_some() || hold.is_some();
    if !asked && !lock.enabled {
        return Ok(Vec::new()); // the common case: no lock
    }
    if !lock.enabled {
        return Err(missing_configuration());
    }
    let mut md = Vec::new();
    match (mode, until) {
        (Some(mode), Some(until)) => {
            let until = ns_of(until);
            if until <= now_ns() {
                return Err(s3_error!(
                    InvalidArgument,
                    "The retain until date must be in the future!"
                ));
            }
            md.push((MODE_KEY.to_owned(), check_mode(mode.as_str())?.to_owned()));
            md.push((UNTIL_NS_KEY.to_owned(), until.to_string()));
        }
        (None, None) if !lock.default_mode.is_empty() => {
            let days = u64::from(lock.default_days) + 365 * u64::from(lock.default_years);
            let span = days.saturating_mul(86_400_000_000_000).min(i64::MAX as u64);
            let until = now_ns().saturating_add(span as i64);
            md.push((MODE_KEY.to_owned(), lock.default_mode.clone()));
            md.push((UNTIL_NS_KEY.to_owned(), until.to_string()));
        }
        (None, None) => {}
        _ => {
            return Err(s3_error!(
                InvalidArgument,
                "x-amz-object-lock-retain-until-date and x-amz-object-lock-mode must both be supplied"
            ));
        }
    }
    if let Some(hold) = hold {
        md.push((
            LEGAL_HOLD_KEY.to_owned(),
            check_hold(hold.as_str())?.to_owned(),
        ));
    }
    Ok(md)
}

/// Keys a copy never takes from its source: a new version's lock is the request's or the
/// destination bucket's.
pub(super) fn is_lock_key(k: &str) -> bool {
    k == MODE_KEY || k == UNTIL_NS_KEY || k == LEGAL_HOLD_KEY
}

/// The lock fields of a GET or HEAD answer: mode, retain-until date, legal hold.
pub(super) fn answered(
    attrs: &Attrs,
) -> (
    Option<ObjectLockMode>,
    Option<Timestamp>,
    Option<ObjectLockLegalHoldStatus>,
) {
    let mode = attrs.get(MODE_KEY).map(ObjectLockMode::from);
    let until = attrs
        .get(UNTIL_NS_KEY)
        .and_then(|v| v.parse::<i64>().ok())
        .map(timestamp);
    let hold = attrs
        .get(LEGAL_HOLD_KEY)
        .map(ObjectLockLegalHoldStatus::from);
    (mode, until, hold)
}

pub(super) async fn put_object_lock_configuration(
    s: &GristS3,
    req: S3Request<PutObjectLockConfigurationInput>,
) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
    let (bck, props) = super::public::administered(
        s,
        &req.input.bucket,
        req.credentials.as_ref(),
        Some("s3:PutBucketObjectLockConfiguration"),
    )
    .await?;
    let conf = req
        .input
        .object_lock_configuration
        .ok_or_else(|| s3_error!(MalformedXML, "no ObjectLockConfiguration"))?;
    if conf.object_lock_enabled.as_ref().map(|e| e.as_str()) != Some("Enabled") {
        return Err(s3_error!(MalformedXML, "ObjectLockEnabled must be Enabled"));
    }
    // S3 lets a versioned bucket take Object Lock; an unversioned one could not keep versions.
    if !props.s3.object_lock.enabled
        && props.versioning.s3 != gristmill_core::api::S3_VERSIONING_ENABLED
    {
        return Err(s3_error!(
            InvalidBucketState,
            "Object Lock can be enabled only on a bucket with versioning enabled"
        ));
    }
    let mut lock = ObjectLockProps {
        enabled: true,
        ..Default::default()
    };
    if let Some(retention) = conf.rule.and_then(|r| r.default_retention) {
        let mode = retention
            .mode
            .ok_or_else(|| s3_error!(MalformedXML, "DefaultRetention needs a Mode"))?;
        lock.default_mode = check_mode(mode.as_str())?.to_owned();
        let positive = |n: i32| {
            u32::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| {
                let mut e = s3s::S3Error::with_message(
                    s3s::S3ErrorCode::Custom("InvalidRetentionPeriod".into()),
                    "Default retention period must be a positive integer value",
                );
                e.set_status_code(http::StatusCode::BAD_REQUEST);
                e
            })
        };
        match (retention.days, retention.years) {
            (Some(d), None) => lock.default_days = positive(d)?,
            (None, Some(y)) => lock.default_years = positive(y)?,
            _ => {
                return Err(s3_error!(
                    MalformedXML,
                    "DefaultRetention takes Days or Years, one of them"
                ));
            }
        }
    }
    // Every field, always: the props patch merges, and a removed default must be cleared.
    s.set_props(
        &bck,
        serde_json::json!({ "s3": { "object_lock": {
            "enabled": true,
            "default_mode": lock.default_mode,
            "default_days": lock.default_days,
            "default_years": lock.default_years,
        } } }),
    )
    .await?;
    Ok(S3Response::new(PutObjectLockConfigurationOutput::default()))
}

pub(super) async fn get_object_lock_configuration(
    s: &GristS3,
    req: S3Request<GetObjectLockConfigurationInput>,
) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
    let bck = s.existing(&req.input.bucket).await?;
    let lock = props(s, &bck);
    if !lock.enabled {
        return Err(s3_error!(
            ObjectLockConfigurationNotFoundError,
            "Object Lock configuration does not exist for this bucket"
        ));
    }
    let rule = (!lock.default_mode.is_empty()).then(|| ObjectLockRule {
        default_retention: Some(DefaultRetention {
            mode: Some(ObjectLockRetentionMode::from(lock.default_mode.clone())),
            days: (lock.default_days > 0).then_some(lock.default_days as i32),
            years: (lock.default_years > 0).then_some(lock.default_years as i32),
        }),
    });
    Ok(S3Response::new(GetObjectLockConfigurationOutput {
        object_lock_configuration: Some(ObjectLockConfiguration {
            object_lock_enabled: Some(ObjectLockEnabled::from_static(ObjectLockEnabled::ENABLED)),
            rule,
        }),
    }))
}

/// The version's attributes, for the lock calls (which answer 400 on a bucket without lock).
async fn locked_version(
    s: &GristS3,
    bucket: &str,
    key: &str,
    version_id: Option<&str>,
) -> S3Result<Attrs> {
    let bck = s.existing(bucket).await?;
    if !props(s, &bck).enabled {
        return Err(missing_configuration());
    }
    super::tagging::head(s, &bck, key, version_id).await
}

pub(super) async fn put_object_retention(
    s: &GristS3,
    req: S3Request<PutObjectRetentionInput>,
) -> S3Result<S3Response<PutObjectRetentionOutput>> {
    let input = req.input;
    let attrs = locked_version(s, &input.bucket, &input.key, input.version_id.as_deref()).await?;
    let retention = input
        .retention
        .ok_or_else(|| s3_error!(MalformedXML, "no Retention"))?;
    let new = match (&retention.mode, &retention.retain_until_date) {
        (Some(m), Some(u)) => Some((check_mode(m.as_str())?, ns_of(u))),
        (None, None) => None,
        _ => {
            return Err(s3_error!(
                MalformedXML,
                "Retention takes a Mode and a RetainUntilDate together"
            ));
        }
    };
    if let Some((_, until)) = new
        && until <= now_ns()
    {
        return Err(s3_error!(
            InvalidArgument,
            "The retain until date must be in the future!"
        ));
    }
    // A retention in force may be lengthened in its mode; shortening, removing or changing
    // its mode needs GOVERNANCE mode and the bypass, and COMPLIANCE never allows it.
    let old_until: i64 = attrs
        .get(UNTIL_NS_KEY)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if let Some(old_mode) = attrs.get(MODE_KEY)
        && old_until > now_ns()
    {
        let keeps = new.is_some_and(|(mode, until)| until >= old_until && mode == old_mode);
        let bypass = input.bypass_governance_retention == Some(true);
        if !keeps && (old_mode == COMPLIANCE || !bypass) {
            return Err(s3_error!(
                AccessDenied,
                "the object version is under {old_mode} retention: it can only be extended"
            ));
        }
    }
    let change = match new {
        Some((mode, until)) => serde_json::json!({"set": {
            MODE_KEY: mode,
            UNTIL_NS_KEY: until.to_string(),
        }}),
        None => serde_json::json!({"delete": [MODE_KEY, UNTIL_NS_KEY]}),
    };
    // The owner checks the rule again on the version it changes, atomically: the check
    // above answers early, this one cannot be raced.
    super::tagging::patch(
        s,
        &input.bucket,
        &input.key,
        input.version_id.as_deref(),
        change,
        input.bypass_governance_retention == Some(true),
    )
    .await?;
    Ok(S3Response::new(PutObjectRetentionOutput::default()))
}

pub(super) async fn get_object_retention(
    s: &GristS3,
    req: S3Request<GetObjectRetentionInput>,
) -> S3Result<S3Response<GetObjectRetentionOutput>> {
    let input = req.input;
    let attrs = locked_version(s, &input.bucket, &input.key, input.version_id.as_deref()).await?;
    let (mode, until, _) = answered(&attrs);
    if mode.is_none() {
        return Err(s3_error!(
            NoSuchObjectLockConfiguration,
            "The specified object does not have a ObjectLock configuration"
        ));
    }
    Ok(S3Response::new(GetObjectRetentionOutput {
        retention: Some(ObjectLockRetention {
            mode: mode.map(|m| ObjectLockRetentionMode::from(m.as_str().to_owned())),
            retain_until_date: until,
        }),
    }))
}

pub(super) async fn put_object_legal_hold(
    s: &GristS3,
    req: S3Request<PutObjectLegalHoldInput>,
) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
    let input = req.input;
    locked_version(s, &input.bucket, &input.key, input.version_id.as_deref()).await?;
    let status = input
        .legal_hold
        .and_then(|h| h.status)
        .ok_or_else(|| s3_error!(MalformedXML, "no LegalHold Status"))?;
    let change = serde_json::json!({"set": { LEGAL_HOLD_KEY: check_hold(status.as_str())? }});
    super::tagging::patch(
        s,
        &input.bucket,
        &input.key,
        input.version_id.as_deref(),
        change,
        false,
    )
    .await?;
    Ok(S3Response::new(PutObjectLegalHoldOutput::default()))
}

pub(super) async fn get_object_legal_hold(
    s: &GristS3,
    req: S3Request<GetObjectLegalHoldInput>,
) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
    let input = req.input;
    let attrs = locked_version(s, &input.bucket, &input.key, input.version_id.as_deref()).await?;
    let (_, _, hold) = answered(&attrs);
    let Some(hold) = hold else {
        return Err(s3_error!(
            NoSuchObjectLockConfiguration,
            "The specified object does not have a legal hold"
        ));
    };
    Ok(S3Response::new(GetObjectLegalHoldOutput {
        legal_hold: Some(ObjectLockLegalHold { status: Some(hold) }),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_holds_are_checked() {
        assert_eq!(check_mode("GOVERNANCE").unwrap(), GOVERNANCE);
        assert_eq!(check_mode("COMPLIANCE").unwrap(), COMPLIANCE);
        assert!(check_mode("governance").is_err());
        assert_eq!(check_hold("ON").unwrap(), "ON");
        assert!(check_hold("on").is_err());
        let t = timestamp(1_893_456_000_000_000_000);
        assert_eq!(ns_of(&t), 1_893_456_000_000_000_000);
    }
}

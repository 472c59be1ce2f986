//! Conditional writes (`If-None-Match`, `If-Match`), decided in the index transaction that
//! stores the new record.

use crate::store::meta::ObjectMeta;

/// A conditional write's precondition (`If-None-Match: *`, `If-Match`), decided against the
/// record in the same index transaction that stores the new one: of two racing writes, one
/// sees the other's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteCondition {
    /// `If-None-Match: *`: no live record (a tombstone is no object).
    Absent,
    /// `If-Match: *`: some live record.
    Exists,
    /// `If-Match: "e1", "e2"`: a live record whose ETag is one of these (without quotes).
    ETagIn(Vec<String>),
    /// `If-None-Match: "e1", "e2"`: no live record, or one whose ETag is none of these.
    ETagNotIn(Vec<String>),
    /// The live record still has this generation (`None`: there is still none): a condition
    /// decided by a newer copy elsewhere, made atomic with the commit here.
    Unchanged(Option<u64>),
}

impl WriteCondition {
    /// Why the condition does not hold for `current`, if it does not.
    pub fn unmet(&self, current: Option<&ObjectMeta>) -> Option<&'static str> {
        if let WriteCondition::Unchanged(expected) = self {
            let now = current.map(ObjectMeta::effective_gen);
            return (now != *expected).then_some("the object changed while the write was decided");
        }
        self.unmet_etag(current.map(|m| {
            m.custom
                .get(crate::store::ETAG_KEY)
                .unwrap_or(&m.cksum_value)
                .as_str()
        }))
    }

    /// Why the condition does not hold for an object with this ETag (`None`: no object).
    pub fn unmet_etag(&self, etag: Option<&str>) -> Option<&'static str> {
        match (self, etag) {
            (WriteCondition::Absent, Some(_)) => Some("If-None-Match: the object exists"),
            (WriteCondition::Exists | WriteCondition::ETagIn(_), None) => Some(IF_MATCH_MISSING),
            (WriteCondition::ETagIn(tags), Some(etag)) => {
                (!tags.iter().any(|t| t == etag)).then_some("If-Match: the ETag differs")
            }
            (WriteCondition::ETagNotIn(tags), Some(etag)) => tags
                .iter()
                .any(|t| t == etag)
                .then_some("If-None-Match: the ETag matches"),
            _ => None,
        }
    }
}

/// Why an `If-Match` write is refused when there is no object.
const IF_MATCH_MISSING: &str = "If-Match: the object does not exist";

/// The error for a write whose condition does not hold: 412, except `If-Match` with no object,
/// 404 (S3's conditional-writes guide: "no current object version ... fails with 404").
pub fn unmet_error(reason: &'static str) -> gristmill_core::ApiError {
    let kind = if reason == IF_MATCH_MISSING {
        gristmill_core::ErrorKind::NotFound
    } else {
        gristmill_core::ErrorKind::PreconditionFailed
    };
    gristmill_core::ApiError::new(kind, reason)
}

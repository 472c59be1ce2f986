//! S3 Object Lock as the cluster keeps it: a locked version's retention and legal hold live in
//! its custom metadata (so they travel with it through replicas, rebalance and resilver), and
//! the target that removes a version checks them in the same index transaction as the delete,
//! so a retention acknowledged a moment earlier can never be slipped past.
//!
//! A version may not be deleted while its legal hold is on, nor before its retain-until time
//! in COMPLIANCE mode; in GOVERNANCE mode only a request that says it bypasses governance
//! retention (`x-amz-bypass-governance-retention: true`) may. Overwrites are not deletes: a
//! lock bucket is versioned, so a PUT keeps the locked version as a noncurrent one.

use std::collections::BTreeMap;

/// Custom-metadata key of the retention mode, `GOVERNANCE` or `COMPLIANCE`.
pub const MODE_KEY: &str = "x-amz-object-lock-mode";
/// Custom-metadata key of the retain-until time, Unix nanoseconds (a number, so a target can
/// compare it without parsing dates).
pub const UNTIL_NS_KEY: &str = "x-grist-lock-until-ns";
/// Custom-metadata key of the legal hold, `ON` or `OFF` (absent: off).
pub const LEGAL_HOLD_KEY: &str = "x-amz-object-lock-legal-hold";

pub const GOVERNANCE: &str = "GOVERNANCE";
pub const COMPLIANCE: &str = "COMPLIANCE";

/// The native API's header for a delete that bypasses GOVERNANCE retention (S3's name).
pub const BYPASS_GOVERNANCE_HEADER: &str = "x-amz-bypass-governance-retention";

/// Why a version with this metadata may not be deleted at `now_ns`, or `None` if it may.
pub fn deletion_refused(
    custom: &BTreeMap<String, String>,
    now_ns: i64,
    bypass_governance: bool,
) -> Option<String> {
    if custom.get(LEGAL_HOLD_KEY).is_some_and(|v| v == "ON") {
        return Some("the object version is under a legal hold".into());
    }
    let mode = custom.get(MODE_KEY)?;
    let until: i64 = custom.get(UNTIL_NS_KEY)?.parse().ok()?;
    if until <= now_ns {
        return None;
    }
    if mode == GOVERNANCE && bypass_governance {
        return None;
    }
    Some(format!(
        "the object version is under {mode} retention until {} (Unix seconds)",
        until / 1_000_000_000
    ))
}

/// Why a change of a version's custom metadata (`set`, then `remove`) may not be made at
/// `now_ns`: a retention in force may only be lengthened in its own mode, unless it is
/// GOVERNANCE and the change bypasses governance retention. Legal holds may be set and lifted.
pub fn change_refused(
    current: &BTreeMap<String, String>,
    set: &BTreeMap<String, String>,
    remove: &[String],
    now_ns: i64,
    bypass_governance: bool,
) -> Option<String> {
    let until_of = |m: &BTreeMap<String, String>| -> i64 {
        m.get(UNTIL_NS_KEY)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let mode = current.get(MODE_KEY)?;
    let until = until_of(current);
    if until <= now_ns {
        return None;
    }
    let mut after = current.clone();
    after.extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
    for k in remove {
        after.remove(k);
    }
    if after.get(MODE_KEY) == Some(mode) && until_of(&after) >= until {
        return None;
    }
    if mode == GOVERNANCE && bypass_governance {
        return None;
    }
    Some(format!(
        "the object version is under {mode} retention: it can only be extended"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn holds_and_retention_refuse_deletes_until_they_end() {
        let now = 1_000_000_000_000;
        let later = (now + 1).to_string();
        let earlier = (now - 1).to_string();
        assert_eq!(deletion_refused(&md(&[]), now, false), None);
        let hold = md(&[(LEGAL_HOLD_KEY, "ON")]);
        assert!(
            deletion_refused(&hold, now, true).is_some(),
            "a hold is not bypassed"
        );
        assert_eq!(
            deletion_refused(&md(&[(LEGAL_HOLD_KEY, "OFF")]), now, false),
            None
        );
        let gov = md(&[(MODE_KEY, GOVERNANCE), (UNTIL_NS_KEY, &later)]);
        assert!(deletion_refused(&gov, now, false).is_some());
        assert_eq!(deletion_refused(&gov, now, true), None);
        let comp = md(&[(MODE_KEY, COMPLIANCE), (UNTIL_NS_KEY, &later)]);
        assert!(
            deletion_refused(&comp, now, true).is_some(),
            "compliance is never bypassed"
        );
        let ended = md(&[(MODE_KEY, COMPLIANCE), (UNTIL_NS_KEY, &earlier)]);
        assert_eq!(deletion_refused(&ended, now, false), None);
    }

    #[test]
    fn retention_in_force_is_only_extended() {
        let now = 1_000_000_000_000;
        let (later, latest) = ((now + 10).to_string(), (now + 20).to_string());
        let strip = [MODE_KEY.to_string(), UNTIL_NS_KEY.to_string()];
        let none = BTreeMap::new();
        for mode in [GOVERNANCE, COMPLIANCE] {
            let cur = md(&[(MODE_KEY, mode), (UNTIL_NS_KEY, &later)]);
            let longer = md(&[(UNTIL_NS_KEY, &latest)]);
            assert_eq!(change_refused(&cur, &longer, &[], now, false), None);
            let shorter = md(&[(UNTIL_NS_KEY, "1")]);
            assert!(change_refused(&cur, &shorter, &[], now, false).is_some());
            assert!(change_refused(&cur, &none, &strip, now, false).is_some());
            // Tags and legal holds change freely.
            let tag = md(&[("x-amz-tagging", "a=b"), (LEGAL_HOLD_KEY, "ON")]);
            assert_eq!(change_refused(&cur, &tag, &[], now, false), None);
        }
        let gov = md(&[(MODE_KEY, GOVERNANCE), (UNTIL_NS_KEY, &later)]);
        assert_eq!(change_refused(&gov, &none, &strip, now, true), None);
        let to_comp = md(&[(MODE_KEY, COMPLIANCE)]);
        assert!(change_refused(&gov, &to_comp, &[], now, false).is_some());
        let comp = md(&[(MODE_KEY, COMPLIANCE), (UNTIL_NS_KEY, &later)]);
        assert!(change_refused(&comp, &none, &strip, now, true).is_some());
        let ended = md(&[(MODE_KEY, COMPLIANCE), (UNTIL_NS_KEY, "5")]);
        assert_eq!(change_refused(&ended, &none, &strip, now, false), None);
    }
}

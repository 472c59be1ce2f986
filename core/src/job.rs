//! Jobs: long operations over many objects (prefetch, evict, copy, LRU eviction, ...) that run
//! on every target, each target working only on the objects it owns.
//!
//! The primary proxy gives a job its cluster-wide id and sends the same [`JobSpec`] to every
//! target; each target keeps its own [`JobSnap`] (progress, errors, state). Status is always
//! aggregated fresh from the targets ([`JobStatus::aggregate`]), so any proxy — including one
//! that restarted after the job began — answers for any job.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::bucket::Bck;
use crate::template::Template;
use crate::{ApiError, ErrorKind};

/// What a job does. The wire names are AIStore's job kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum JobKind {
    /// Cold-GET the selected objects of a remote bucket into the cluster.
    #[serde(rename = "prefetch-listrange")]
    Prefetch,
    /// Remove cached copies of the selected remote objects (the remote keeps them).
    #[serde(rename = "evict-listrange")]
    Evict,
    /// Copy the selected objects (or a whole bucket) to another bucket.
    #[serde(rename = "copy-bck")]
    Copy,
    /// Evict least-recently-used cached objects until usage is under the watermarks/quotas.
    #[serde(rename = "lru-eviction")]
    Lru,
    /// Transform the selected objects (or a whole bucket) into another bucket.
    #[serde(rename = "etl-bck")]
    Etl,
    /// Pack the selected objects into one shard, or a series of shards of a target size.
    #[serde(rename = "archive")]
    Archive,
    /// Re-pack the samples of input shards into new shards (AIStore's dsort).
    #[serde(rename = "dsort")]
    Reshard,
    /// Move every object to its owner under the current cluster map (started by every map
    /// change that moves objects; id `rb<map version>` on every target).
    #[serde(rename = "rebalance")]
    Rebalance,
    /// Bring one bucket to its `mirror.copies` (started by a change of that property): create
    /// missing replicas on the next HRW targets, drop copies beyond the count.
    #[serde(rename = "make-n-copies")]
    MakeNCopies,
    /// Re-read every object a target holds (owned copies and replicas), verify size and
    /// checksum, quarantine corrupt copies and repair them from a replica or the remote.
    #[serde(rename = "scrub")]
    Scrub,
    /// Move every object of one target to its HRW mountpath after a mountpath was attached,
    /// detached, enabled or disabled (a local job of that target: id
    /// `resilver-<target>-<epoch>`; started by the change, superseded by the next one).
    #[serde(rename = "resilver")]
    Resilver,
}

/// Who works on a job's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// One bucket: each target works on the objects of it that it owns.
    Bucket,
    /// Every bucket: each target works on what it holds.
    Cluster,
    /// One target, on its own (its id names the target).
    Node,
}

/// Who starts a job of this kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartedBy {
    /// A client, through a proxy (`grist`, the SDK, the REST API).
    User,
    /// The primary, on a change (a new cluster map, a bucket property), or a client.
    Cluster,
    /// A target, on a change of its own (a mountpath attached or detached).
    Node,
}

/// How a target finds the objects a job works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enumerates {
    /// The job's selection (names, template or prefix) of its bucket, filtered by ownership.
    Selection,
    /// Every object it holds that is not where the map and `mirror.copies` place it.
    Misplaced,
    /// Every object it holds on a mountpath other than its HRW mountpath.
    OnWrongMountpath,
    /// Every copy it holds (owned and replicas), read back in full.
    EveryCopy,
    /// Least-recently-used cached objects, until usage is under the watermarks and quotas.
    LeastRecentlyUsed,
    /// Input shards of a selection; the output is planned by a coordinator.
    Shards,
}

/// How a running job ends early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aborted {
    /// `grist job stop` / `DELETE /v1/jobs/{id}`: every target stops feeding new objects.
    ByUser,
    /// Also by the next change of the same kind (a newer map, mountpath change or property),
    /// which starts its own.
    ByUserOrSuperseded,
}

/// What each job kind is: one row of [`JOB_TABLE`], read by proxies, targets, the CLI and the
/// docs (`docs/operations.md`'s job table is checked against it by a test).
#[derive(Debug, Clone, Copy)]
pub struct JobKindInfo {
    pub kind: JobKind,
    /// The wire name (AIStore's kind).
    pub name: &'static str,
    /// Other names accepted when parsing (short forms, AIStore's variants).
    pub aliases: &'static [&'static str],
    pub scope: Scope,
    pub started_by: StartedBy,
    pub enumerates: Enumerates,
    pub aborted: Aborted,
    /// Needs a destination bucket (`to_bck`).
    pub needs_destination: bool,
    /// Waits for running rebalances to end before it starts: it works on the objects each
    /// target holds; while objects move an object could be seen by two targets or by none.
    pub waits_for_rebalance: bool,
    /// Objects worked on at once per target unless the request says (`num_workers`); 0 for
    /// kinds that are not a per-object loop.
    pub workers: usize,
    /// One line for help texts and docs.
    pub about: &'static str,
}

/// Every job kind, in the order help texts and docs list them.
pub const JOB_TABLE: &[JobKindInfo] = &[
    JobKindInfo {
        kind: JobKind::Prefetch,
        name: "prefetch-listrange",
        aliases: &["prefetch", "prefetch-objects"],
        scope: Scope::Bucket,
        started_by: StartedBy::User,
        enumerates: Enumerates::Selection,
        aborted: Aborted::ByUser,
        needs_destination: false,
        waits_for_rebalance: false,
        workers: 16,
        about: "cold-GET selected objects of a remote bucket into the cluster",
    },
    JobKindInfo {
        kind: JobKind::Evict,
        name: "evict-listrange",
        aliases: &["evict", "evict-objects", "evict-remote-bck"],
        scope: Scope::Bucket,
        started_by: StartedBy::User,
        enumerates: Enumerates::Selection,
        aborted: Aborted::ByUser,
        needs_destination: false,
        waits_for_rebalance: true,
        workers: 32,
        about: "remove cached copies of selected remote objects (the remote keeps them)",
    },
    JobKindInfo {
        kind: JobKind::Copy,
        name: "copy-bck",
        aliases: &["copy", "copy-listrange", "copy-objects"],
        scope: Scope::Bucket,
        started_by: StartedBy::User,
        enumerates: Enumerates::Selection,
        aborted: Aborted::ByUser,
        needs_destination: true,
        waits_for_rebalance: true,
        workers: 8,
        about: "copy selected objects (or a whole bucket) to another bucket",
    },
    JobKindInfo {
        kind: JobKind::Lru,
        name: "lru-eviction",
        aliases: &["lru"],
        scope: Scope::Cluster,
        started_by: StartedBy::Cluster,
        enumerates: Enumerates::LeastRecentlyUsed,
        aborted: Aborted::ByUser,
        needs_destination: false,
        waits_for_rebalance: false,
        workers: 0,
        about: "evict least-recently-used cached objects until under the watermarks and quotas",
    },
    JobKindInfo {
        kind: JobKind::Etl,
        name: "etl-bck",
        aliases: &["etl", "etl-listrange", "etl-objects"],
        scope: Scope::Bucket,
        started_by: StartedBy::User,
        enumerates: Enumerates::Selection,
        aborted: Aborted::ByUser,
        needs_destination: true,
        waits_for_rebalance: true,
        workers: 8,
        about: "transform selected objects (or a whole bucket) into another bucket",
    },
    JobKindInfo {
        kind: JobKind::Archive,
        name: "archive",
        aliases: &["archive-listrange"],
        scope: Scope::Bucket,
        started_by: StartedBy::User,
        enumerates: Enumerates::Selection,
        aborted: Aborted::ByUser,
        needs_destination: false,
        waits_for_rebalance: true,
        workers: 0,
        about: "pack selected objects into one shard or a series of shards of a target size",
    },
    JobKindInfo {
        kind: JobKind::Reshard,
        name: "dsort",
        aliases: &["reshard"],
        scope: Scope::Bucket,
        started_by: StartedBy::User,
        enumerates: Enumerates::Shards,
        aborted: Aborted::ByUser,
        needs_destination: false,
        waits_for_rebalance: true,
        workers: 0,
        about: "re-pack the samples of input shards into new shards (AIStore's dsort)",
    },
    JobKindInfo {
        kind: JobKind::Rebalance,
        name: "rebalance",
        aliases: &["rb"],
        scope: Scope::Cluster,
        started_by: StartedBy::Cluster,
        enumerates: Enumerates::Misplaced,
        aborted: Aborted::ByUserOrSuperseded,
        needs_destination: false,
        waits_for_rebalance: false,
        workers: 0,
        about: "move every object to its owner under the current cluster map",
    },
    JobKindInfo {
        kind: JobKind::MakeNCopies,
        name: "make-n-copies",
        aliases: &["copies", "mirror"],
        scope: Scope::Bucket,
        started_by: StartedBy::Cluster,
        enumerates: Enumerates::Misplaced,
        aborted: Aborted::ByUserOrSuperseded,
        needs_destination: false,
        waits_for_rebalance: false,
        workers: 0,
        about: "bring one bucket to its mirror.copies: add missing replicas, drop extra ones",
    },
    JobKindInfo {
        kind: JobKind::Scrub,
        name: "scrub",
        aliases: &[],
        scope: Scope::Cluster,
        started_by: StartedBy::User,
        enumerates: Enumerates::EveryCopy,
        aborted: Aborted::ByUser,
        needs_destination: false,
        waits_for_rebalance: false,
        workers: 0,
        about: "re-read and verify every copy; quarantine and repair corrupt ones",
    },
    JobKindInfo {
        kind: JobKind::Resilver,
        name: "resilver",
        aliases: &[],
        scope: Scope::Node,
        started_by: StartedBy::Node,
        enumerates: Enumerates::OnWrongMountpath,
        aborted: Aborted::ByUserOrSuperseded,
        needs_destination: false,
        waits_for_rebalance: false,
        workers: 0,
        about: "move a target's objects to their HRW mountpaths after a mountpath change",
    },
];

impl JobKind {
    /// This kind's row of [`JOB_TABLE`].
    pub fn info(self) -> &'static JobKindInfo {
        JOB_TABLE
            .iter()
            .find(|i| i.kind == self)
            .expect("every job kind has a row in JOB_TABLE")
    }

    pub fn as_str(self) -> &'static str {
        self.info().name
    }

    /// Whether a job of this kind waits for running rebalances to end before it starts (see
    /// [`JobKindInfo::waits_for_rebalance`]).
    pub fn waits_for_rebalance(self) -> bool {
        self.info().waits_for_rebalance
    }

    /// Whether a job of this kind works on one bucket (and so needs one).
    pub fn needs_bucket(self) -> bool {
        self.info().scope == Scope::Bucket
    }

    /// Parses a kind by its wire name or an alias (`prefetch`, `evict`, `copy`, `lru`, ...).
    pub fn parse(s: &str) -> Option<Self> {
        JOB_TABLE
            .iter()
            .find(|i| i.name == s || i.aliases.contains(&s))
            .map(|i| i.kind)
    }

    /// Every kind, in table order.
    pub fn all() -> impl Iterator<Item = JobKind> {
        JOB_TABLE.iter().map(|i| i.kind)
    }
}

/// [`JOB_TABLE`] as the Markdown table `docs/operations.md` shows (a test keeps them equal).
pub fn job_table_markdown() -> String {
    let mut out = String::from(
        "| kind | also accepted | works on | started by | objects | stopped by | what it does |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for r in JOB_TABLE {
        let scope = match r.scope {
            Scope::Bucket => "one bucket",
            Scope::Cluster => "every bucket",
            Scope::Node => "one target",
        };
        let started = match r.started_by {
            StartedBy::User => "a client",
            StartedBy::Cluster => "the primary (on a change) or a client",
            StartedBy::Node => "a target (on a mountpath change)",
        };
        let objects = match r.enumerates {
            Enumerates::Selection => "the selection, by owner",
            Enumerates::Misplaced => "misplaced copies",
            Enumerates::OnWrongMountpath => "copies on another mountpath",
            Enumerates::EveryCopy => "every copy held",
            Enumerates::LeastRecentlyUsed => "least recently used",
            Enumerates::Shards => "input shards",
        };
        let aborted = match r.aborted {
            Aborted::ByUser => "`grist job stop`",
            Aborted::ByUserOrSuperseded => "`grist job stop`, the next change",
        };
        let aliases: Vec<String> = r.aliases.iter().map(|a| format!("`{a}`")).collect();
        out.push_str(&format!(
            "| `{}` | {} | {scope} | {started} | {objects} | {aborted} | {} |\n",
            r.name,
            aliases.join(", "),
            r.about
        ));
    }
    out
}

impl std::fmt::Display for JobKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which objects of the source bucket a job works on: explicit names, a brace template, or a
/// prefix (all three empty = the whole bucket). AIStore's `ListRange` (`objnames`, `template`);
/// a template without braces is a prefix, as in AIStore.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selection {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objnames: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub template: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
}

/// A selection resolved to what a target iterates.
#[derive(Debug, Clone)]
pub enum Resolved {
    Names(Vec<String>),
    Template(Template),
    /// Every object whose name starts with this (empty = all).
    Prefix(String),
}

impl Selection {
    /// Checks the selection and says how to enumerate it.
    pub fn resolve(&self) -> Result<Resolved, ApiError> {
        let given = [
            !self.objnames.is_empty(),
            !self.template.is_empty(),
            !self.prefix.is_empty(),
        ];
        if given.iter().filter(|g| **g).count() > 1 {
            return Err(ApiError::bad_request(
                "give one of object names, a template or a prefix, not several",
            ));
        }
        if !self.objnames.is_empty() {
            for n in &self.objnames {
                crate::validate_object_name(n)?;
            }
            return Ok(Resolved::Names(self.objnames.clone()));
        }
        if !self.template.is_empty() {
            let t = Template::parse(&self.template)?;
            return Ok(if t.has_ranges() {
                Resolved::Template(t)
            } else {
                Resolved::Prefix(self.template.clone())
            });
        }
        Ok(Resolved::Prefix(self.prefix.clone()))
    }

    pub fn is_all(&self) -> bool {
        self.objnames.is_empty() && self.template.is_empty() && self.prefix.is_empty()
    }
}

/// Options of a job; each kind reads the ones that apply to it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobOptions {
    /// Prefetch/copy: re-validate cached copies against the remote and re-fetch changed ones.
    #[serde(default)]
    pub latest: bool,
    /// Copy: only report what would be copied.
    #[serde(default)]
    pub dry_run: bool,
    /// Copy: prepended to every destination name (AIStore's `prepend`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prepend: String,
    /// Copy: with a prefix selection, replace that prefix with this in destination names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_prefix: Option<String>,
    /// Objects worked on at once per target; 0 = the default.
    #[serde(default)]
    pub num_workers: usize,
    /// Keep going after a per-object error (always true in Gristmill: errors are recorded
    /// and the job goes on; kept for AIStore's `coer`).
    #[serde(default)]
    pub continue_on_err: bool,
    /// LRU: evict even when usage is under the high watermark (`grist space evict --force`).
    #[serde(default)]
    pub force: bool,
    /// ETL: the transforms to apply, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub etl: Vec<String>,
    /// ETL: the `args` string passed to each transform.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub etl_args: String,
    /// ETL: extension map for destination names (`{"jpg": "npy"}`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub ext: std::collections::BTreeMap<String, String>,
    /// Archive: the output shard(s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<crate::shards::ArchiveOpts>,
    /// Reshard: the whole request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reshard: Option<Box<crate::shards::ReshardSpec>>,
    /// Scrub: only report corrupt copies (no quarantine, no repair).
    #[serde(default)]
    pub no_repair: bool,
}

/// What the primary sends to every target to start a job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobSpec {
    pub id: String,
    pub kind: JobKind,
    /// Source bucket (none for node-wide jobs such as LRU over all buckets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bck: Option<Bck>,
    /// Destination bucket of a copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_bck: Option<Bck>,
    #[serde(default)]
    pub selection: Selection,
    #[serde(default)]
    pub opts: JobOptions,
}

/// Where a job is on one target (or, aggregated, on all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Running,
    /// Done; per-object errors, if any, are in the counters.
    Finished,
    Aborted,
}

/// One failed object of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectError {
    pub name: String,
    pub error: String,
}

/// Error samples kept per target per job (the count is exact; the list is bounded).
pub const MAX_ERROR_SAMPLES: usize = 100;

/// One target's view of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSnap {
    pub id: String,
    pub kind: JobKind,
    pub node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bck: Option<Bck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_bck: Option<Bck>,
    pub state: JobState,
    /// Unix nanoseconds; `end_ns` is 0 while running.
    pub start_ns: i64,
    pub end_ns: i64,
    /// Objects this target will work on, once known (after enumerating the selection).
    #[serde(default)]
    pub total_objects: Option<u64>,
    /// Objects done (including skipped ones) and the bytes they moved.
    pub objects: u64,
    pub bytes: u64,
    /// Objects that needed no work (already cached, not present, ...).
    pub skipped: u64,
    pub errors: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub error_samples: Vec<ObjectError>,
    /// Why the job stopped early (abort request, enumeration failure).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub abort_reason: String,
    /// Kind-specific counters (scrub: `corrupt`, `repaired`, `unrepairable`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub counters: BTreeMap<String, u64>,
    /// ETL jobs: the transforms applied, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub etl: Vec<String>,
}

/// A job across the cluster: totals and each target's snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStatus {
    pub id: String,
    pub kind: JobKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bck: Option<Bck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_bck: Option<Bck>,
    /// Running while any target runs it; aborted if any target aborted; else finished.
    pub state: JobState,
    pub start_ns: i64,
    /// 0 while running.
    pub end_ns: i64,
    /// Sum over targets, once every target knows its share.
    pub total_objects: Option<u64>,
    pub objects: u64,
    pub bytes: u64,
    pub skipped: u64,
    pub errors: u64,
    /// Kind-specific counters, summed over targets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub counters: BTreeMap<String, u64>,
    /// ETL jobs: the transforms applied, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub etl: Vec<String>,
    pub targets: Vec<JobSnap>,
}

impl JobStatus {
    /// Folds the targets' snapshots of one job; `None` if there are none.
    pub fn aggregate(mut snaps: Vec<JobSnap>) -> Option<Self> {
        snaps.sort_by(|a, b| a.node.cmp(&b.node));
        let first = snaps.first()?.clone();
        let running = snaps.iter().any(|s| s.state == JobState::Running);
        let aborted = snaps.iter().any(|s| s.state == JobState::Aborted);
        let state = if running {
            JobState::Running
        } else if aborted {
            JobState::Aborted
        } else {
            JobState::Finished
        };
        let total_objects = snaps
            .iter()
            .map(|s| s.total_objects)
            .try_fold(0u64, |acc, t| t.map(|t| acc + t));
        let mut counters = BTreeMap::new();
        for (k, v) in snaps.iter().flat_map(|s| s.counters.iter()) {
            *counters.entry(k.clone()).or_insert(0) += v;
        }
        Some(Self {
            id: first.id,
            kind: first.kind,
            bck: first.bck,
            to_bck: first.to_bck,
            state,
            start_ns: snaps.iter().map(|s| s.start_ns).min().unwrap_or(0),
            end_ns: if running {
                0
            } else {
                snaps.iter().map(|s| s.end_ns).max().unwrap_or(0)
            },
            total_objects,
            objects: snaps.iter().map(|s| s.objects).sum(),
            bytes: snaps.iter().map(|s| s.bytes).sum(),
            skipped: snaps.iter().map(|s| s.skipped).sum(),
            errors: snaps.iter().map(|s| s.errors).sum(),
            counters,
            etl: first.etl,
            targets: snaps,
        })
    }

    /// Every target's error samples, in node order.
    pub fn error_samples(&self) -> impl Iterator<Item = &ObjectError> {
        self.targets.iter().flat_map(|t| t.error_samples.iter())
    }

    /// The first abort reason any target gave.
    pub fn abort_reason(&self) -> &str {
        self.targets
            .iter()
            .map(|t| t.abort_reason.as_str())
            .find(|r| !r.is_empty())
            .unwrap_or("")
    }
}

/// A new job id: short, unique enough for a cluster's lifetime, safe in URLs (AIStore's ids
/// look alike).
pub fn new_job_id() -> String {
    let u = uuid::Uuid::new_v4().simple().to_string();
    format!("j{}", &u[..11])
}

/// 404 for an unknown job id.
pub fn job_not_found(id: &str) -> ApiError {
    ApiError::new(ErrorKind::NotFound, format!("job {id:?} not found"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operations_guide_lists_the_job_table() {
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/operations.md"
        ))
        .unwrap();
        let table = job_table_markdown();
        assert!(
            doc.contains(&table),
            "docs/operations.md's job table differs from JOB_TABLE; it should read:\n{table}"
        );
    }

    #[test]
    fn every_job_kind_has_one_row_with_its_wire_name() {
        // A new kind added to the enum must get its row: this match stops compiling first.
        let variant_count = |k: JobKind| match k {
            JobKind::Prefetch
            | JobKind::Evict
            | JobKind::Copy
            | JobKind::Lru
            | JobKind::Etl
            | JobKind::Archive
            | JobKind::Reshard
            | JobKind::Rebalance
            | JobKind::MakeNCopies
            | JobKind::Scrub
            | JobKind::Resilver => 11,
        };
        assert_eq!(JOB_TABLE.len(), variant_count(JobKind::Copy));
        for row in JOB_TABLE {
            assert_eq!(JOB_TABLE.iter().filter(|r| r.kind == row.kind).count(), 1);
            let wire = serde_json::to_string(&row.kind).unwrap();
            assert_eq!(
                wire,
                format!("\"{}\"", row.name),
                "serde name of {:?}",
                row.kind
            );
            assert_eq!(JobKind::parse(row.name), Some(row.kind));
            for alias in row.aliases {
                assert_eq!(JobKind::parse(alias), Some(row.kind), "alias {alias}");
            }
            assert_eq!(
                row.needs_destination,
                matches!(row.kind, JobKind::Copy | JobKind::Etl)
            );
            assert!(!row.about.is_empty());
        }
        assert_eq!(JobKind::parse("nope"), None);
    }

    fn snap(node: &str, state: JobState, total: Option<u64>, objects: u64) -> JobSnap {
        JobSnap {
            id: "j1".into(),
            kind: JobKind::Prefetch,
            node: node.into(),
            bck: None,
            to_bck: None,
            state,
            start_ns: 10,
            end_ns: if state == JobState::Running { 0 } else { 20 },
            total_objects: total,
            objects,
            bytes: objects * 2,
            skipped: 0,
            errors: 0,
            error_samples: vec![],
            abort_reason: String::new(),
            counters: [("corrupt".to_string(), 1)].into(),
            etl: vec![],
        }
    }

    #[test]
    fn aggregate_is_running_until_all_targets_end() {
        let s = JobStatus::aggregate(vec![
            snap("b", JobState::Finished, Some(3), 3),
            snap("a", JobState::Running, None, 1),
        ])
        .unwrap();
        assert_eq!(s.state, JobState::Running);
        assert_eq!((s.end_ns, s.total_objects, s.objects), (0, None, 4));
        let s = JobStatus::aggregate(vec![
            snap("b", JobState::Finished, Some(3), 3),
            snap("a", JobState::Aborted, Some(5), 1),
        ])
        .unwrap();
        assert_eq!(s.state, JobState::Aborted);
        assert_eq!((s.end_ns, s.total_objects), (20, Some(8)));
        assert_eq!(s.counters["corrupt"], 2);
        assert!(JobStatus::aggregate(vec![]).is_none());
    }

    #[test]
    fn selections_resolve() {
        let sel = Selection {
            template: "s-{0..9}".into(),
            ..Default::default()
        };
        assert!(matches!(sel.resolve().unwrap(), Resolved::Template(t) if t.len() == 10));
        let sel = Selection {
            template: "plain/".into(),
            ..Default::default()
        };
        assert!(matches!(sel.resolve().unwrap(), Resolved::Prefix(p) if p == "plain/"));
        let both = Selection {
            template: "a".into(),
            prefix: "b".into(),
            ..Default::default()
        };
        assert!(both.resolve().is_err());
        assert!(JobKind::parse("prefetch") == Some(JobKind::Prefetch));
        assert_eq!(
            serde_json::to_string(&JobKind::Copy).unwrap(),
            "\"copy-bck\""
        );
    }
}

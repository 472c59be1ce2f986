//! Wire types of the native REST API (AIStore-compatible): action messages, list-objects
//! requests and pages, header and query names.

use serde::{Deserialize, Deserializer, Serialize};

/// `{"action", "name", "value"}`: the body of every control request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ActionMsg {
    pub action: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub value: serde_json::Value,
}

impl ActionMsg {
    pub fn new(action: &str) -> Self {
        Self {
            action: action.to_owned(),
            ..Default::default()
        }
    }
}

/// Action names (AIStore's spelling).
pub mod action {
    pub const CREATE_BUCKET: &str = "create-bck";
    pub const DESTROY_BUCKET: &str = "destroy-bck";
    pub const LIST: &str = "list";
    /// Primary proxy: add a remote bucket (verified on its backend) to the bucket metadata.
    pub const ADD_REMOTE_BUCKET: &str = "add-remote-bck";
    pub const SET_BPROPS: &str = "set-bprops";
    pub const PREFETCH: &str = "prefetch-listrange";
    pub const EVICT_OBJECTS: &str = "evict-listrange";
    pub const EVICT_REMOTE_BUCKET: &str = "evict-remote-bck";
    pub const COPY_BUCKET: &str = "copy-bck";
    pub const COPY_OBJECTS: &str = "copy-listrange";
    pub const ETL_BUCKET: &str = "etl-bck";
    pub const ETL_OBJECTS: &str = "etl-listrange";
    /// `PUT /v1/cluster`: start a job by kind (`{"kind":"lru"}`), or stop one by id.
    pub const START: &str = "start";
    pub const STOP: &str = "stop";
}

/// Query parameter names.
pub mod query {
    pub const PROVIDER: &str = "provider";
    pub const NAMESPACE: &str = "namespace";
    pub const WHAT: &str = "what";
    pub const VALIDATE_CHECKSUM: &str = "validate_checksum";
    /// Set on requests a proxy redirected, with the proxy's id (AIStore's `pid`).
    pub const PROXY_ID: &str = "pid";
    /// GET of a cached remote object: check the remote's ETag/size first and re-fetch when they
    /// differ (AIStore's `latest-ver`).
    pub const LATEST: &str = "latest";
    /// GET/HEAD/DELETE of one version of an object in a versioned bucket (S3's `versionId`).
    pub const VERSION_ID: &str = "version_id";
    /// AIStore's spelling of [`LATEST`].
    pub const LATEST_VER: &str = "latest-ver";
    /// GET of a cached remote object: like `latest`, and a remote deletion drops the cached
    /// copy (404).
    pub const SYNC: &str = "sync";
    /// Destination bucket of a copy (AIStore's `bck_to`: `provider/@uuid#ns/name/`).
    pub const BCK_TO: &str = "bck_to";
    /// Evict of a whole remote bucket: keep its bucket-metadata entry.
    pub const KEEP_MD: &str = "keep_md";
    /// Set by a proxy or target that redirects (or forwards) an object request to the owner
    /// under its cluster map, with that map's version: a receiver whose map is older catches
    /// up first — instead of bouncing the request back, or serving by a map that no longer
    /// counts it a member. Carries no privilege; anyone may set it (a proxy replaces it).
    pub const FORWARDED: &str = "tfwd";
    /// Internal object routes: what a transfer is (`rebalance` or `replica`).
    pub const TRANSFER: &str = "transfer";
}

/// The S3 front's built-in credentials: the access key and secret a proxy accepts when no S3
/// users are configured and auth is off, so clients that always sign (aws cli, s3cmd,
/// rclone...) work against a playground out of the box. Public on purpose: `grist show s3`
/// and the playground banner print them.
pub mod s3_default {
    /// Access key of the built-in anonymous S3 identity.
    pub const ACCESS_KEY: &str = "gristmill";
    /// Its secret.
    pub const SECRET_KEY: &str = "gristmill-secret";
}

/// Query parameters that once selected node-to-node behaviour on the user object route. Those
/// operations now live under [`internal::OBJECTS`]; a user request carrying one of these is
/// refused with a 400, so an old node or a curious client gets a clear answer instead of an
/// operation it may not perform.
pub const NODE_ONLY_PARAMS: &[&str] = &["rebalance", "replica", "nofb"];

/// Refuses a user object request that carries a node-only flag ([`NODE_ONLY_PARAMS`]).
pub fn refuse_node_only_params<'a>(
    mut keys: impl Iterator<Item = &'a String>,
) -> Result<(), crate::ApiError> {
    match keys.find(|k| NODE_ONLY_PARAMS.contains(&k.as_str())) {
        Some(k) => Err(crate::ApiError::bad_request(format!(
            "query parameter {k:?} is internal to the cluster (node-to-node transfers use {}/...)",
            internal::OBJECTS
        ))),
        None => Ok(()),
    }
}

/// Node-to-node routes. The gate classifies them as internal by path: only a node credential
/// opens them, whatever a user's roles.
pub mod internal {
    /// `/v1/internal/objects/{bucket}/{*object}` on a target: `PUT ?transfer=rebalance|replica`
    /// stores a copy as sent (never redirected, replicated or written through), `DELETE`
    /// deletes a copy and records a tombstone, `GET`/`HEAD` read the local copy only (no
    /// fallback to past owners, no redirect). Every answer carries [`super::header::GEN`].
    pub const OBJECTS: &str = "/v1/internal/objects";
    /// [`super::query::TRANSFER`] of a rebalance move.
    pub const REBALANCE: &str = "rebalance";
    /// [`super::query::TRANSFER`] of a replica write.
    pub const REPLICA: &str = "replica";
}

/// Header names.
pub mod header {
    pub const CHECKSUM_TYPE: &str = "ais-checksum-type";
    pub const CHECKSUM_VALUE: &str = "ais-checksum-value";
    pub const VERSION: &str = "ais-version";
    pub const ATIME: &str = "ais-atime";
    pub const LOCATION: &str = "ais-location";
    pub const OBJECT_NAME: &str = "ais-name";
    pub const CUSTOM_MD: &str = "ais-custom-md";
    pub const PRESENT: &str = "ais-present";
    pub const MIRROR_COPIES: &str = "ais-mirror-copies";
    pub const BUCKET_PROPS: &str = "ais-bucket-props";
    pub const NODE_ID: &str = "ais-node-id";
    /// Version of the cluster map a response was served under.
    pub const SMAP_VERSION: &str = "ais-smap-version";
    pub const MSGPACK: &str = "application/msgpack";
    /// Object metadata as percent-encoded JSON (exact values; used by the S3 front).
    pub const CUSTOM_MD_JSON: &str = "ais-custom-md-json";
    /// Last modification time of an object, Unix nanoseconds.
    pub const MTIME: &str = "ais-mtime";
    /// PUT: also compute the MD5 of the body and keep it as the object's ETag.
    pub const COMPUTE_MD5: &str = "ais-compute-md5";
    /// PUT: S3 checksum algorithms to compute and record (comma-separated, e.g. `CRC32`).
    pub const S3_CHECKSUMS: &str = "ais-s3-checksums";
    /// Node-only: the user a node (the S3 front, a proxy relaying to the primary) acts for,
    /// for what records who did something (a bucket's owner). Dropped from clients' requests.
    pub const ON_BEHALF_OF: &str = "ais-on-behalf-of";
    /// An object version's S3 version id (answers of versioned buckets; absent for the null
    /// version). The query parameter selecting a version is `version_id`.
    pub const VERSION_ID: &str = "ais-version-id";
    /// `true` on the answer that concerns a delete marker: a 404 GET of an object whose latest
    /// version is one, a 405 GET of the marker itself, and a DELETE that left or removed one.
    pub const DELETE_MARKER: &str = "ais-delete-marker";
    /// The name a noncurrent version or delete marker is stored (and listed) under,
    /// percent-encoded: a listing of versions resumes after it.
    pub const STORED_NAME: &str = "ais-stored-name";
    /// An object's owner-assigned generation: which of two copies is newer, decided without
    /// wall clocks (internal routes; 0 when the object is absent). On an internal DELETE, the
    /// tombstone's generation.
    pub const GEN: &str = "ais-gen";
    /// A target's listing page: how many moved copies the target has dropped so far (a
    /// counter read after the page was taken).
    pub const DROPS: &str = "ais-rebalance-drops";
    /// Internal answers: the generation of the tombstone this target holds for the object.
    pub const TOMBSTONE_GEN: &str = "ais-tombstone-gen";
}

/// Encodes object metadata for [`header::CUSTOM_MD_JSON`].
pub fn encode_custom_md(md: &std::collections::BTreeMap<String, String>) -> String {
    let json = serde_json::to_string(md).unwrap_or_default();
    percent_encoding::utf8_percent_encode(&json, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Decodes [`header::CUSTOM_MD_JSON`].
pub fn decode_custom_md(
    value: &str,
) -> Result<std::collections::BTreeMap<String, String>, crate::ApiError> {
    let json = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
    serde_json::from_str(&json).map_err(|e| {
        crate::ApiError::bad_request(format!("invalid {}: {e}", header::CUSTOM_MD_JSON))
    })
}

/// Entry flag: the object is present in the cluster (AIStore's `EntryIsCached`, bit 6).
pub const ENTRY_IS_CACHED: u32 = 1 << 6;
/// List entry flag: a delete marker (only in listings with [`LS_VERSIONS`]).
pub const ENTRY_DELETE_MARKER: u32 = 1 << 12;
/// Listing flag: every version of each object, newest first, noncurrent ones and delete
/// markers included. Entry names are stored names (see [`crate::name::version_slot`]) and
/// each entry's `version` is its S3 version id ("null" for the null version).
pub const LS_VERSIONS: u64 = 1 << 30;

/// List-objects request (AIStore's `LsoMsg`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ListObjectsMsg {
    #[serde(default)]
    pub prefix: String,
    /// Page size; 0 means the default.
    #[serde(default, alias = "page_size", deserialize_with = "int_or_string")]
    pub pagesize: u64,
    #[serde(default)]
    pub uuid: String,
    /// Comma-separated property names to return (name is always returned).
    #[serde(default)]
    pub props: String,
    #[serde(default)]
    pub continuation_token: String,
    #[serde(default)]
    pub start_after: String,
    /// Flag bitmask; the `aistore` SDK sends it as a decimal string.
    #[serde(default, deserialize_with = "int_or_string")]
    pub flags: u64,
}

/// Default and maximum page sizes for native buckets.
pub const DEFAULT_PAGE_SIZE: u64 = 10_000;
pub const MAX_PAGE_SIZE: u64 = 100_000;

impl ListObjectsMsg {
    /// Parses the body of a list-objects request: `{"action":"list","value":LsoMsg}`, where an
    /// empty body or a missing value means defaults.
    pub fn from_action_body(body: &[u8]) -> Result<Self, crate::ApiError> {
        if body.is_empty() {
            return Ok(Self::default());
        }
        let msg: ActionMsg = serde_json::from_slice(body)
            .map_err(|e| crate::ApiError::bad_request(format!("invalid action message: {e}")))?;
        if msg.action != action::LIST {
            return Err(crate::ApiError::bad_request(format!(
                "unsupported action {:?} for GET bucket",
                msg.action
            )));
        }
        if msg.value.is_null() {
            return Ok(Self::default());
        }
        serde_json::from_value(msg.value)
            .map_err(|e| crate::ApiError::bad_request(format!("invalid list-objects message: {e}")))
    }

    pub fn page_size(&self) -> usize {
        match self.pagesize {
            0 => DEFAULT_PAGE_SIZE as usize,
            n => n.min(MAX_PAGE_SIZE) as usize,
        }
    }

    /// The exclusive lower bound of the next page: the continuation token, else `start_after`.
    pub fn after(&self) -> &str {
        if self.continuation_token.is_empty() {
            &self.start_after
        } else {
            &self.continuation_token
        }
    }

    pub fn wants(&self, prop: &str) -> bool {
        self.props.split(',').any(|p| p.trim() == prop)
    }
}

fn int_or_string<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum IntOrString {
        Int(u64),
        Str(String),
    }
    match IntOrString::deserialize(d)? {
        IntOrString::Int(n) => Ok(n),
        IntOrString::Str(s) if s.is_empty() => Ok(0),
        IntOrString::Str(s) => s.parse().map_err(serde::de::Error::custom),
    }
}

/// One listed object. JSON uses these long names; msgpack uses AIStore's one-letter names
/// (see [`ListObjectsPage::to_msgpack`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListEntry {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub checksum: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub atime: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub location: String,
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    pub copies: u32,
    #[serde(default)]
    pub flags: u32,
    /// Last modification, Unix nanoseconds (0 = unknown).
    #[serde(default, rename = "mtime", skip_serializing_if = "is_zero")]
    pub mtime_ns: i64,
    /// S3 ETag (MD5 for objects PUT over S3), when known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub etag: String,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// One page of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListObjectsPage {
    #[serde(default)]
    pub uuid: String,
    /// Empty when this is the last page; otherwise pass it back to get the next one.
    #[serde(default)]
    pub continuation_token: String,
    #[serde(default)]
    pub flags: u32,
    #[serde(default)]
    pub entries: Vec<ListEntry>,
}

#[derive(Serialize, Deserialize)]
struct PackedEntry {
    n: String,
    cs: String,
    a: String,
    v: String,
    t: String,
    s: u64,
    c: u32,
    f: u32,
    /// Gristmill extensions (ignored by AIStore clients): mtime and S3 ETag.
    #[serde(default)]
    mt: i64,
    #[serde(default)]
    e: String,
}

#[derive(Serialize, Deserialize)]
#[allow(non_snake_case)]
struct PackedPage {
    UUID: String,
    ContinuationToken: String,
    Flags: u32,
    Entries: Vec<PackedEntry>,
}

impl ListObjectsPage {
    /// A page answering `lso`: same listing uuid (a fresh one when the request had none), and a
    /// continuation token (the last name) when `more` names may follow.
    pub fn answering(lso: &ListObjectsMsg, entries: Vec<ListEntry>, more: bool) -> Self {
        let continuation_token = match entries.last() {
            Some(last) if more => last.name.clone(),
            _ => String::new(),
        };
        Self {
            uuid: if lso.uuid.is_empty() {
                uuid::Uuid::new_v4().to_string()
            } else {
                lso.uuid.clone()
            },
            continuation_token,
            flags: 0,
            entries,
        }
    }

    /// AIStore's msgpack encoding (field names `UUID`, `ContinuationToken`, `Entries`, `n`, `cs`...).
    pub fn to_msgpack(&self) -> Vec<u8> {
        let packed = PackedPage {
            UUID: self.uuid.clone(),
            ContinuationToken: self.continuation_token.clone(),
            Flags: self.flags,
            Entries: self
                .entries
                .iter()
                .map(|e| PackedEntry {
                    n: e.name.clone(),
                    cs: e.checksum.clone(),
                    a: e.atime.clone(),
                    v: e.version.clone(),
                    t: e.location.clone(),
                    s: e.size,
                    c: e.copies,
                    f: e.flags,
                    mt: e.mtime_ns,
                    e: e.etag.clone(),
                })
                .collect(),
        };
        rmp_serde::to_vec_named(&packed).expect("msgpack encode")
    }

    pub fn from_msgpack(bytes: &[u8]) -> Result<Self, rmp_serde::decode::Error> {
        let p: PackedPage = rmp_serde::from_slice(bytes)?;
        Ok(Self {
            uuid: p.UUID,
            continuation_token: p.ContinuationToken,
            flags: p.Flags,
            entries: p
                .Entries
                .into_iter()
                .map(|e| ListEntry {
                    name: e.n,
                    checksum: e.cs,
                    atime: e.a,
                    version: e.v,
                    location: e.t,
                    size: e.s,
                    copies: e.c,
                    flags: e.f,
                    mtime_ns: e.mt,
                    etag: e.e,
                })
                .collect(),
        })
    }
}

/// Bucket properties kept in the bucket metadata and returned by HEAD bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketProps {
    pub provider: String,
    /// Creation time, Unix nanoseconds.
    #[serde(default)]
    pub created: i64,
    /// Unique bucket id within the cluster.
    #[serde(default)]
    pub bid: u64,
    #[serde(default)]
    pub checksum: ChecksumProps,
    #[serde(default)]
    pub versioning: VersioningProps,
    #[serde(default)]
    pub lru: LruProps,
    /// Backend settings of a remote bucket (AIStore's `extra`).
    #[serde(default)]
    pub extra: ExtraProps,
    /// Copies on distinct targets (AIStore's `mirror`).
    #[serde(default)]
    pub mirror: MirrorProps,
    /// The name S3 clients use for this bucket when it is not a native bucket's (remote
    /// buckets whose names clash, or that need another). Not an AIStore property.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub s3_alias: String,
    /// Who created the bucket: the cluster user, or the S3 access key of a `--s3-users` user;
    /// empty when nobody was identified (auth off). Set once, at creation. Not an AIStore
    /// property.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// What anonymous S3 clients may read, as the bucket's ACL and policy grant it.
    #[serde(default, skip_serializing_if = "PublicProps::is_private")]
    pub public: PublicProps,
    /// S3 bucket settings the S3 front keeps and acts on (CORS, object ownership). Not an
    /// AIStore property.
    #[serde(default, skip_serializing_if = "S3BucketProps::is_empty")]
    pub s3: S3BucketProps,
}

/// S3 bucket settings: CORS rules (answered on preflights and as CORS headers) and object
/// ownership (`BucketOwnerEnforced` disables ACLs other than the owner's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct S3BucketProps {
    /// PutBucketCors's rules, in order (empty: no CORS configuration).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cors: Vec<CorsRule>,
    /// PutBucketOwnershipControls's `ObjectOwnership` (empty: none set).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub object_ownership: String,
    /// PutBucketTagging's tags (key, value), in the order given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<(String, String)>,
    /// S3 Object Lock (see [`crate::object_lock`]): once enabled, never off again.
    #[serde(default, skip_serializing_if = "ObjectLockProps::is_off")]
    pub object_lock: ObjectLockProps,
}

impl S3BucketProps {
    pub fn is_empty(&self) -> bool {
        self.cors.is_empty()
            && self.object_ownership.is_empty()
            && self.tags.is_empty()
            && self.object_lock.is_off()
    }
}

/// A bucket's Object Lock configuration: enabled or not, and the default retention new
/// objects get (`default_mode` empty: none; then days and years are 0).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectLockProps {
    #[serde(default)]
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub default_mode: String,
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub default_days: u32,
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub default_years: u32,
}

impl ObjectLockProps {
    pub fn is_off(&self) -> bool {
        !self.enabled
    }
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// One S3 CORS rule. Origins and headers may hold one `*` wildcard.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorsRule {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    pub allowed_methods: Vec<String>,
    pub allowed_origins: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose_headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_seconds: Option<i32>,
}

/// Anonymous (unsigned) S3 reads of a bucket, from its S3 ACL and bucket policy; nothing
/// else is ever granted to anonymous clients. Not an AIStore property.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicProps {
    /// The bucket's ACL grants everyone READ (`public-read`): anonymous listings.
    #[serde(default)]
    pub acl_read: bool,
    /// The bucket policy document as it was put (empty: none). It can grant anonymous
    /// `s3:GetObject` and `s3:ListBucket` only (the S3 front refuses anything else).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy: String,
}

impl PublicProps {
    pub fn is_private(&self) -> bool {
        !self.acl_read && self.policy.is_empty()
    }
}

/// Replicas of a bucket's objects: `copies` on `copies` distinct targets in HRW order (the
/// owner first); a PUT returns only when all of them are stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorProps {
    #[serde(default)]
    pub copies: u64,
}

impl MirrorProps {
    /// Copies to keep (at least one).
    pub fn copies(&self) -> usize {
        self.copies.clamp(1, 16) as usize
    }
}

/// Backend settings of a remote bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtraProps {
    #[serde(default)]
    pub aws: AwsProps,
}

/// How to reach an `s3://` bucket, overriding the target's defaults (AIStore's
/// `extra.aws.*`). Empty fields keep the defaults; a bucket in a namespace (`s3://#acct/b`)
/// uses the profile named like the namespace unless `profile` says otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AwsProps {
    /// S3 endpoint URL (any S3-compatible server).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub endpoint: String,
    /// Profile in the AWS shared credentials/config files.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub profile: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cloud_region: String,
}

impl BucketProps {
    /// Applies a `set-bprops` patch: a JSON object whose fields replace the matching fields
    /// (nested objects merge). Read-only fields (`provider`, `created`, `bid`, `owner`) cannot
    /// change.
    pub fn patched(&self, patch: &serde_json::Value) -> Result<Self, crate::ApiError> {
        let bad =
            |why: String| crate::ApiError::bad_request(format!("invalid bucket props: {why}"));
        if !patch.is_object() {
            return Err(bad("expected a JSON object".into()));
        }
        for read_only in ["provider", "created", "bid", "owner"] {
            if patch.get(read_only).is_some() {
                return Err(bad(format!("{read_only:?} cannot be changed")));
            }
        }
        let mut current = serde_json::to_value(self).map_err(|e| bad(e.to_string()))?;
        merge_json(&mut current, patch);
        let props: Self = serde_json::from_value(current).map_err(|e| bad(e.to_string()))?;
        props.lru.dont_evict().map_err(|e| bad(e.message))?;
        let s3 = props.versioning.s3.as_str();
        if s3 != self.versioning.s3 {
            if ![S3_VERSIONING_ENABLED, S3_VERSIONING_SUSPENDED].contains(&s3) {
                return Err(bad(format!(
                    "versioning.s3 is {S3_VERSIONING_ENABLED:?} or {S3_VERSIONING_SUSPENDED:?}, not {s3:?} (a bucket that had versioning cannot go back to none)"
                )));
            }
            if props.provider != crate::bucket::Provider::Ais.as_str() {
                return Err(bad(
                    "versioning.s3 is for native (ais://) buckets; a remote bucket's versions are its backend's".into(),
                ));
            }
        }
        Ok(props)
    }
}

fn merge_json(into: &mut serde_json::Value, patch: &serde_json::Value) {
    match (into, patch) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge_json(a.entry(k.clone()).or_insert(serde_json::Value::Null), v);
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}

/// How cached copies of a remote bucket follow the remote (AIStore's `versioning`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersioningProps {
    /// Every GET compares the cached copy with the remote (ETag/version/size) and re-fetches
    /// a changed object (per request: `?latest=true`).
    #[serde(default)]
    pub validate_warm_get: bool,
    /// Also drop the cached copy when the remote object is gone (GET → 404; per request:
    /// `?sync=true`).
    #[serde(default)]
    pub synchronize: bool,
    /// S3 object versioning of a native bucket: "" (never enabled), "Enabled" or "Suspended".
    /// Not AIStore's `versioning.enabled`, which is about remote versions.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub s3: String,
}

/// [`VersioningProps::s3`] values.
pub const S3_VERSIONING_ENABLED: &str = "Enabled";
pub const S3_VERSIONING_SUSPENDED: &str = "Suspended";

/// LRU eviction of a bucket's cached objects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LruProps {
    /// Whether LRU may evict this bucket's objects; native `ais://` buckets are never evicted,
    /// whatever this says (they hold the only copy).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Objects read more recently than this are not evicted (`"2h"`, `"30m"`, `"0s"`); empty
    /// = the node's default.
    #[serde(default)]
    pub dont_evict_time: String,
    /// Most bytes this bucket may keep cached on each target; 0 = no quota (only the
    /// watermarks apply). AIStore has percentages only.
    #[serde(default)]
    pub quota: u64,
    /// Whether a rebalance moves this remote bucket's cached copies to their new owners (the
    /// default). Off, for job-scoped caches (AIStore #195): a map change moves none of them;
    /// the old owner drops its misplaced copies and the new owner fetches on demand. Native
    /// buckets always move (they hold the only copy).
    #[serde(default = "yes")]
    pub move_cached: bool,
}

fn yes() -> bool {
    true
}

impl Default for LruProps {
    fn default() -> Self {
        Self {
            enabled: true,
            dont_evict_time: String::new(),
            quota: 0,
            move_cached: true,
        }
    }
}

impl LruProps {
    /// The bucket's own `dont_evict_time`, if set.
    pub fn dont_evict(&self) -> Result<Option<std::time::Duration>, crate::ApiError> {
        if self.dont_evict_time.is_empty() {
            return Ok(None);
        }
        crate::time::parse_duration(&self.dont_evict_time).map(Some)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChecksumProps {
    #[serde(rename = "type")]
    pub kind: String,
    /// Every GET of a whole object verifies the stored checksum while it reads (small objects
    /// before the first byte is sent; streamed ones end broken on a mismatch), quarantines a
    /// corrupt copy and repairs it from a replica or the remote. On by default.
    #[serde(default = "yes")]
    pub validate_warm_get: bool,
    /// A cold GET (remote bucket) checks the downloaded bytes before caching them: against the
    /// cheapest whole-object checksum the backend sends (CRC64-NVME, CRC32C, CRC32, SHA-256),
    /// else a plain S3 ETag (MD5). A mismatch caches nothing. On by default.
    #[serde(default = "yes")]
    pub validate_cold_get: bool,
}

impl Default for ChecksumProps {
    fn default() -> Self {
        Self {
            kind: "xxhash".into(),
            validate_warm_get: true,
            validate_cold_get: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lso_msg_accepts_sdk_shapes() {
        let m: ListObjectsMsg = serde_json::from_str(
            r#"{"prefix":"a","pagesize":7,"uuid":"","props":"name,size","continuation_token":"","flags":"0","target":""}"#,
        )
        .unwrap();
        assert_eq!((m.page_size(), m.flags), (7, 0));
        assert!(m.wants("size") && !m.wants("atime"));
    }

    #[test]
    fn msgpack_roundtrip() {
        let page = ListObjectsPage {
            continuation_token: "x".into(),
            entries: vec![ListEntry {
                name: "a".into(),
                size: 3,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(
            ListObjectsPage::from_msgpack(&page.to_msgpack()).unwrap(),
            page
        );
    }
}

/// Keepalive sent by every node to the primary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Keepalive {
    pub id: String,
    /// Versions the sender has; the primary answers with newer ones if it has them.
    pub smap_version: u64,
    pub bmd_version: u64,
}

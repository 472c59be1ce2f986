//! Anonymous access to a bucket, granted the two ways S3 clients grant it: a `public-read`
//! ACL (CreateBucket, PutBucketAcl) and a bucket policy whose statements allow everyone
//! (`"Principal": "*"` or `{"AWS": "*"}`) actions on the bucket or its objects. Both live in
//! the bucket property `public`; the S3 front's access check lets an unsigned request through
//! when a grant covers its action (`s3:GetObject`, `s3:PutObject`, `s3:ListBucket`, ...; `*`
//! wildcards as in IAM) on its resource (`arn:aws:s3:::b` or `arn:aws:s3:::b/key`), and
//! refuses every other anonymous request.
//!
//! A `public-read` bucket ACL opens listing *and* object reads. In S3 it opens listing only,
//! and each object needs its own ACL; here an object's own ACL can only close it again
//! (`private`, see `objects`), so the bucket's stands for its objects unless they say so.
//!
//! A policy is accepted only if every statement is such a grant: anything else (Deny,
//! conditions, named principals) would be a promise this front cannot keep, so it is
//! NotImplemented rather than stored and ignored.

use super::common::*;
use gristmill_core::api::PublicProps;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};
use serde_json::Value;

/// Marks a request let through by a bucket's anonymous grant (not by auth being off).
#[derive(Debug, Clone, Copy)]
pub(super) struct GrantedToAnonymous;

/// Custom-metadata key of an object's own canned ACL: only `private` is kept (it closes an
/// object of a public bucket to anonymous reads; `public-read` is what a public bucket's
/// objects already are).
pub(super) const OBJECT_ACL: &str = "x-grist-acl";

/// Custom-metadata key of an object's owner, kept in buckets whose ObjectOwnership makes the
/// writer the owner (`ObjectWriter`; `BucketOwnerPreferred` unless the writer gives the
/// bucket owner full control).
pub(super) const OBJECT_OWNER: &str = "x-grist-object-owner";

/// The access metadata a new object (or upload) gets from its request: its own `private`
/// ACL, and its writer as owner where the bucket's ObjectOwnership says so. With ACLs off
/// (`BucketOwnerEnforced`) an ACL other than `bucket-owner-full-control` is refused.
pub(super) fn new_object_md(
    bck: &gristmill_core::Bck,
    ownership: &str,
    acl: Option<&ObjectCannedACL>,
    writer: &str,
) -> S3Result<Vec<(String, String)>> {
    let mut md = Vec::new();
    let acl = acl.map(|a| a.as_str());
    if bck.is_remote() {
        // The backend keeps bytes, not this metadata: a `private` ACL would be lost when the
        // cached copy is evicted, and with it the object's closing.
        if acl.is_some_and(|a| {
            a != ObjectCannedACL::PUBLIC_READ && a != ObjectCannedACL::PUBLIC_READ_WRITE
        }) {
            return Err(s3_error!(
                NotImplemented,
                "object ACLs in remote bucket {bck} are not supported"
            ));
        }
        return Ok(md);
    }
    if ownership == BUCKET_OWNER_ENFORCED {
        if acl.is_some_and(|a| a != ObjectCannedACL::BUCKET_OWNER_FULL_CONTROL) {
            return Err(acls_disabled());
        }
        return Ok(md);
    }
    if acl.is_some_and(|a| {
        a != ObjectCannedACL::PUBLIC_READ && a != ObjectCannedACL::PUBLIC_READ_WRITE
    }) {
        md.push((OBJECT_ACL.to_owned(), "private".to_owned()));
    }
    let writer_owns = match ownership {
        ObjectOwnership::OBJECT_WRITER => true,
        ObjectOwnership::BUCKET_OWNER_PREFERRED => {
            acl != Some(ObjectCannedACL::BUCKET_OWNER_FULL_CONTROL)
        }
        _ => false,
    };
    if writer_owns && !writer.is_empty() {
        md.push((OBJECT_OWNER.to_owned(), writer.to_owned()));
    }
    Ok(md)
}

/// Whether a read let through by a bucket's anonymous grant meets an object closed by its
/// own `private` ACL.
pub(super) fn closed_to_anonymous(extensions: &http::Extensions, attrs: &Attrs) -> bool {
    extensions.get::<GrantedToAnonymous>().is_some()
        && attrs.get(OBJECT_ACL).as_deref() == Some("private")
}

/// The owner listings name for a bucket's objects: its owner (objects record a different
/// one only in ObjectWriter / BucketOwnerPreferred buckets, which GetObjectAcl answers).
pub(super) fn listed_owner(s: &GristS3, bck: &gristmill_core::Bck) -> Owner {
    let bucket_owner = s
        .proxy
        .bmd()
        .get(bck)
        .map(|r| r.props.owner.clone())
        .unwrap_or_default();
    owner_of(&Attrs::default(), &bucket_owner)
}

/// An object's (or upload's) owner as S3 names it: its writer where recorded, else its
/// bucket's owner, else (a bucket nobody owns) the front's.
pub(super) fn owner_of(attrs: &Attrs, bucket_owner: &str) -> Owner {
    let id = match attrs.get(OBJECT_OWNER) {
        Some(id) => id,
        None if !bucket_owner.is_empty() => bucket_owner.to_owned(),
        None => return owner(),
    };
    Owner {
        display_name: Some(id.clone()),
        id: Some(id),
    }
}

/// What anonymous clients may do with a bucket: (action pattern, resource pattern) pairs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Anonymous {
    grants: Vec<(String, String)>,
}

impl Anonymous {
    /// Whether a grant covers `action` (`s3:GetObject`) on `resource` (an ARN).
    pub(super) fn allows(&self, action: &str, resource: &str) -> bool {
        self.grants
            .iter()
            .any(|(a, r)| wildcard_match(a, action) && wildcard_match(r, resource))
    }

    /// Whether anonymous clients may read the objects of `bucket` (all of them).
    pub(super) fn reads_objects(&self, bucket: &str) -> bool {
        self.allows("s3:GetObject", &format!("arn:aws:s3:::{bucket}/*"))
    }
}

/// IAM's wildcards: `*` any run of characters, `?` any one; action names ignore case.
fn wildcard_match(pattern: &str, value: &str) -> bool {
    let (p, v): (Vec<char>, Vec<char>) = if pattern.starts_with("arn:") {
        (pattern.chars().collect(), value.chars().collect())
    } else {
        (
            pattern.to_ascii_lowercase().chars().collect(),
            value.to_ascii_lowercase().chars().collect(),
        )
    };
    // Iterative glob with backtracking to the last `*`.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < v.len() {
        if i < p.len() && (p[i] == '?' || p[i] == v[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";

/// One or many: a JSON string or an array of them.
fn strings(v: &Value) -> Option<Vec<&str>> {
    match v {
        Value::String(s) => Some(vec![s.as_str()]),
        Value::Array(a) => a.iter().map(Value::as_str).collect(),
        _ => None,
    }
}

/// The anonymous grants of a policy document for `bucket`.
pub(super) fn policy_grants(doc: &str, bucket: &str) -> S3Result<Anonymous> {
    let malformed = |why: &str| s3_error!(MalformedPolicy, "{why}");
    let unsupported = |why: String| {
        s3_error!(
            NotImplemented,
            "bucket policies may only allow everyone (Principal \"*\") actions on arn:aws:s3:::{bucket} and its objects, without conditions: {why}"
        )
    };
    let v: Value = serde_json::from_str(doc).map_err(|_| malformed("the policy is not JSON"))?;
    let statements = match &v["Statement"] {
        Value::Array(a) => a.iter().collect::<Vec<_>>(),
        s @ Value::Object(_) => vec![s],
        _ => return Err(malformed("the policy has no Statement")),
    };
    let mut grants = Anonymous::default();
    for st in statements {
        if st["Effect"] != "Allow" {
            return Err(unsupported(format!("Effect {}", st["Effect"])));
        }
        for not in ["Condition", "NotAction", "NotResource", "NotPrincipal"] {
            if st.get(not).is_some() {
                return Err(unsupported(format!("{not} is not supported")));
            }
        }
        let everyone = match &st["Principal"] {
            Value::String(s) => s == "*",
            Value::Object(o) => o.get("AWS").and_then(strings) == Some(vec!["*"]),
            _ => false,
        };
        if !everyone {
            return Err(unsupported(format!("Principal {}", st["Principal"])));
        }
        let actions = strings(&st["Action"]).ok_or_else(|| malformed("no Action"))?;
        let resources = strings(&st["Resource"]).ok_or_else(|| malformed("no Resource"))?;
        let itself = format!("arn:aws:s3:::{bucket}");
        for r in &resources {
            let inside = r.strip_prefix(itself.as_str());
            if !inside.is_some_and(|rest| rest.is_empty() || rest.starts_with('/')) {
                return Err(malformed("Policy has invalid resource"));
            }
        }
        for action in actions {
            if action != "*" && !action.to_ascii_lowercase().starts_with("s3:") {
                return Err(malformed("Policy has invalid action"));
            }
            for r in &resources {
                grants.grants.push((action.to_owned(), (*r).to_owned()));
            }
        }
    }
    Ok(grants)
}

/// What anonymous clients may do with a bucket of these properties.
pub(super) fn anonymous(public: &PublicProps, bucket: &str) -> Anonymous {
    let mut may = if public.policy.is_empty() {
        Anonymous::default()
    } else {
        // Validated when it was put.
        policy_grants(&public.policy, bucket).unwrap_or_default()
    };
    if public.acl_read {
        may.grants
            .push(("s3:GetObject".into(), format!("arn:aws:s3:::{bucket}/*")));
        may.grants
            .push(("s3:ListBucket".into(), format!("arn:aws:s3:::{bucket}")));
    }
    may
}

/// The S3 action (IAM's name) an operation needs, for anonymous grants; `one_version`: a
/// read of one version (`s3:GetObjectVersion`, which a grant of s3:GetObject does not cover).
pub(super) fn action_of(op: &str, one_version: bool) -> String {
    let action = match op {
        "GetObject" | "HeadObject" if one_version => "GetObjectVersion",
        "DeleteObject" if one_version => "DeleteObjectVersion",
        "GetObjectTagging" if one_version => "GetObjectVersionTagging",
        "PutObjectTagging" if one_version => "PutObjectVersionTagging",
        "GetObjectAcl" if one_version => "GetObjectVersionAcl",
        "PutObjectAcl" if one_version => "PutObjectVersionAcl",
        "GetObject" | "HeadObject" => "GetObject",
        "ListObjects" | "ListObjectsV2" | "HeadBucket" => "ListBucket",
        "ListObjectVersions" => "ListBucketVersions",
        "ListMultipartUploads" => "ListBucketMultipartUploads",
        "ListParts" => "ListMultipartUploadParts",
        "PutObject"
        | "CopyObject"
        | "CreateMultipartUpload"
        | "UploadPart"
        | "UploadPartCopy"
        | "CompleteMultipartUpload" => "PutObject",
        "DeleteObjects" => "DeleteObject",
        other => other,
    };
    format!("s3:{action}")
}

/// The bucket and its properties, if the requester may change its access: its owner or an
/// admin, or anyone when the bucket's policy grants everyone `action` on it (never the
/// policy itself: only its owner or an admin changes who may do what). A bucket nobody owns
/// (a remote bucket, added on first use; one made before auth) is an admin's to open once
/// cluster users exist (as over the native API), else anyone's who may write to it.
pub(super) async fn administered(
    s: &GristS3,
    name: &str,
    credentials: Option<&s3s::auth::Credentials>,
    action: Option<&str>,
) -> S3Result<(gristmill_core::Bck, gristmill_core::api::BucketProps)> {
    let bck = s.existing(name).await?;
    let bmd = s.proxy.bmd();
    let props = bmd
        .get(&bck)
        .map(|r| r.props.clone())
        .ok_or_else(|| s3_error!(NoSuchBucket))?;
    let me = s.requester(credentials);
    let admin = credentials
        .and_then(|c| gristmill_core::users::by_access_key(&bmd.users, &c.access_key))
        .is_some_and(|(u, _)| u.is_admin());
    let unowned_and_no_cluster_users = props.owner.is_empty() && s.proxy.auth.is_none();
    let granted = action.is_some_and(|a| {
        anonymous(&props.public, &bck.name).allows(a, &format!("arn:aws:s3:::{}", bck.name))
    });
    if admin
        || granted
        || (!props.owner.is_empty() && props.owner == me)
        || unowned_and_no_cluster_users
    {
        Ok((bck, props))
    } else {
        Err(s3_error!(
            AccessDenied,
            "only the bucket's owner or an admin may change who can read it"
        ))
    }
}

/// The properties of an existing bucket.
pub(super) async fn props_of(
    s: &GristS3,
    name: &str,
) -> S3Result<gristmill_core::api::BucketProps> {
    let bck = s.existing(name).await?;
    Ok(s.proxy
        .bmd()
        .get(&bck)
        .map(|r| r.props.clone())
        .unwrap_or_default())
}

async fn set_public(s: &GristS3, bck: &gristmill_core::Bck, public: &PublicProps) -> S3Result<()> {
    // Both fields, always: an empty policy must replace the stored one (the props patch
    // merges, and the empty policy is not serialized).
    s.set_props(
        bck,
        serde_json::json!({"public": {"acl_read": public.acl_read, "policy": public.policy}}),
    )
    .await
}

/// A canned ACL as the bucket's `acl_read`: `public-read` grants everyone READ, `private`
/// nobody; the others grant what anonymous clients never get here.
pub(super) fn acl_read(acl: &BucketCannedACL) -> S3Result<bool> {
    match acl.as_str() {
        BucketCannedACL::PUBLIC_READ => Ok(true),
        BucketCannedACL::PRIVATE => Ok(false),
        other => Err(s3_error!(
            NotImplemented,
            "canned ACL {other}: only private and public-read are supported"
        )),
    }
}

/// CreateBucket with `x-amz-acl`: applied once the bucket exists.
pub(super) async fn apply_create_acl(
    s: &GristS3,
    bck: &gristmill_core::Bck,
    acl: &BucketCannedACL,
) -> S3Result<()> {
    if acl_read(acl)? {
        let public = PublicProps {
            acl_read: true,
            ..Default::default()
        };
        set_public(s, bck, &public).await?;
    }
    Ok(())
}

pub(super) async fn put_bucket_policy(
    s: &GristS3,
    req: S3Request<PutBucketPolicyInput>,
) -> S3Result<S3Response<PutBucketPolicyOutput>> {
    let (bck, props) = administered(s, &req.input.bucket, req.credentials.as_ref(), None).await?;
    policy_grants(&req.input.policy, &req.input.bucket)?;
    let public = PublicProps {
        policy: req.input.policy.clone(),
        ..props.public
    };
    set_public(s, &bck, &public).await?;
    Ok(S3Response::new(PutBucketPolicyOutput::default()))
}

pub(super) async fn get_bucket_policy(
    s: &GristS3,
    req: S3Request<GetBucketPolicyInput>,
) -> S3Result<S3Response<GetBucketPolicyOutput>> {
    let policy = props_of(s, &req.input.bucket).await?.public.policy;
    if policy.is_empty() {
        return Err(s3_error!(NoSuchBucketPolicy));
    }
    Ok(S3Response::new(GetBucketPolicyOutput {
        policy: Some(policy),
    }))
}

pub(super) async fn delete_bucket_policy(
    s: &GristS3,
    req: S3Request<DeleteBucketPolicyInput>,
) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
    let (bck, props) = administered(s, &req.input.bucket, req.credentials.as_ref(), None).await?;
    let public = PublicProps {
        policy: String::new(),
        ..props.public
    };
    set_public(s, &bck, &public).await?;
    Ok(S3Response::new(DeleteBucketPolicyOutput::default()))
}

pub(super) async fn put_bucket_acl(
    s: &GristS3,
    req: S3Request<PutBucketAclInput>,
) -> S3Result<S3Response<PutBucketAclOutput>> {
    let (bck, props) = administered(
        s,
        &req.input.bucket,
        req.credentials.as_ref(),
        Some("s3:PutBucketAcl"),
    )
    .await?;
    let Some(acl) = &req.input.acl else {
        return Err(s3_error!(
            NotImplemented,
            "only canned ACLs (x-amz-acl: private or public-read) are supported"
        ));
    };
    // With ACLs off, setting any ACL fails (AWS: only reads of ACLs still work).
    if enforced(&props) {
        return Err(acls_disabled());
    }
    let readable = acl_read(acl)?;
    let public = PublicProps {
        acl_read: readable,
        ..props.public
    };
    set_public(s, &bck, &public).await?;
    Ok(S3Response::new(PutBucketAclOutput::default()))
}

pub(super) async fn get_bucket_acl(
    s: &GristS3,
    req: S3Request<GetBucketAclInput>,
) -> S3Result<S3Response<GetBucketAclOutput>> {
    let props = props_of(s, &req.input.bucket).await?;
    let owner_id = if props.owner.is_empty() {
        "gristmill".to_owned()
    } else {
        props.owner.clone()
    };
    let owner = Owner {
        id: Some(owner_id.clone()),
        display_name: Some(owner_id.clone()),
    };
    Ok(S3Response::new(GetBucketAclOutput {
        grants: Some(grants(&owner, props.public.acl_read)),
        owner: Some(Owner {
            id: Some(owner_id.clone()),
            display_name: Some(owner_id),
        }),
    }))
}

/// The grants of a bucket or object: its owner's full control, and everyone's READ when
/// anonymous clients may read it (object ACLs follow the bucket's, see above).
fn grants(owner: &Owner, readable: bool) -> Vec<Grant> {
    let mut grants = vec![Grant {
        grantee: Some(Grantee {
            type_: Type::from_static(Type::CANONICAL_USER),
            id: owner.id.clone(),
            display_name: owner.display_name.clone(),
            email_address: None,
            uri: None,
        }),
        permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
    }];
    if readable {
        grants.push(Grant {
            grantee: Some(Grantee {
                type_: Type::from_static(Type::GROUP),
                uri: Some(ALL_USERS.into()),
                id: None,
                display_name: None,
                email_address: None,
            }),
            permission: Some(Permission::from_static(Permission::READ)),
        });
    }
    grants
}

/// Whether anonymous clients may read an object (or one version) of bucket `name`, and its
/// attributes: the bucket grants it and the object's own ACL does not close it.
async fn object_readable(
    s: &GristS3,
    name: &str,
    key: &str,
    version_id: Option<&str>,
) -> S3Result<(bool, Attrs)> {
    let bck = s.existing(name).await?;
    let attrs = super::tagging::head(s, &bck, key, version_id).await?;
    let props = props_of(s, name).await?;
    let bucket_grants = anonymous(&props.public, &bck.name).reads_objects(&bck.name);
    let closed = attrs.get(OBJECT_ACL).as_deref() == Some("private");
    Ok((bucket_grants && !closed, attrs))
}

/// GetObjectAcl: the object's owner and who may read it.
pub(super) async fn get_object_acl(
    s: &GristS3,
    req: S3Request<GetObjectAclInput>,
) -> S3Result<S3Response<GetObjectAclOutput>> {
    let (readable, attrs) = object_readable(
        s,
        &req.input.bucket,
        &req.input.key,
        req.input.version_id.as_deref(),
    )
    .await?;
    let owner = owner_of(&attrs, &props_of(s, &req.input.bucket).await?.owner);
    Ok(S3Response::new(GetObjectAclOutput {
        grants: Some(grants(&owner, readable)),
        owner: Some(owner),
        ..Default::default()
    }))
}

/// PutObjectAcl: `private` (and the bucket-owner grants) closes the object to anonymous reads
/// whatever its bucket grants; `public-read` reopens it where its bucket grants reads. Any
/// other is NotImplemented — accepting an ACL it cannot keep would be a silent lie.
pub(super) async fn put_object_acl(
    s: &GristS3,
    req: S3Request<PutObjectAclInput>,
) -> S3Result<S3Response<PutObjectAclOutput>> {
    let (_, attrs) = object_readable(
        s,
        &req.input.bucket,
        &req.input.key,
        req.input.version_id.as_deref(),
    )
    .await?;
    let bck = s.existing(&req.input.bucket).await?;
    let bucket_grants = anonymous(&props_of(s, &req.input.bucket).await?.public, &bck.name)
        .reads_objects(&bck.name);
    let Some(acl) = &req.input.acl else {
        return Err(s3_error!(
            NotImplemented,
            "only canned object ACLs (x-amz-acl) are supported"
        ));
    };
    if enforced(&props_of(s, &req.input.bucket).await?) {
        return Err(acls_disabled());
    }
    let wanted = match acl.as_str() {
        ObjectCannedACL::PRIVATE
        | ObjectCannedACL::BUCKET_OWNER_FULL_CONTROL
        | ObjectCannedACL::BUCKET_OWNER_READ => false,
        ObjectCannedACL::PUBLIC_READ => true,
        other => {
            return Err(s3_error!(
                NotImplemented,
                "canned ACL {other}: only private and public-read are supported"
            ));
        }
    };
    if wanted && !bucket_grants {
        return Err(s3_error!(
            NotImplemented,
            "an object can be public-read here only in a bucket whose ACL or policy opens its objects"
        ));
    }
    let change = if wanted {
        serde_json::json!({"delete": [OBJECT_ACL]})
    } else {
        serde_json::json!({"set": {OBJECT_ACL: "private"}})
    };
    if attrs.get(OBJECT_ACL).as_deref() != Some("private") || wanted {
        super::tagging::patch(
            s,
            &req.input.bucket,
            &req.input.key,
            req.input.version_id.as_deref(),
            change,
            false,
        )
        .await?;
    }
    Ok(S3Response::new(PutObjectAclOutput::default()))
}

/// S3's object ownership setting that disables ACLs: every object is the bucket owner's,
/// which is how Gristmill keeps objects anyway.
const BUCKET_OWNER_ENFORCED: &str = "BucketOwnerEnforced";

/// Whether the bucket's ownership controls disable ACLs.
pub(super) fn enforced(props: &gristmill_core::api::BucketProps) -> bool {
    props.s3.object_ownership == BUCKET_OWNER_ENFORCED
}

pub(super) fn acls_disabled() -> s3s::S3Error {
    s3_error!(
        AccessControlListNotSupported,
        "The bucket does not allow ACLs"
    )
}

/// An ObjectOwnership value: `BucketOwnerEnforced` (objects belong to the bucket owner, ACLs
/// off), `ObjectWriter` (the writer owns what it writes, recorded with the object) or
/// `BucketOwnerPreferred` (likewise, unless written with `bucket-owner-full-control`).
pub(super) fn ownership_kept(value: &str) -> S3Result<()> {
    match value {
        BUCKET_OWNER_ENFORCED
        | ObjectOwnership::OBJECT_WRITER
        | ObjectOwnership::BUCKET_OWNER_PREFERRED => Ok(()),
        other => Err(s3_error!(MalformedXML, "unknown ObjectOwnership {other}")),
    }
}

pub(super) async fn put_bucket_ownership_controls(
    s: &GristS3,
    req: S3Request<PutBucketOwnershipControlsInput>,
) -> S3Result<S3Response<PutBucketOwnershipControlsOutput>> {
    let (bck, props) = administered(
        s,
        &req.input.bucket,
        req.credentials.as_ref(),
        Some("s3:PutBucketOwnershipControls"),
    )
    .await?;
    let rules = &req.input.ownership_controls.rules;
    let [rule] = rules.as_slice() else {
        return Err(s3_error!(MalformedXML, "OwnershipControls takes one rule"));
    };
    let value = rule.object_ownership.as_str();
    ownership_kept(value)?;
    if props.public.acl_read && value == BUCKET_OWNER_ENFORCED {
        return Err(s3_error!(
            InvalidBucketAclWithObjectOwnership,
            "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting"
        ));
    }
    s.set_props(
        &bck,
        serde_json::json!({ "s3": { "object_ownership": value } }),
    )
    .await?;
    Ok(S3Response::new(PutBucketOwnershipControlsOutput::default()))
}

pub(super) async fn get_bucket_ownership_controls(
    s: &GristS3,
    req: S3Request<GetBucketOwnershipControlsInput>,
) -> S3Result<S3Response<GetBucketOwnershipControlsOutput>> {
    let props = props_of(s, &req.input.bucket).await?;
    if props.s3.object_ownership.is_empty() {
        return Err(s3_error!(
            OwnershipControlsNotFoundError,
            "The bucket ownership controls were not found"
        ));
    }
    Ok(S3Response::new(GetBucketOwnershipControlsOutput {
        ownership_controls: Some(OwnershipControls {
            rules: vec![OwnershipControlsRule {
                object_ownership: ObjectOwnership::from(props.s3.object_ownership),
            }],
        }),
    }))
}

pub(super) async fn delete_bucket_ownership_controls(
    s: &GristS3,
    req: S3Request<DeleteBucketOwnershipControlsInput>,
) -> S3Result<S3Response<DeleteBucketOwnershipControlsOutput>> {
    let (bck, _) = administered(
        s,
        &req.input.bucket,
        req.credentials.as_ref(),
        Some("s3:PutBucketOwnershipControls"),
    )
    .await?;
    s.set_props(
        &bck,
        serde_json::json!({ "s3": { "object_ownership": "" } }),
    )
    .await?;
    Ok(S3Response::new(
        DeleteBucketOwnershipControlsOutput::default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_grant_anonymous_actions_on_their_resources() {
        let get = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}]}"#;
        let may = policy_grants(get, "b").unwrap();
        assert!(may.allows("s3:GetObject", "arn:aws:s3:::b/k"));
        assert!(!may.allows("s3:GetObjectVersion", "arn:aws:s3:::b/k"));
        assert!(!may.allows("s3:ListBucket", "arn:aws:s3:::b"));
        assert!(!may.allows("s3:PutObject", "arn:aws:s3:::b/k"));
        let list = r#"{"Statement":{"Effect":"Allow","Principal":{"AWS":["*"]},"Action":["s3:ListBucket"],"Resource":"arn:aws:s3:::b"}}"#;
        assert!(
            policy_grants(list, "b")
                .unwrap()
                .allows("s3:ListBucket", "arn:aws:s3:::b")
        );
        let all = r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"*","Resource":["arn:aws:s3:::b","arn:aws:s3:::b/*"]}]}"#;
        let may = policy_grants(all, "b").unwrap();
        assert!(may.allows("s3:PutObject", "arn:aws:s3:::b/x/y"));
        assert!(may.allows("s3:ListBucket", "arn:aws:s3:::b"));
        assert!(!may.allows("s3:ListBucket", "arn:aws:s3:::other"));
        let prefix = r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:Get*","Resource":"arn:aws:s3:::b/pub/*"}]}"#;
        let may = policy_grants(prefix, "b").unwrap();
        assert!(may.allows("s3:GetObject", "arn:aws:s3:::b/pub/a"));
        assert!(!may.allows("s3:GetObject", "arn:aws:s3:::b/private/a"));
        let code = |doc: &str| {
            policy_grants(doc, "b")
                .unwrap_err()
                .code()
                .as_str()
                .to_owned()
        };
        assert_eq!(code("not json"), "MalformedPolicy");
        assert_eq!(
            code(
                r#"{"Statement":[{"Effect":"Deny","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}]}"#
            ),
            "NotImplemented"
        );
        assert_eq!(
            code(
                r#"{"Statement":[{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::1:root"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}]}"#
            ),
            "NotImplemented"
        );
        assert_eq!(
            code(
                r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*","Condition":{"StringEquals":{"s3:ExistingObjectTag/k":"v"}}}]}"#
            ),
            "NotImplemented"
        );
        assert_eq!(
            code(
                r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::other/*"}]}"#
            ),
            "MalformedPolicy"
        );
        assert_eq!(
            code(
                r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bb/*"}]}"#
            ),
            "MalformedPolicy"
        );
        let public = PublicProps {
            acl_read: true,
            policy: String::new(),
        };
        let may = anonymous(&public, "b");
        assert!(may.reads_objects("b") && may.allows("s3:ListBucket", "arn:aws:s3:::b"));
    }

    #[test]
    fn wildcards_match_as_iam_does() {
        assert!(wildcard_match("*", "s3:PutObject"));
        assert!(wildcard_match("s3:*", "s3:PutObject"));
        assert!(wildcard_match("S3:get*", "s3:GetObject"));
        assert!(!wildcard_match("s3:Get*", "s3:PutObject"));
        assert!(wildcard_match("arn:aws:s3:::b/*/x", "arn:aws:s3:::b/a/b/x"));
        assert!(!wildcard_match("arn:aws:s3:::B/*", "arn:aws:s3:::b/a"));
        assert!(wildcard_match("arn:aws:s3:::b/?", "arn:aws:s3:::b/a"));
    }
}

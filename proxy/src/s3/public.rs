//! Anonymous reads of a bucket, granted the two ways S3 clients grant them: a `public-read`
//! ACL (CreateBucket, PutBucketAcl) and a bucket policy allowing everyone (`"Principal": "*"`)
//! `s3:GetObject` on `arn:aws:s3:::b/*` and/or `s3:ListBucket` on `arn:aws:s3:::b`. Both map
//! to the bucket property `public`; the S3 front's access check lets the granted unsigned
//! reads through on that bucket and refuses every other anonymous request.
//!
//! A `public-read` bucket ACL opens listing *and* object reads. In S3 it opens listing only,
//! and each object needs its own ACL; Gristmill has no object ACLs, so the bucket's stands for
//! its objects (what "a public-read bucket" means to its users).
//!
//! A policy is accepted only if every statement is one of those grants: anything else (Deny,
//! conditions, other principals or actions) would be a promise this front cannot keep, so it
//! is NotImplemented rather than stored and ignored.

use super::common::*;
use gristmill_core::api::PublicProps;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};
use serde_json::Value;

/// What anonymous clients may do with a bucket.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Anonymous {
    pub(super) get: bool,
    pub(super) list: bool,
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
            "bucket policies may only allow everyone s3:GetObject on arn:aws:s3:::{bucket}/* and s3:ListBucket on arn:aws:s3:::{bucket}: {why}"
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
        if st.get("Condition").is_some() || st.get("NotAction").is_some() {
            return Err(unsupported("conditions and NotAction".into()));
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
        let objects = format!("arn:aws:s3:::{bucket}/*");
        let itself = format!("arn:aws:s3:::{bucket}");
        for action in actions {
            match action {
                "s3:GetObject" if resources.iter().all(|r| *r == objects) => grants.get = true,
                "s3:ListBucket" if resources.iter().all(|r| *r == itself) => grants.list = true,
                "s3:GetObject" | "s3:ListBucket" => {
                    return Err(malformed("Policy has invalid resource"));
                }
                other => return Err(unsupported(format!("action {other}"))),
            }
        }
    }
    Ok(grants)
}

/// What anonymous clients may do with a bucket of these properties.
pub(super) fn anonymous(public: &PublicProps, bucket: &str) -> Anonymous {
    let policy = if public.policy.is_empty() {
        Anonymous::default()
    } else {
        // Validated when it was put.
        policy_grants(&public.policy, bucket).unwrap_or_default()
    };
    Anonymous {
        get: policy.get || public.acl_read,
        list: policy.list || public.acl_read,
    }
}

/// The bucket and its properties, if the requester may change its access: its owner or an
/// admin. A bucket nobody owns (a remote bucket, added on first use; one made before auth)
/// is an admin's to open once cluster users exist (as over the native API), else anyone's
/// who may write to it.
pub(super) async fn administered(
    s: &GristS3,
    name: &str,
    credentials: Option<&s3s::auth::Credentials>,
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
    if admin || (!props.owner.is_empty() && props.owner == me) || unowned_and_no_cluster_users {
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
    let (bck, props) = administered(s, &req.input.bucket, req.credentials.as_ref()).await?;
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
    let (bck, props) = administered(s, &req.input.bucket, req.credentials.as_ref()).await?;
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
    let (bck, props) = administered(s, &req.input.bucket, req.credentials.as_ref()).await?;
    let Some(acl) = &req.input.acl else {
        return Err(s3_error!(
            NotImplemented,
            "only canned ACLs (x-amz-acl: private or public-read) are supported"
        ));
    };
    let readable = acl_read(acl)?;
    if readable && enforced(&props) {
        return Err(acls_disabled());
    }
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

/// Whether anonymous clients may read the objects of bucket `name`, once the object exists.
async fn objects_readable(s: &GristS3, name: &str, key: &str) -> S3Result<bool> {
    let bck = s.existing(name).await?;
    let resp = s
        .send(s.proxy.http.head(s.owner_url("objects", &bck, key)?))
        .await?;
    if !resp.status().is_success() {
        return Err(node_error(resp, true).await);
    }
    let props = props_of(s, name).await?;
    Ok(anonymous(&props.public, &bck.name).get)
}

/// GetObjectAcl: the object's owner (as listings name it) and what its bucket grants.
pub(super) async fn get_object_acl(
    s: &GristS3,
    req: S3Request<GetObjectAclInput>,
) -> S3Result<S3Response<GetObjectAclOutput>> {
    let readable = objects_readable(s, &req.input.bucket, &req.input.key).await?;
    Ok(S3Response::new(GetObjectAclOutput {
        grants: Some(grants(&owner(), readable)),
        owner: Some(owner()),
        ..Default::default()
    }))
}

/// PutObjectAcl: a canned ACL that states what the object's bucket already grants is
/// accepted (nothing changes); any other is NotImplemented — Gristmill has no per-object ACLs,
/// and accepting one it cannot keep would be a silent lie.
pub(super) async fn put_object_acl(
    s: &GristS3,
    req: S3Request<PutObjectAclInput>,
) -> S3Result<S3Response<PutObjectAclOutput>> {
    let readable = objects_readable(s, &req.input.bucket, &req.input.key).await?;
    let Some(acl) = &req.input.acl else {
        return Err(s3_error!(
            NotImplemented,
            "only canned object ACLs (x-amz-acl) are supported"
        ));
    };
    let wanted = match acl.as_str() {
        ObjectCannedACL::PRIVATE | ObjectCannedACL::BUCKET_OWNER_FULL_CONTROL => false,
        _ if enforced(&props_of(s, &req.input.bucket).await?) => return Err(acls_disabled()),
        ObjectCannedACL::PUBLIC_READ => true,
        other => {
            return Err(s3_error!(
                NotImplemented,
                "canned ACL {other}: only private and public-read are supported"
            ));
        }
    };
    if wanted != readable {
        return Err(s3_error!(
            NotImplemented,
            "objects have no ACLs of their own here: they are {} like their bucket; change the bucket's ACL or policy",
            if readable { "public-read" } else { "private" }
        ));
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

/// An ObjectOwnership value this front can keep: `BucketOwnerEnforced` (objects belong to
/// the bucket owner, ACLs off). `ObjectWriter` and `BucketOwnerPreferred` would make the
/// uploading account an object's owner; objects have no owners of their own here, so they
/// are NotImplemented rather than stored and ignored.
pub(super) fn ownership_kept(value: &str) -> S3Result<()> {
    match value {
        BUCKET_OWNER_ENFORCED => Ok(()),
        ObjectOwnership::OBJECT_WRITER | ObjectOwnership::BUCKET_OWNER_PREFERRED => Err(s3_error!(
            NotImplemented,
            "ObjectOwnership {value}: objects are owned by their bucket's owner here (only BucketOwnerEnforced is supported)"
        )),
        other => Err(s3_error!(MalformedXML, "unknown ObjectOwnership {other}")),
    }
}

pub(super) async fn put_bucket_ownership_controls(
    s: &GristS3,
    req: S3Request<PutBucketOwnershipControlsInput>,
) -> S3Result<S3Response<PutBucketOwnershipControlsOutput>> {
    let (bck, props) = administered(s, &req.input.bucket, req.credentials.as_ref()).await?;
    let rules = &req.input.ownership_controls.rules;
    let [rule] = rules.as_slice() else {
        return Err(s3_error!(MalformedXML, "OwnershipControls takes one rule"));
    };
    let value = rule.object_ownership.as_str();
    ownership_kept(value)?;
    if props.public.acl_read {
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
    let (bck, _) = administered(s, &req.input.bucket, req.credentials.as_ref()).await?;
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
    fn policies_grant_anonymous_reads_and_nothing_else() {
        let get = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}]}"#;
        assert_eq!(
            policy_grants(get, "b").unwrap(),
            Anonymous {
                get: true,
                list: false
            }
        );
        let both = r#"{"Statement":{"Effect":"Allow","Principal":{"AWS":["*"]},"Action":["s3:ListBucket"],"Resource":"arn:aws:s3:::b"}}"#;
        assert!(policy_grants(both, "b").unwrap().list);
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
                r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::b/*"}]}"#
            ),
            "NotImplemented"
        );
        assert_eq!(
            code(
                r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::other/*"}]}"#
            ),
            "MalformedPolicy"
        );
        let public = PublicProps {
            acl_read: true,
            policy: String::new(),
        };
        assert_eq!(
            anonymous(&public, "b"),
            Anonymous {
                get: true,
                list: true
            }
        );
    }
}

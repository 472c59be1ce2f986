"""S3 Object Lock through the S3 front (issue 32), with boto3 against a real cluster: buckets
created with Object Lock are versioned and stay so; retention (GOVERNANCE, COMPLIANCE) and legal
holds refuse deletes of the version they protect, as AWS's Object Lock documentation says:

- GOVERNANCE: a version delete is refused (403 AccessDenied) unless the request bypasses
  governance retention; the retention may be extended, shortened only with the bypass;
- COMPLIANCE: refused even with the bypass; the retention can only be extended;
- a legal hold refuses deletes whatever the retention, until it is turned off;
- the bucket's default retention applies to new objects; lock headers on a bucket without
  Object Lock are refused (400), never ignored; a copy does not take its source's lock.

Every refused delete is checked to have lost nothing: the version still reads back whole.
"""

from __future__ import annotations

import datetime

import pytest

from s3util import make_s3, new_bucket_name, outcome

FAR = datetime.datetime(2035, 1, 1, tzinfo=datetime.timezone.utc)


@pytest.fixture
def s3(s3_endpoint, default_creds):
    c = make_s3(s3_endpoint, default_creds)
    yield c
    c.close()


@pytest.fixture
def lock_bucket(s3):
    name = new_bucket_name("lock")
    s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    return name


def _still_there(s3, bucket, key, version, body):
    got = s3.get_object(Bucket=bucket, Key=key, VersionId=version)
    assert got["Body"].read() == body


def test_lock_bucket_is_versioned_and_stays_so(s3, lock_bucket):
    assert s3.get_bucket_versioning(Bucket=lock_bucket)["Status"] == "Enabled"
    assert outcome(lambda: s3.put_bucket_versioning(
        Bucket=lock_bucket, VersioningConfiguration={"Status": "Suspended"},
    )) == ("InvalidBucketState", 409)
    conf = s3.get_object_lock_configuration(Bucket=lock_bucket)["ObjectLockConfiguration"]
    assert conf == {"ObjectLockEnabled": "Enabled"}


def test_governance_retention_refuses_deletes_without_the_bypass(s3, lock_bucket):
    v = s3.put_object(Bucket=lock_bucket, Key="g", Body=b"governed")["VersionId"]
    s3.put_object_retention(Bucket=lock_bucket, Key="g",
                            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": FAR})
    got = s3.get_object_retention(Bucket=lock_bucket, Key="g")["Retention"]
    assert got == {"Mode": "GOVERNANCE", "RetainUntilDate": FAR}
    head = s3.head_object(Bucket=lock_bucket, Key="g")
    assert head["ObjectLockMode"] == "GOVERNANCE"
    assert head["ObjectLockRetainUntilDate"] == FAR

    assert outcome(lambda: s3.delete_object(Bucket=lock_bucket, Key="g", VersionId=v)) \
        == ("AccessDenied", 403)
    _still_there(s3, lock_bucket, "g", v, b"governed")
    # A plain delete only adds a delete marker: allowed, and the version stays.
    marker = s3.delete_object(Bucket=lock_bucket, Key="g")
    assert marker["DeleteMarker"] is True
    _still_there(s3, lock_bucket, "g", v, b"governed")
    # Multi-object delete of the version is refused per key as well.
    out = s3.delete_objects(Bucket=lock_bucket,
                            Delete={"Objects": [{"Key": "g", "VersionId": v}]})
    assert [e["Code"] for e in out.get("Errors", [])] == ["AccessDenied"]
    _still_there(s3, lock_bucket, "g", v, b"governed")
    # Shortening needs the bypass.
    sooner = FAR - datetime.timedelta(days=365)
    assert outcome(lambda: s3.put_object_retention(
        Bucket=lock_bucket, Key="g", VersionId=v,
        Retention={"Mode": "GOVERNANCE", "RetainUntilDate": sooner},
    )) == ("AccessDenied", 403)
    s3.put_object_retention(Bucket=lock_bucket, Key="g", VersionId=v,
                            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": sooner},
                            BypassGovernanceRetention=True)
    s3.delete_object(Bucket=lock_bucket, Key="g", VersionId=v, BypassGovernanceRetention=True)
    assert outcome(lambda: s3.head_object(Bucket=lock_bucket, Key="g", VersionId=v))[1] == 404


def test_compliance_retention_is_never_bypassed_and_only_extended(s3, lock_bucket):
    v = s3.put_object(Bucket=lock_bucket, Key="c", Body=b"complied",
                      ObjectLockMode="COMPLIANCE", ObjectLockRetainUntilDate=FAR)["VersionId"]
    assert s3.head_object(Bucket=lock_bucket, Key="c")["ObjectLockMode"] == "COMPLIANCE"
    assert outcome(lambda: s3.delete_object(
        Bucket=lock_bucket, Key="c", VersionId=v, BypassGovernanceRetention=True,
    )) == ("AccessDenied", 403)
    assert outcome(lambda: s3.put_object_retention(
        Bucket=lock_bucket, Key="c", BypassGovernanceRetention=True,
        Retention={"Mode": "GOVERNANCE", "RetainUntilDate": FAR},
    )) == ("AccessDenied", 403)
    later = FAR + datetime.timedelta(days=30)
    s3.put_object_retention(Bucket=lock_bucket, Key="c",
                            Retention={"Mode": "COMPLIANCE", "RetainUntilDate": later})
    assert s3.get_object_retention(Bucket=lock_bucket, Key="c")["Retention"][
        "RetainUntilDate"] == later
    _still_there(s3, lock_bucket, "c", v, b"complied")


def test_legal_hold_refuses_deletes_until_released(s3, lock_bucket):
    v = s3.put_object(Bucket=lock_bucket, Key="h", Body=b"held",
                      ObjectLockLegalHoldStatus="ON")["VersionId"]
    assert s3.get_object_legal_hold(Bucket=lock_bucket, Key="h")["LegalHold"] == {"Status": "ON"}
    assert outcome(lambda: s3.delete_object(
        Bucket=lock_bucket, Key="h", VersionId=v, BypassGovernanceRetention=True,
    )) == ("AccessDenied", 403)
    _still_there(s3, lock_bucket, "h", v, b"held")
    s3.put_object_legal_hold(Bucket=lock_bucket, Key="h", LegalHold={"Status": "OFF"})
    s3.delete_object(Bucket=lock_bucket, Key="h", VersionId=v)


def test_default_retention_multipart_and_copies(s3, lock_bucket):
    s3.put_object_lock_configuration(Bucket=lock_bucket, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled",
        "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}},
    })
    assert s3.get_object_lock_configuration(Bucket=lock_bucket)["ObjectLockConfiguration"][
        "Rule"] == {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}
    before = datetime.datetime.now(datetime.timezone.utc)
    v = s3.put_object(Bucket=lock_bucket, Key="d", Body=b"x")["VersionId"]
    head = s3.head_object(Bucket=lock_bucket, Key="d")
    assert head["ObjectLockMode"] == "GOVERNANCE"
    left = head["ObjectLockRetainUntilDate"] - before
    assert datetime.timedelta(hours=23) < left < datetime.timedelta(hours=25)
    assert outcome(lambda: s3.delete_object(Bucket=lock_bucket, Key="d", VersionId=v)) \
        == ("AccessDenied", 403)

    up = s3.create_multipart_upload(Bucket=lock_bucket, Key="m", ObjectLockLegalHoldStatus="ON")
    etag = s3.upload_part(Bucket=lock_bucket, Key="m", UploadId=up["UploadId"], PartNumber=1,
                          Body=b"part")["ETag"]
    done = s3.complete_multipart_upload(
        Bucket=lock_bucket, Key="m", UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"ETag": etag, "PartNumber": 1}]})
    assert outcome(lambda: s3.delete_object(
        Bucket=lock_bucket, Key="m", VersionId=done["VersionId"], BypassGovernanceRetention=True,
    )) == ("AccessDenied", 403)

    plain = new_bucket_name("plain")
    s3.create_bucket(Bucket=plain)
    s3.copy_object(Bucket=plain, Key="copy", CopySource={"Bucket": lock_bucket, "Key": "m"})
    copied = s3.head_object(Bucket=plain, Key="copy")
    assert "ObjectLockLegalHoldStatus" not in copied and "ObjectLockMode" not in copied
    s3.delete_object(Bucket=plain, Key="copy")
    s3.delete_bucket(Bucket=plain)


def test_lock_headers_on_a_bucket_without_lock_are_refused(s3):
    name = new_bucket_name("nolock")
    s3.create_bucket(Bucket=name)
    assert outcome(lambda: s3.put_object(Bucket=name, Key="k", Body=b"x",
                                       ObjectLockLegalHoldStatus="ON")) \
        == ("InvalidRequest", 400)
    assert outcome(lambda: s3.head_object(Bucket=name, Key="k"))[1] == 404
    assert outcome(lambda: s3.get_object_lock_configuration(Bucket=name))[0] \
        == "ObjectLockConfigurationNotFoundError"
    assert outcome(lambda: s3.put_object_lock_configuration(
        Bucket=name, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"},
    )) == ("InvalidBucketState", 409)
    s3.delete_bucket(Bucket=name)


def test_native_api_cannot_strip_a_lock(s3, lock_bucket, s3_endpoint):
    """The owning target enforces the lock on every path: a native metadata PATCH removing a
    retention in force, or shortening it, is refused (403); the bucket's Object Lock and
    versioning cannot be turned off through native bucket properties (409)."""
    import json

    import requests

    v = s3.put_object(Bucket=lock_bucket, Key="n", Body=b"native",
                      ObjectLockMode="GOVERNANCE", ObjectLockRetainUntilDate=FAR)["VersionId"]
    url = f"{s3_endpoint}/v1/objects/{lock_bucket}/n"
    strip = requests.patch(url, data=json.dumps(
        {"delete": ["x-amz-object-lock-mode", "x-grist-lock-until-ns"]}), timeout=30)
    assert strip.status_code == 403, strip.text
    shorten = requests.patch(url, data=json.dumps(
        {"set": {"x-grist-lock-until-ns": "1"}}), timeout=30)
    assert shorten.status_code == 403, shorten.text
    assert s3.head_object(Bucket=lock_bucket, Key="n")["ObjectLockMode"] == "GOVERNANCE"
    # Tags still change freely.
    s3.put_object_tagging(Bucket=lock_bucket, Key="n",
                          Tagging={"TagSet": [{"Key": "a", "Value": "b"}]})
    assert outcome(lambda: s3.delete_object(Bucket=lock_bucket, Key="n", VersionId=v)) \
        == ("AccessDenied", 403)
    for value in ({"s3": {"object_lock": {"enabled": False}}},
                  {"versioning": {"s3": "Suspended"}}):
        r = requests.patch(f"{s3_endpoint}/v1/buckets/{lock_bucket}",
                           data=json.dumps({"action": "set-bprops", "value": value}), timeout=30)
        assert r.status_code == 409, (value, r.status_code, r.text)
    assert s3.get_bucket_versioning(Bucket=lock_bucket)["Status"] == "Enabled"
    s3.delete_object(Bucket=lock_bucket, Key="n", VersionId=v, BypassGovernanceRetention=True)


def test_holders_asked_by_the_owner_check_the_lock(s3, lock_bucket, s3_endpoint):
    """While a rebalance has not moved a version to its owner, the owner's delete goes to the
    targets that may still hold it, telling them to check Object Lock themselves: such a
    node-to-node delete of a locked version is refused (403) by whichever target holds it."""
    import requests

    v = s3.put_object(Bucket=lock_bucket, Key="held", Body=b"held",
                      ObjectLockLegalHoldStatus="ON")["VersionId"]
    smap = requests.get(f"{s3_endpoint}/v1/cluster?what=smap", timeout=30).json()
    answers = []
    for node in smap["tmap"].values():
        url = node["public_net"]["direct_url"].rstrip("/")
        r = requests.delete(
            f"{url}/v1/internal/objects/{lock_bucket}/held",
            params={"provider": "ais", "version_id": v},
            headers={"x-grist-lock-check": "true",
                     "x-amz-bypass-governance-retention": "true"},
            timeout=30,
        )
        answers.append(r.status_code)
    assert 403 in answers and set(answers) <= {403, 404}, answers
    assert s3.get_object(Bucket=lock_bucket, Key="held", VersionId=v)["Body"].read() == b"held"
    s3.put_object_legal_hold(Bucket=lock_bucket, Key="held", LegalHold={"Status": "OFF"})

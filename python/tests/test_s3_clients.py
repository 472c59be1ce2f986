"""Unmodified S3 clients against Gristmill's S3 front: boto3, aws cli (`aws s3`, `aws s3api`),
s3cmd, s5cmd, rclone and the minio Python SDK.

Every client runs the same flow against the auth-on cluster as the admin user: create a bucket,
put small objects and a 100 MiB object through multipart upload (16 MiB parts), list with a
prefix and a delimiter, ranged GET, server-side copy, the client's multi-object delete, remove
the bucket; contents are checked byte for byte (sha256 of the 100 MiB object). boto3 and s5cmd
also run it unsigned against the auth-off cluster.

The CLIs get explicit config files and environment in a temp dir (HOME included), so nothing
under ~ is read or written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import boto3.s3.transfer
import minio
import minio.commonconfig
import minio.deleteobjects
import pytest

from s3util import MiB, REGION, empty_and_delete, file_sha256, make_s3, multipart_etag, new_bucket_name

BIN = Path(sys.executable).parent
PART = 16 * MiB
BIG_SIZE = 100 * MiB
BIG_KEY = "big/blob.bin"
SMALL = {
    "docs/a.txt": b"alpha\n",
    "docs/b.txt": b"bravo " * 1000,
    "docs/sub/c.txt": b"charlie\n",
    "top.txt": b"top level\n",
}
RANGE = (PART - 10, PART + 999)  # inclusive, straddles the first part boundary
CLI_TIMEOUT = 300


@pytest.fixture(scope="session")
def big_file(tmp_path_factory):
    """A 100 MiB file of random bytes, made once per session; yields (path, sha256)."""
    path = tmp_path_factory.mktemp("s3big") / "blob.bin"
    with open(path, "wb") as f:
        for _ in range(BIG_SIZE // MiB):
            f.write(os.urandom(MiB))
    yield path, file_sha256(path)
    path.unlink()


@pytest.fixture(scope="session")
def big_etag(big_file) -> str:
    return multipart_etag(big_file[0], PART)


@pytest.fixture
def small_dir(tmp_path) -> Path:
    d = tmp_path / "small"
    for k, v in SMALL.items():
        p = d / k
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(v)
    return d


@pytest.fixture(scope="module")
def admin_s3(auth_s3_endpoint, admin_creds):
    """boto3 as admin: checks what the other clients did, and cleans up after a failure."""
    c = make_s3(auth_s3_endpoint, admin_creds)
    yield c
    c.close()


@pytest.fixture
def bucket_name(admin_s3):
    """A bucket name for a client to create; whatever is left of it is removed afterwards."""
    name = new_bucket_name("cli")
    yield name
    empty_and_delete(admin_s3, name)


def range_bytes(path: Path, first: int, last: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(first)
        return f.read(last - first + 1)


def check_uploaded(s3, bucket: str, big_file, big_etag: str) -> None:
    """What every client's upload must have produced, seen through boto3."""
    h = s3.head_object(Bucket=bucket, Key=BIG_KEY)
    assert h["ContentLength"] == BIG_SIZE
    assert h["ETag"] == big_etag, "the 100 MiB object was not uploaded in 16 MiB parts"
    for k, v in SMALL.items():
        assert s3.get_object(Bucket=bucket, Key=k)["Body"].read() == v, k


def check_download(path: Path, sha: str) -> None:
    """The downloaded copy of the 100 MiB object is identical; removed afterwards (disk space)."""
    try:
        assert path.stat().st_size == BIG_SIZE
        assert file_sha256(path) == sha
    finally:
        path.unlink(missing_ok=True)


def check_gone(s3, bucket: str) -> None:
    assert bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def clean_env(home: Path, **extra) -> dict:
    """Environment for a CLI: no inherited AWS_*/RCLONE_*/S3* variables, HOME in a temp dir."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "RCLONE_", "S3CMD", "S5CMD", "MINIO_"))}
    env.update(HOME=str(home), PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", AWS_EC2_METADATA_DISABLED="true")
    env.update(extra)
    return env


def tool(name: str) -> str:
    """A CLI from the test venv (python/pyproject.toml's `test` extra installs them)."""
    path = shutil.which(name, path=str(BIN)) or shutil.which(name)
    assert path, f"{name} is not installed in {BIN}: pip install -e 'python[test]'"
    return path


def run(cmd: list, env: dict, *, stdout_bytes: bool = False, stderr: bool = False) -> str | bytes:
    """Runs a CLI; fails with its output unless it exits 0. Returns stdout (as bytes, or as text
    followed by stderr when `stderr`)."""
    p = subprocess.run(cmd, env=env, capture_output=True, timeout=CLI_TIMEOUT, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, cmd))} exited {p.returncode}\n"
            f"stdout: {p.stdout[-3000:].decode(errors='replace')}\nstderr: {p.stderr[-5000:].decode(errors='replace')}"
        )
    if stdout_bytes:
        return p.stdout
    return p.stdout.decode() + (p.stderr.decode() if stderr else "")


# --- boto3 ------------------------------------------------------------------------------------


def boto3_flow(s3, bucket: str, big_file, small_dir: Path, tmp_path: Path, check_s3, big_etag: str) -> None:
    path, sha = big_file
    s3.create_bucket(Bucket=bucket)
    for k in SMALL:
        s3.upload_file(str(small_dir / k), bucket, k)
    cfg = boto3.s3.transfer.TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=PART, max_concurrency=4)
    s3.upload_file(str(path), bucket, BIG_KEY, Config=cfg)
    check_uploaded(check_s3, bucket, big_file, big_etag)

    r = s3.list_objects_v2(Bucket=bucket, Prefix="docs/", Delimiter="/")
    assert [o["Key"] for o in r["Contents"]] == ["docs/a.txt", "docs/b.txt"]
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["docs/sub/"]
    r = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [o["Key"] for o in r["Contents"]] == ["top.txt"]
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["big/", "docs/"]

    first, last = RANGE
    got = s3.get_object(Bucket=bucket, Key=BIG_KEY, Range=f"bytes={first}-{last}")["Body"].read()
    assert got == range_bytes(path, first, last)
    out = tmp_path / "big.down"
    s3.download_file(bucket, BIG_KEY, str(out), Config=cfg)  # parallel ranged GETs
    check_download(out, sha)

    s3.copy_object(Bucket=bucket, Key="copies/a.txt", CopySource={"Bucket": bucket, "Key": "docs/a.txt"})
    assert s3.get_object(Bucket=bucket, Key="copies/a.txt")["Body"].read() == SMALL["docs/a.txt"]

    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert sorted(keys) == sorted([*SMALL, BIG_KEY, "copies/a.txt"])
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys]})
    assert sorted(d["Key"] for d in r["Deleted"]) == sorted(keys) and not r.get("Errors")
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    s3.delete_bucket(Bucket=bucket)
    check_gone(check_s3, bucket)


def test_boto3(admin_s3, bucket_name, big_file, big_etag, small_dir, tmp_path):
    boto3_flow(admin_s3, bucket_name, big_file, small_dir, tmp_path, admin_s3, big_etag)


def test_boto3_anonymous(s3_endpoint, big_file, big_etag, small_dir, tmp_path):
    anon = make_s3(s3_endpoint, None)
    name = new_bucket_name("anon")
    try:
        boto3_flow(anon, name, big_file, small_dir, tmp_path, anon, big_etag)
    finally:
        empty_and_delete(anon, name)


# --- aws cli ----------------------------------------------------------------------------------


@pytest.fixture
def aws(tmp_path, auth_s3_endpoint, admin_creds):
    """Runs `aws` with its own config and credentials files (16 MiB multipart parts)."""
    home = tmp_path / "aws-home"
    home.mkdir()
    (home / "config").write_text(
        f"[default]\nregion = {REGION}\noutput = json\n"
        "s3 =\n    addressing_style = path\n    multipart_threshold = 8MB\n    multipart_chunksize = 16MB\n"
    )
    (home / "credentials").write_text(
        f"[default]\naws_access_key_id = {admin_creds.access_key}\naws_secret_access_key = {admin_creds.secret_key}\n"
    )
    env = clean_env(home, AWS_CONFIG_FILE=str(home / "config"), AWS_SHARED_CREDENTIALS_FILE=str(home / "credentials"))
    exe = tool("aws")

    def aws_(*args, stdout_bytes=False):
        return run([exe, "--endpoint-url", auth_s3_endpoint, *map(str, args)], env, stdout_bytes=stdout_bytes)

    return aws_


def test_aws_s3(aws, admin_s3, bucket_name, big_file, big_etag, small_dir, tmp_path):
    path, sha = big_file
    b = f"s3://{bucket_name}"
    aws("s3", "mb", b)
    aws("s3", "cp", "--recursive", small_dir, f"{b}/")
    aws("s3", "cp", path, f"{b}/{BIG_KEY}")
    check_uploaded(admin_s3, bucket_name, big_file, big_etag)

    lines = aws("s3", "ls", f"{b}/docs/").splitlines()
    assert [ln.split()[-1] for ln in lines] == ["sub/", "a.txt", "b.txt"], lines
    assert lines[0].split() == ["PRE", "sub/"]
    assert lines[2].split()[2] == str(len(SMALL["docs/b.txt"]))
    lines = aws("s3", "ls", "--recursive", b).splitlines()
    assert sorted(ln.split()[-1] for ln in lines) == sorted([*SMALL, BIG_KEY])

    out = tmp_path / "big.down"
    aws("s3", "cp", f"{b}/{BIG_KEY}", out)  # multipart download: parallel ranged GETs
    check_download(out, sha)
    assert aws("s3", "cp", f"{b}/docs/a.txt", "-", stdout_bytes=True) == SMALL["docs/a.txt"]

    aws("s3", "cp", f"{b}/docs/a.txt", f"{b}/copies/a.txt")
    aws("s3", "cp", f"{b}/{BIG_KEY}", f"{b}/copies/big.bin")  # large: multipart UploadPartCopy
    h = admin_s3.head_object(Bucket=bucket_name, Key="copies/big.bin")
    assert h["ContentLength"] == BIG_SIZE and h["ETag"] == big_etag
    assert admin_s3.get_object(Bucket=bucket_name, Key="copies/a.txt")["Body"].read() == SMALL["docs/a.txt"]
    aws("s3", "mv", f"{b}/copies/a.txt", f"{b}/moved/a.txt")
    assert aws("s3", "cp", f"{b}/moved/a.txt", "-", stdout_bytes=True) == SMALL["docs/a.txt"]

    sync_dir = tmp_path / "synced"
    aws("s3", "sync", f"{b}/docs", sync_dir)
    assert (sync_dir / "sub" / "c.txt").read_bytes() == SMALL["docs/sub/c.txt"]

    aws("s3", "rm", "--recursive", b)
    assert admin_s3.list_objects_v2(Bucket=bucket_name)["KeyCount"] == 0
    aws("s3", "rb", b)
    check_gone(admin_s3, bucket_name)


def test_aws_s3api(aws, admin_s3, bucket_name, big_file, big_etag, small_dir, tmp_path):
    path, sha = big_file
    bk = ["--bucket", bucket_name]
    aws("s3api", "create-bucket", *bk)
    aws("s3api", "head-bucket", *bk)
    for k in SMALL:
        r = json.loads(aws("s3api", "put-object", *bk, "--key", k, "--body", small_dir / k,
                           "--content-type", "text/plain", "--metadata", "origin=s3api"))
        assert r["ETag"] == f'"{hashlib.md5(SMALL[k]).hexdigest()}"'
    h = json.loads(aws("s3api", "head-object", *bk, "--key", "docs/a.txt"))
    assert h["ContentType"] == "text/plain" and h["Metadata"] == {"origin": "s3api"}

    # Multipart by hand: 16 MiB parts cut from the big file.
    uid = json.loads(aws("s3api", "create-multipart-upload", *bk, "--key", BIG_KEY))["UploadId"]
    ups = json.loads(aws("s3api", "list-multipart-uploads", *bk))["Uploads"]
    assert [u["UploadId"] for u in ups] == [uid]
    parts = []
    with open(path, "rb") as f:
        n = 0
        while chunk := f.read(PART):
            n += 1
            part = tmp_path / f"part{n}"
            part.write_bytes(chunk)
            r = json.loads(aws("s3api", "upload-part", *bk, "--key", BIG_KEY, "--upload-id", uid,
                               "--part-number", n, "--body", part))
            part.unlink()
            parts.append({"PartNumber": n, "ETag": r["ETag"]})
    listed = json.loads(aws("s3api", "list-parts", *bk, "--key", BIG_KEY, "--upload-id", uid))["Parts"]
    assert [p["PartNumber"] for p in listed] == list(range(1, len(parts) + 1))
    mpu = tmp_path / "mpu.json"
    mpu.write_text(json.dumps({"Parts": parts}))
    r = json.loads(aws("s3api", "complete-multipart-upload", *bk, "--key", BIG_KEY, "--upload-id", uid,
                       "--multipart-upload", f"file://{mpu}"))
    assert r["ETag"] == big_etag
    check_uploaded(admin_s3, bucket_name, big_file, big_etag)

    r = json.loads(aws("s3api", "list-objects-v2", *bk, "--prefix", "docs/", "--delimiter", "/"))
    assert [o["Key"] for o in r["Contents"]] == ["docs/a.txt", "docs/b.txt"]
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["docs/sub/"]
    r = json.loads(aws("s3api", "list-objects", *bk, "--prefix", "docs/", "--delimiter", "/"))
    assert [o["Key"] for o in r["Contents"]] == ["docs/a.txt", "docs/b.txt"]

    first, last = RANGE
    out = tmp_path / "range.out"
    r = json.loads(aws("s3api", "get-object", *bk, "--key", BIG_KEY, "--range", f"bytes={first}-{last}", out))
    assert r["ContentRange"] == f"bytes {first}-{last}/{BIG_SIZE}"
    assert out.read_bytes() == range_bytes(path, first, last)
    out = tmp_path / "big.down"
    aws("s3api", "get-object", *bk, "--key", BIG_KEY, out)
    check_download(out, sha)

    aws("s3api", "copy-object", *bk, "--key", "copies/a.txt", "--copy-source", f"{bucket_name}/docs/a.txt",
        "--metadata-directive", "REPLACE", "--metadata", "copied=yes")
    h = json.loads(aws("s3api", "head-object", *bk, "--key", "copies/a.txt"))
    assert h["Metadata"] == {"copied": "yes"} and h["ContentLength"] == len(SMALL["docs/a.txt"])

    keys = [o["Key"] for o in json.loads(aws("s3api", "list-objects-v2", *bk))["Contents"]]
    assert len(keys) == len(SMALL) + 2
    dl = tmp_path / "delete.json"
    dl.write_text(json.dumps({"Objects": [{"Key": k} for k in keys], "Quiet": False}))
    r = json.loads(aws("s3api", "delete-objects", *bk, "--delete", f"file://{dl}"))
    assert sorted(d["Key"] for d in r["Deleted"]) == sorted(keys)
    r = json.loads(aws("s3api", "list-objects-v2", "--no-paginate", *bk))
    assert r["KeyCount"] == 0 and "Contents" not in r
    aws("s3api", "delete-bucket", *bk)
    check_gone(admin_s3, bucket_name)


# --- s3cmd ------------------------------------------------------------------------------------


@pytest.fixture
def s3cmd(tmp_path, auth_s3_endpoint, admin_creds):
    home = tmp_path / "s3cmd-home"
    home.mkdir()
    hostport = urlparse(auth_s3_endpoint).netloc
    cfg = home / "s3cfg"
    cfg.write_text(
        "[default]\n"
        f"access_key = {admin_creds.access_key}\nsecret_key = {admin_creds.secret_key}\n"
        f"host_base = {hostport}\nhost_bucket = {hostport}\n"
        f"bucket_location = {REGION}\n"
        "use_https = False\nsignature_v2 = False\n"
        "multipart_chunk_size_mb = 16\nenable_multipart = True\n"
        "progress_meter = False\n"
    )
    env = clean_env(home)
    exe = tool("s3cmd")

    def s3cmd_(*args):
        return run([sys.executable, exe, "-c", str(cfg), *map(str, args)], env)

    return s3cmd_


def test_s3cmd(s3cmd, admin_s3, bucket_name, big_file, big_etag, small_dir, tmp_path):
    path, sha = big_file
    b = f"s3://{bucket_name}"
    s3cmd("mb", b)
    for k in SMALL:
        s3cmd("put", small_dir / k, f"{b}/{k}")
    s3cmd("put", path, f"{b}/{BIG_KEY}")
    check_uploaded(admin_s3, bucket_name, big_file, big_etag)

    lines = s3cmd("ls", f"{b}/docs/").splitlines()
    assert [ln.split()[-1] for ln in lines] == [f"{b}/docs/sub/", f"{b}/docs/a.txt", f"{b}/docs/b.txt"], lines
    assert lines[0].split()[0] == "DIR"
    lines = s3cmd("ls", "--recursive", b).splitlines()
    assert sorted(ln.split()[-1] for ln in lines) == sorted(f"{b}/{k}" for k in [*SMALL, BIG_KEY])
    info = s3cmd("info", f"{b}/{BIG_KEY}")
    assert str(BIG_SIZE) in info

    # Ranged GET: `get --continue` fetches only what a partial local file lacks.
    out = tmp_path / "big.down"
    with open(path, "rb") as f:
        out.write_bytes(f.read(RANGE[0]))
    s3cmd("get", "--continue", f"{b}/{BIG_KEY}", out)
    check_download(out, sha)
    s3cmd("get", f"{b}/{BIG_KEY}", out)
    check_download(out, sha)

    s3cmd("cp", f"{b}/docs/a.txt", f"{b}/copies/a.txt")
    s3cmd("modify", "--add-header=Cache-Control:max-age=60", f"{b}/copies/a.txt")  # copy onto itself, REPLACE
    h = admin_s3.head_object(Bucket=bucket_name, Key="copies/a.txt")
    assert h["CacheControl"] == "max-age=60"
    got = tmp_path / "a.txt"
    s3cmd("get", f"{b}/copies/a.txt", got)
    assert got.read_bytes() == SMALL["docs/a.txt"]

    s3cmd("del", "--recursive", "--force", b)  # batch delete (DeleteObjects)
    assert admin_s3.list_objects_v2(Bucket=bucket_name)["KeyCount"] == 0
    s3cmd("rb", b)
    check_gone(admin_s3, bucket_name)


# --- s5cmd ------------------------------------------------------------------------------------


def s5cmd_env(home: Path, creds) -> dict:
    home.mkdir()
    extra = {"AWS_REGION": REGION, "AWS_CONFIG_FILE": str(home / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(home / "none")}
    if creds is not None:
        extra.update(AWS_ACCESS_KEY_ID=creds.access_key, AWS_SECRET_ACCESS_KEY=creds.secret_key)
    return clean_env(home, **extra)


def s5cmd_runner(endpoint: str, env: dict, sign: list):
    exe = tool("s5cmd")

    def s5(*args, stdout_bytes=False):
        return run([exe, "--endpoint-url", endpoint, *sign, *map(str, args)], env, stdout_bytes=stdout_bytes)

    return s5


def s5cmd_flow(endpoint: str, env: dict, sign: list, check_s3, bucket: str, big_file, big_etag, small_dir, tmp_path):
    path, sha = big_file
    s5 = s5cmd_runner(endpoint, env, sign)

    b = f"s3://{bucket}"
    s5("mb", b)
    s5("cp", f"{small_dir}/*", f"{b}/")
    s5("cp", "--part-size", PART // MiB, "--concurrency", 4, path, f"{b}/{BIG_KEY}")
    check_uploaded(check_s3, bucket, big_file, big_etag)

    lines = s5("ls", f"{b}/docs/").splitlines()
    assert [ln.split()[-1] for ln in lines] == ["sub/", "a.txt", "b.txt"], lines
    lines = s5("ls", f"{b}/*").splitlines()
    assert sorted(ln.split()[-1] for ln in lines) == sorted([*SMALL, BIG_KEY])

    out = tmp_path / "big.down"
    s5("cp", "--part-size", 8, "--concurrency", 4, f"{b}/{BIG_KEY}", out)  # parallel ranged GETs
    check_download(out, sha)
    assert s5("cat", f"{b}/docs/b.txt", stdout_bytes=True) == SMALL["docs/b.txt"]

    s5("cp", f"{b}/docs/a.txt", f"{b}/copies/a.txt")  # server-side copy
    assert s5("cat", f"{b}/copies/a.txt", stdout_bytes=True) == SMALL["docs/a.txt"]

    s5("rm", f"{b}/*")  # DeleteObjects in batches
    assert check_s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    s5("rb", b)
    check_gone(check_s3, bucket)


def test_s5cmd(auth_s3_endpoint, admin_creds, admin_s3, bucket_name, big_file, big_etag, small_dir, tmp_path):
    env = s5cmd_env(tmp_path / "s5-home", admin_creds)
    s5cmd_flow(auth_s3_endpoint, env, [], admin_s3, bucket_name, big_file, big_etag, small_dir, tmp_path)


def test_s5cmd_anonymous(s3_endpoint, big_file, big_etag, small_dir, tmp_path):
    anon = make_s3(s3_endpoint, None)
    name = new_bucket_name("anon")
    env = s5cmd_env(tmp_path / "s5-home", None)
    try:
        s5cmd_flow(s3_endpoint, env, ["--no-sign-request"], anon, name, big_file, big_etag, small_dir, tmp_path)
    finally:
        empty_and_delete(anon, name)


# --- rclone -----------------------------------------------------------------------------------


@pytest.fixture
def rclone(tmp_path, auth_s3_endpoint, admin_creds):
    home = tmp_path / "rclone-home"
    home.mkdir()
    cfg = home / "rclone.conf"
    cfg.write_text(
        "[gm]\ntype = s3\nprovider = Other\nenv_auth = false\n"
        f"access_key_id = {admin_creds.access_key}\nsecret_access_key = {admin_creds.secret_key}\n"
        f"endpoint = {auth_s3_endpoint}\nregion = {REGION}\nforce_path_style = true\n"
        "upload_cutoff = 8Mi\nchunk_size = 16Mi\ncopy_cutoff = 16Mi\n"
    )
    env = clean_env(home)
    exe = tool("rclone")

    def rclone_(*args, stdout_bytes=False, stderr=False):
        return run([exe, "--config", str(cfg), "--cache-dir", str(home / "cache"), "--low-level-retries", "1",
                    "--retries", "1", *map(str, args)], env, stdout_bytes=stdout_bytes, stderr=stderr)

    return rclone_


def test_rclone(rclone, admin_s3, bucket_name, big_file, big_etag, small_dir, tmp_path):
    path, sha = big_file
    r = f"gm:{bucket_name}"
    rclone("mkdir", r)
    rclone("copy", small_dir, r)
    rclone("copyto", path, f"{r}/{BIG_KEY}")
    check_uploaded(admin_s3, bucket_name, big_file, big_etag)

    assert rclone("lsf", f"{r}/docs").splitlines() == ["a.txt", "b.txt", "sub/"]
    listing = {ln.split(maxsplit=1)[1]: int(ln.split()[0]) for ln in rclone("ls", r).splitlines()}
    assert listing == {**{k: len(v) for k, v in SMALL.items()}, BIG_KEY: BIG_SIZE}

    first, last = RANGE
    got = rclone("cat", "--offset", first, "--count", last - first + 1, f"{r}/{BIG_KEY}", stdout_bytes=True)
    assert got == range_bytes(path, first, last)
    out = tmp_path / "big.down"
    rclone("copyto", f"{r}/{BIG_KEY}", out)
    check_download(out, sha)

    rclone("copyto", f"{r}/docs/a.txt", f"{r}/copies/a.txt")  # server-side copy
    assert rclone("cat", f"{r}/copies/a.txt", stdout_bytes=True) == SMALL["docs/a.txt"]
    # Round trip of a directory, checked by size and hash.
    back = tmp_path / "back"
    rclone("copy", f"{r}/docs", back)
    assert (back / "sub" / "c.txt").read_bytes() == SMALL["docs/sub/c.txt"]

    rclone("delete", r)
    assert admin_s3.list_objects_v2(Bucket=bucket_name)["KeyCount"] == 0
    rclone("rmdir", r)
    check_gone(admin_s3, bucket_name)


# --- minio ------------------------------------------------------------------------------------


def test_minio(auth_s3_endpoint, admin_creds, admin_s3, bucket_name, big_file, big_etag, small_dir, tmp_path):
    path, sha = big_file
    mc = minio.Minio(urlparse(auth_s3_endpoint).netloc, access_key=admin_creds.access_key,
                     secret_key=admin_creds.secret_key, secure=False, region=REGION)
    mc.make_bucket(bucket_name)
    assert mc.bucket_exists(bucket_name)
    assert bucket_name in [b.name for b in mc.list_buckets()]
    for k in SMALL:
        mc.fput_object(bucket_name, k, str(small_dir / k), content_type="text/plain", metadata={"origin": "minio"})
    r = mc.fput_object(bucket_name, BIG_KEY, str(path), part_size=PART)
    assert f'"{r.etag}"' == big_etag
    check_uploaded(admin_s3, bucket_name, big_file, big_etag)
    st = mc.stat_object(bucket_name, "docs/a.txt")
    assert st.size == len(SMALL["docs/a.txt"]) and st.content_type == "text/plain"
    assert st.metadata.get("x-amz-meta-origin") == "minio"

    objs = list(mc.list_objects(bucket_name, prefix="docs/"))
    assert [(o.object_name, o.is_dir) for o in objs] == [("docs/a.txt", False), ("docs/b.txt", False), ("docs/sub/", True)]
    assert sorted(o.object_name for o in mc.list_objects(bucket_name, recursive=True)) == sorted([*SMALL, BIG_KEY])
    v1 = list(mc.list_objects(bucket_name, prefix="docs/", use_api_v1=True))
    assert sorted(o.object_name for o in v1) == ["docs/a.txt", "docs/b.txt", "docs/sub/"]

    first, last = RANGE
    resp = mc.get_object(bucket_name, BIG_KEY, offset=first, length=last - first + 1)
    try:
        assert resp.read() == range_bytes(path, first, last)
    finally:
        resp.close()
        resp.release_conn()
    out = tmp_path / "big.down"
    mc.fget_object(bucket_name, BIG_KEY, str(out))
    check_download(out, sha)

    mc.copy_object(bucket_name, "copies/a.txt", minio.commonconfig.CopySource(bucket_name, "docs/a.txt"))
    resp = mc.get_object(bucket_name, "copies/a.txt")
    try:
        assert resp.read() == SMALL["docs/a.txt"]
    finally:
        resp.close()
        resp.release_conn()

    keys = [o.object_name for o in mc.list_objects(bucket_name, recursive=True)]
    errors = list(mc.remove_objects(bucket_name, [minio.deleteobjects.DeleteObject(k) for k in keys]))
    assert errors == []
    assert list(mc.list_objects(bucket_name, recursive=True)) == []
    mc.remove_bucket(bucket_name)
    assert not mc.bucket_exists(bucket_name)


# --- sync: a second run with nothing changed must transfer nothing ---------------------------
# (sync compares local files with the listing's Size, LastModified and ETag)


@pytest.mark.parametrize("client", ["aws", "s3cmd", "s5cmd", "rclone"])
def test_sync_is_incremental(client, request, auth_s3_endpoint, admin_creds, admin_s3, bucket_name, small_dir, tmp_path):
    # Local files an hour old, so that second-granular remote times cannot look older by accident.
    past = os.path.getmtime(small_dir) - 3600
    for p in small_dir.rglob("*"):
        os.utime(p, (past, past))
    admin_s3.create_bucket(Bucket=bucket_name)
    dst = f"s3://{bucket_name}/synced/"
    if client == "aws":
        aws = request.getfixturevalue("aws")
        sync, uploads = lambda: aws("s3", "sync", "--no-progress", small_dir, dst), "upload:"
    elif client == "s3cmd":
        s3cmd = request.getfixturevalue("s3cmd")
        sync, uploads = lambda: s3cmd("sync", f"{small_dir}/", dst), "upload:"
    elif client == "s5cmd":
        s5 = s5cmd_runner(auth_s3_endpoint, s5cmd_env(tmp_path / "s5-home", admin_creds), [])
        sync, uploads = lambda: s5("sync", f"{small_dir}/", dst), "cp "
    else:
        rclone = request.getfixturevalue("rclone")
        sync, uploads = lambda: rclone("sync", "-v", small_dir, f"gm:{bucket_name}/synced", stderr=True), "Copied"
    first = sync()
    assert first.count(uploads) == len(SMALL), first
    keys = [o["Key"] for o in admin_s3.list_objects_v2(Bucket=bucket_name)["Contents"]]
    assert sorted(keys) == sorted(f"synced/{k}" for k in SMALL)
    second = sync()
    assert second.count(uploads) == 0, second

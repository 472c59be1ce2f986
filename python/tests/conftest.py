"""Test fixtures: real Gristmill clusters (`gristd playground`, 1 proxy + 3 targets): `cluster`
with S3 auth off, and `auth_cluster` with S3 users configured (started only when a test needs it)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from gristmill import Client

REPO = Path(__file__).resolve().parents[2]
# Every node a test starts inherits this: the default out-of-space mark (95%) counts the host's
# whole disk, which CI's builds may fill past it, and a test that is not about space must not
# fail on that (a test's own marks still win).
os.environ.setdefault("GRISTD_OUT_OF_SPACE_WM", "100")
GRISTD = Path(os.environ.get("GRISTD_BIN", REPO / "build" / "debug" / "gristd"))
TARGETS = 3
STARTUP_TIMEOUT = float(os.environ.get("GRIST_STARTUP_TIMEOUT", "60"))


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _pick_base_port() -> int:
    for _ in range(200):
        # Below the kernel's ephemeral range (32768+), which outgoing connections draw from.
        base = random.randint(20000, 32000)
        # Proxy and targets, then the targets' own S3 ports (`--target-s3-port`).
        if all(_port_free(base + i) for i in range(2 * TARGETS + 1)):
            return base
    raise RuntimeError("no free port range found")


def _smap(endpoint: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"{endpoint}/v1/cluster?what=smap", timeout=2) as r:
            return json.loads(r.read())
    except Exception:
        return None


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def _start(data_dir: str, env: dict | None = None):
    base = _pick_base_port()
    endpoint = f"http://127.0.0.1:{base}"
    with open(os.path.join(data_dir, "playground.out"), "wb") as log:
        proc = subprocess.Popen(
            [str(GRISTD), "playground", "--data-dir", data_dir, "--port", str(base), "--targets", str(TARGETS),
             "--target-s3-port", str(base + TARGETS + 1)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env=env,
        )
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None, endpoint
        smap = _smap(endpoint)
        if smap and len(smap.get("tmap") or {}) == TARGETS:
            return proc, endpoint
        time.sleep(0.2)
    _stop(proc)
    raise RuntimeError(f"cluster at {endpoint} not ready after {STARTUP_TIMEOUT}s; logs in {data_dir}")


@contextlib.contextmanager
def _playground(extra_env: dict | None = None):
    """Runs `gristd playground` on a free port range (in a temp data dir); yields the proxy
    endpoint and stops every node afterwards. `extra_env` is added to the daemons' environment
    (the playground's child nodes inherit it)."""
    if not GRISTD.exists():
        pytest.fail(f"gristd binary not found at {GRISTD}: run `cargo build --bins` (or set GRISTD_BIN)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRISTD_S3_")}
    env.update(extra_env or {})
    data_dir = tempfile.mkdtemp(prefix="gristmill-pytest-")
    proc = None
    try:
        for attempt in range(3):  # a port taken between the check and the bind: try another range
            run_dir = os.path.join(data_dir, f"run{attempt}")
            os.makedirs(run_dir)
            proc, endpoint = _start(run_dir, env)
            if proc is not None:
                break
        if proc is None:
            out = Path(run_dir, "playground.out").read_text(errors="replace")
            raise RuntimeError(f"gristd playground exited early:\n{out[-4000:]}")
        yield endpoint
    finally:
        if proc is not None:
            _stop(proc)
        if os.environ.get("GRIST_KEEP_DATA"):
            print(f"cluster data kept in {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)


@contextlib.contextmanager
def http_origin(files: dict):
    """A local HTTP origin (`python -m http.server`) serving `files` ({path: bytes}); yields the
    name of the `ht://` bucket that reads it (`127.0.0.1_<port>`)."""
    import sys

    root = tempfile.mkdtemp(prefix="grist-origin-")
    for name, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        Path(root, name).write_bytes(data)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
                            cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        first = next(iter(files))
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/{first}", timeout=1).read()
                break
            except Exception:
                assert time.monotonic() < deadline, "origin did not start"
                time.sleep(0.1)
        yield f"127.0.0.1_{port}"
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster():
    """Starts `gristd playground` (S3 auth off) on a free port range; yields the proxy endpoint."""
    with _playground() as endpoint:
        yield endpoint


# --- S3 ---------------------------------------------------------------------------------------

# Accepted when no S3 users are configured (auth off); see proxy/src/s3/mod.rs.
S3_DEFAULT_CREDS = ("gristmill", "gristmill-secret")
S3_USERS = {
    "admin": {"access_key": "admin", "secret_key": "admin-secret", "read": ["*"], "write": ["*"]},
    "reader": {"access_key": "reader", "secret_key": "reader-secret", "read": ["*"], "write": []},
    # A second writer: buckets have owners (test_s3_semantics.py).
    "writer2": {"access_key": "writer2", "secret_key": "writer2-secret", "read": ["*"], "write": ["*"]},
}


@dataclasses.dataclass(frozen=True)
class S3Creds:
    access_key: str
    secret_key: str


@pytest.fixture(scope="session")
def auth_cluster():
    """A second playground with S3 auth on (GRISTD_S3_USERS: an admin and a read-only user);
    yields the proxy endpoint (native API and S3 share the port)."""
    with _playground({"GRISTD_S3_USERS": json.dumps(list(S3_USERS.values()))}) as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def s3_endpoint(cluster) -> str:
    """S3 endpoint (path-style, at the proxy port's root) of the auth-off cluster."""
    return cluster


@pytest.fixture(scope="session")
def auth_s3_endpoint(auth_cluster) -> str:
    """S3 endpoint of the auth-on cluster."""
    return auth_cluster


def target_s3_endpoints(endpoint: str) -> list[str]:
    """The targets' own S3 ports of the playground at `endpoint` (see `_start`)."""
    base = int(endpoint.rsplit(":", 1)[1])
    return [f"http://127.0.0.1:{base + TARGETS + 1 + i}" for i in range(TARGETS)]


@pytest.fixture(scope="session")
def admin_creds() -> S3Creds:
    u = S3_USERS["admin"]
    return S3Creds(u["access_key"], u["secret_key"])


@pytest.fixture(scope="session")
def reader_creds() -> S3Creds:
    u = S3_USERS["reader"]
    return S3Creds(u["access_key"], u["secret_key"])


@pytest.fixture(scope="session")
def default_creds() -> S3Creds:
    """The built-in key that the auth-off cluster accepts besides unsigned requests."""
    return S3Creds(*S3_DEFAULT_CREDS)


@pytest.fixture(scope="session")
def client(cluster) -> Client:
    c = Client(cluster)
    yield c
    c.close()


@pytest.fixture
def bucket(client):
    """A fresh, empty ais bucket, destroyed afterwards."""
    b = client.bucket(f"t-{uuid.uuid4().hex[:12]}")
    b.create()
    yield b
    b.delete(missing_ok=True)

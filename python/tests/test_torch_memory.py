"""ShardDataset streams: reading a 2 GiB shard grows the reader's RSS by far less than the
shard (the tar is parsed member by member from the HTTP stream)."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
import time
import uuid

import pytest

import torch  # noqa: F401  (installed by the test command)

from gristmill.torch import ShardDataset  # noqa: E402

SHARD_BYTES = 2 << 30
MEMBER = 1 << 20  # 2048 samples of 1 MiB (+ a small .cls each)
LIMIT = 100 << 20


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> bool:
    """Resets VmHWM (peak RSS) of this process; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class _Member:
    """A file object producing one member's bytes without holding more than a block."""

    def __init__(self, block: bytes, index: int, size: int):
        self.block, self.left = index.to_bytes(8, "big") + block[8:], size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n is None or n < 0 else min(n, self.left)
        out = (self.block * (n // len(self.block) + 1))[:n]
        self.left -= n
        return out


def test_streaming_a_2gib_shard_keeps_rss_bounded(client, tmp_path):
    need = 2 * SHARD_BYTES + (1 << 30)  # the tar here, its copy in the cluster, headroom
    for path in (str(tmp_path), tempfile.gettempdir()):
        free = shutil.disk_usage(path).free
        if free < need:
            pytest.fail(f"needs {need >> 30} GiB free on {path}, has {free >> 30} GiB")
    count = SHARD_BYTES // MEMBER
    block = os.urandom(64 * 1024)
    shard = tmp_path / "big.tar"
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tar:  # written as a stream
        for i in range(count):
            ti = tarfile.TarInfo(f"{i:06d}.bin")
            ti.size = MEMBER
            tar.addfile(ti, _Member(block, i, MEMBER))
            cls = str(i % 1000).encode()
            ti = tarfile.TarInfo(f"{i:06d}.cls")
            ti.size = len(cls)
            tar.addfile(ti, io.BytesIO(cls))
    assert shard.stat().st_size > SHARD_BYTES

    b = client.bucket(f"big-{uuid.uuid4().hex[:8]}")
    b.create()
    try:
        b.object("big.tar").put(shard)  # streamed from the file
        shard.unlink()
        ds = ShardDataset(b, names=["big.tar"])
        base = _status_kib("VmRSS") << 10
        peak_ok = _reset_peak()
        peak, n, started = base, 0, time.monotonic()
        for sample in ds:
            assert sample["__key__"] == f"{n:06d}" and len(sample["bin"]) == MEMBER
            assert sample["bin"][:8] == n.to_bytes(8, "big")
            n += 1
            if n % 64 == 0:
                peak = max(peak, _status_kib("VmRSS") << 10)
        elapsed = time.monotonic() - started
        if peak_ok:
            peak = max(peak, _status_kib("VmHWM") << 10)
        assert n == count
        growth = peak - base
        print(f"2 GiB shard: {n} samples in {elapsed:.1f}s ({SHARD_BYTES / elapsed / 2**20:.0f} MiB/s), "
              f"RSS growth {growth / 2**20:.1f} MiB")
        assert growth < LIMIT, f"RSS grew by {growth / 2**20:.0f} MiB while streaming a 2 GiB shard"
    finally:
        b.delete(missing_ok=True)


def test_checkpoint_of_1gib_saves_and_loads_byte_identical_with_bounded_rss(client):
    """``gristmill.torch.checkpoint``: a 1 GiB state dict saved (streamed while serialised) and
    loaded back (range reads into the tensors): the stored object is byte-identical to a local
    ``torch.save``, the tensors equal, and neither direction holds a second copy in memory."""
    from gristmill.torch import checkpoint

    b = client.bucket(f"ckpt-{uuid.uuid4().hex[:8]}")
    b.create()
    try:
        g = torch.Generator().manual_seed(5)
        state = {f"layer{i}.weight": torch.randn((64 << 20) // 4, generator=g) for i in range(16)}
        state["step"] = 100
        size = sum(t.numel() * 4 for k, t in state.items() if k != "step")
        assert size == 1 << 30
        uri = f"ais://{b.name}/run/step-100.pt"
        base = _status_kib("VmRSS")
        measured = _reset_peak()
        props = checkpoint.save(state, uri, client=client)
        grew_save = (_status_kib("VmHWM") - base) << 10
        assert props.size > size
        assert checkpoint.object_of(uri, client).get_stream().read(4) == b"PK\x03\x04"

        base = _status_kib("VmRSS")
        measured = _reset_peak() and measured
        loaded = checkpoint.load(uri, client=client, map_location="cpu", weights_only=True)
        grew_load = (_status_kib("VmHWM") - base) << 10
        assert loaded["step"] == 100 and loaded.keys() == state.keys()
        for k, t in state.items():
            if k != "step":
                assert torch.equal(loaded[k], t), k
        print(f"checkpoint of {size >> 20} MiB: RSS grew {grew_save >> 20} MiB saving, "
              f"{grew_load >> 20} MiB loading (the tensors themselves: {size >> 20} MiB)")
        if measured:
            assert grew_save < LIMIT, f"save held {grew_save >> 20} MiB"
            assert grew_load < size + LIMIT, f"load held {grew_load >> 20} MiB beyond the tensors"
        del loaded
        local = io.BytesIO()
        torch.save(state, local)
        stored = checkpoint.object_of(uri, client)
        assert stored.head().size == local.getbuffer().nbytes
        with stored.get_stream(chunk_size=8 << 20) as r:
            at = 0
            view = local.getbuffer()
            for chunk in r:
                assert chunk == view[at:at + len(chunk)], f"differs in {at}..{at + len(chunk)}"
                at += len(chunk)
            assert at == view.nbytes
            del view
    finally:
        b.delete(missing_ok=True)


def _dcp_save(cluster: str, path: str, mib: int, hang: bool) -> list:
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    here = os.path.dirname(__file__)
    return [subprocess.Popen([sys.executable, os.path.join(here, "dcp_rank.py"), str(r), "2",
                              f"tcp://127.0.0.1:{port}", cluster, path, str(mib)] + (["hang"] if hang else []),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for r in range(2)]


def test_dcp_save_by_two_ranks_loads_and_a_killed_save_does_not(cluster, client):
    """``gristmill.dcp``: 2 gloo ranks save 2 × 64 MiB with DCP straight to the cluster; the
    checkpoint loads back equal. A second save whose ranks are killed (-9) after writing their
    data but before the metadata leaves no ``.metadata``: it does not load, the first still does."""
    import signal

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    from dcp_rank import state_of
    from gristmill.dcp import GristmillStorageReader

    b = client.bucket(f"dcp-{uuid.uuid4().hex[:8]}")
    b.create()
    try:
        good, partial = f"ais://{b.name}/run/step-1", f"ais://{b.name}/run/step-2"
        procs = _dcp_save(cluster, good, 64, hang=False)
        for p in procs:
            out, _ = p.communicate(timeout=300)
            assert p.returncode == 0 and "saved" in out, out
        names = [e.name for e in b.list_all_objects(prefix="run/step-1/")]
        data = [n for n in names if n.endswith(".distcp")]
        assert "run/step-1/.metadata" in names
        assert {n.split("/")[-1][:4] for n in data} == {"__0_", "__1_"}  # each rank's own files

        def load(path):
            want = {**state_of(0, 64), **state_of(1, 64)}
            got = {k: torch.empty_like(v) for k, v in want.items()}
            dcp.load(got, storage_reader=GristmillStorageReader(path, client))
            return want, got

        want, got = load(good)
        assert all(torch.equal(got[k], want[k]) for k in want)

        procs = _dcp_save(cluster, partial, 64, hang=True)
        # Once every data object is in, rank 0 is in `finish` (hanging before the metadata)
        # and rank 1 waits for it: kill both there.
        deadline = time.monotonic() + 300
        while len(b.list_all_objects(prefix="run/step-2/")) < len(data) and time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs), [p.communicate()[0] for p in procs]
            time.sleep(0.2)
        time.sleep(1)
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait()
        names = [e.name for e in b.list_all_objects(prefix="run/step-2/")]
        assert names and not any(n.endswith(".metadata") for n in names), names
        with pytest.raises(CheckpointException, match="metadata"):  # a BaseException in DCP
            load(partial)
        want, got = load(good)
        assert all(torch.equal(got[k], want[k]) for k in want)
    finally:
        b.delete(missing_ok=True)


def test_dcp_saves_to_one_path_never_break_the_checkpoint_that_loads(client, monkeypatch):
    """Saves to an existing path: each save's files carry its own save id, so a save that dies
    at its commit leaves the previous checkpoint loadable (it used to rewrite that checkpoint's
    files in place); a commit replaces `.metadata` in one PUT (no temporary object, which
    concurrent saves shared) and then deletes the replaced checkpoint's files; with
    ``overwrite=False`` the commit is conditional, so a save racing another one past DCP's
    existence check fails instead of replacing it."""
    import torch.distributed.checkpoint as dcp

    from gristmill import dcp as gdcp

    b = client.bucket(f"dcp-{uuid.uuid4().hex[:8]}")
    b.create()
    path = f"ais://{b.name}/ckpt"

    def save(value: float, **kw) -> None:
        dcp.save({"w": torch.full((4096,), value)}, storage_writer=gdcp.GristmillStorageWriter(path, client, **kw))

    def loaded() -> float:
        got = {"w": torch.empty(4096)}
        dcp.load(got, storage_reader=gdcp.GristmillStorageReader(path, client))
        assert torch.equal(got["w"], torch.full((4096,), got["w"][0].item()))
        return got["w"][0].item()

    def files() -> set:
        return {e.name for e in b.list_all_objects(prefix="ckpt/") if e.name.endswith(".distcp")}

    try:
        save(1.0)
        first = files()
        save(2.0)
        assert loaded() == 2.0
        second = files()
        assert second and not second & first, (first, second)  # replaced files deleted

        def crash(self, metadata, results):
            raise OSError("killed at the commit")

        with monkeypatch.context() as m:
            m.setattr(gdcp.GristmillStorageWriter, "finish", crash)
            with pytest.raises(BaseException, match="killed at the commit"):
                save(3.0)
        assert loaded() == 2.0
        assert second <= files()
        names = {e.name for e in b.list_all_objects(prefix="ckpt/")}
        assert not [n for n in names if n.endswith(".tmp")], names  # no temporary metadata

        with monkeypatch.context() as m:
            # As if another save committed right after this one's existence check.
            m.setattr(gdcp.GristmillFileSystem, "exists", lambda self, path: False)
            with pytest.raises(BaseException, match="committed by another save"):
                save(4.0, overwrite=False)
        assert loaded() == 2.0
        with pytest.raises(BaseException, match="already exists"):
            save(5.0, overwrite=False)
        assert loaded() == 2.0
    finally:
        b.delete(missing_ok=True)

"""``torch.distributed.checkpoint`` (DCP) storage on a Gristmill cluster.

    import torch.distributed.checkpoint as dcp
    from gristmill.dcp import GristmillStorageWriter, GristmillStorageReader

    dcp.save(state_dict, storage_writer=GristmillStorageWriter("ais://ckpt/run-7/step-100"))
    dcp.load(state_dict, storage_reader=GristmillStorageReader("ais://ckpt/run-7/step-100"))

Every rank writes its own files straight to the targets that own them (a chunked upload per
file, several files at once with ``thread_count``); each object appears only once it is whole.
The checkpoint's ``.metadata`` object is written last, by the coordinator, after every rank
finished: a save that dies part-way leaves no ``.metadata``, so the partial checkpoint does not
load, and earlier checkpoints (other paths) are untouched. Reads use range requests, several
files at once (``thread_count``).
"""

from __future__ import annotations

import dataclasses
import io
import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Dict, Generator, List, Optional, Union

from torch.distributed.checkpoint.filesystem import FileSystemBase, FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner
from torch.futures import Future

from .checkpoint import object_of
from .client import Client
from .errors import ObjectNotFound

__all__ = ["GristmillFileSystem", "GristmillStorageReader", "GristmillStorageWriter"]

PathLike = Union[str, "os.PathLike[str]"]


class GristmillFileSystem(FileSystemBase):
    """DCP's file-system interface over objects named by URIs (``ais://bucket/path``)."""

    def __init__(self, client: Optional[Client] = None):
        self.client = client

    def _object(self, path: PathLike):
        return object_of(str(path), self.client)

    @contextmanager
    def create_stream(self, path: PathLike, mode: str) -> Generator[io.IOBase, None, None]:
        obj = self._object(path)
        if "w" in mode:
            writer = obj.open_writer(chunk_size=8 << 20, queue_depth=4)
            try:
                yield writer
            except BaseException:
                writer.abort()  # the object stays as it was: absent, for a new checkpoint
                raise
            writer.close()
        else:
            # A small read-ahead: DCP reads each item's header with small reads, then its
            # bytes with one large read, which goes straight into the caller's buffer.
            with obj.open_reader(buffer_size=256 << 10) as reader:
                yield reader

    def concat_path(self, path: PathLike, suffix: str) -> str:
        return f"{str(path).rstrip('/')}/{suffix}"

    def init_path(self, path: PathLike) -> str:
        object_of(f"{str(path).rstrip('/')}/x", self.client)  # validates the URI
        return str(path).rstrip("/")

    def rename(self, path: PathLike, new_path: PathLike) -> None:
        # Only the small `.metadata` is renamed (written under a temporary name, then put in
        # place): the new object appears whole, in one PUT.
        src = self._object(path)
        self._object(new_path).put(src.get())
        src.delete()

    def mkdir(self, path: PathLike) -> None:
        pass  # object names need no directories

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: PathLike) -> bool:
        scheme, sep, rest = str(checkpoint_id).partition("://")
        return bool(sep) and scheme in ("ais", "s3", "aws", "ht") and "/" in rest.strip("/")

    def exists(self, path: PathLike) -> bool:
        return self._object(path).exists()

    def rm_file(self, path: PathLike) -> None:
        try:
            self._object(path).delete()
        except ObjectNotFound:
            pass

    def ls(self, path: PathLike) -> list:
        scheme, _, rest = str(path).partition("://")
        bucket, _, prefix = rest.partition("/")
        b = object_of(f"{scheme}://{bucket}/x", self.client).bucket
        prefix = prefix.rstrip("/") + "/"
        return [f"{scheme}://{bucket}/{e.name}" for e in b.list_objects_iter(prefix=prefix)]


class GristmillStorageWriter(FileSystemWriter):
    """A DCP ``StorageWriter`` writing the checkpoint under ``path`` (``ais://bucket/dir``).
    ``thread_count`` files are uploaded at once per rank; the other arguments are
    ``FileSystemWriter``'s (``sync_files`` is off: an object is durable when its PUT answers)."""

    def __init__(self, path: PathLike, client: Optional[Client] = None, *, thread_count: int = 4,
                 **kwargs: Any) -> None:
        kwargs.setdefault("sync_files", False)
        super().__init__(path, thread_count=thread_count, **kwargs)
        self.fs = GristmillFileSystem(client)
        self.path = self.fs.init_path(path)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: PathLike) -> bool:
        return GristmillFileSystem.validate_checkpoint_id(checkpoint_id)


class GristmillStorageReader(FileSystemReader):
    """A DCP ``StorageReader`` for a checkpoint written by ``GristmillStorageWriter``.
    ``thread_count`` files are read at once (each from its own target, with range reads)."""

    def __init__(self, path: PathLike, client: Optional[Client] = None, *, thread_count: int = 4,
                 **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.fs = GristmillFileSystem(client)
        self.path = self.fs.init_path(path)
        self.thread_count = max(1, int(thread_count))

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future:
        # FileSystemReader reads the files one after the other; here each file's items go to
        # a pool, as its writer wrote them (the items of one file stay in order, in one
        # thread). Tensors land in distinct parts of the state dict.
        per_file: Dict[str, List[Any]] = {}
        for item in plan.items:
            per_file.setdefault(self.storage_data[item.storage_index].relative_path, []).append(item)
        if self.thread_count == 1 or len(per_file) < 2:
            return super().read_data(plan, planner)
        read_file = super().read_data
        with ThreadPoolExecutor(min(self.thread_count, len(per_file))) as pool:
            for done in [pool.submit(read_file, dataclasses.replace(plan, items=items), planner)
                         for items in per_file.values()]:
                done.result()
        fut: Future = Future()
        fut.set_result(None)
        return fut

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: PathLike) -> bool:
        return GristmillFileSystem.validate_checkpoint_id(checkpoint_id)

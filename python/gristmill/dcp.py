"""``torch.distributed.checkpoint`` (DCP) storage on a Gristmill cluster.

    import torch.distributed.checkpoint as dcp
    from gristmill.dcp import GristmillStorageWriter, GristmillStorageReader

    dcp.save(state_dict, storage_writer=GristmillStorageWriter("ais://ckpt/run-7/step-100"))
    dcp.load(state_dict, storage_reader=GristmillStorageReader("ais://ckpt/run-7/step-100"))

Every rank writes its own files straight to the targets that own them (a chunked upload per
file, several files at once with ``thread_count``); each object appears only once it is whole.
The files of one save are named with a save id of their own (``__<rank>_<save id>_<n>.distcp``),
so a save never rewrites the files of a checkpoint that loads. The checkpoint's ``.metadata``
object, which names its files, is written last, by the coordinator, after every rank finished,
in one PUT that replaces any previous one (no temporary object, never deleted first): a save
that dies part-way leaves the path as it was — no ``.metadata`` for a new path (the partial
checkpoint does not load), the previous checkpoint for an existing one. With
``overwrite=False`` the commit is a conditional write (``If-None-Match: *``): of two saves
racing to one path, one commits and the other fails (``dcp.save`` raises torch's
``CheckpointException`` with a ``CheckpointExists`` among its failures). After a commit that
replaced a checkpoint, the files of the replaced one are deleted (a failure there is logged:
the save stands). Files of saves that died before their commit are named by no metadata and
stay until deleted by hand. Reads use range requests, several files at once (``thread_count``).
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import pickle
import re
import secrets
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Dict, Generator, List, Optional, Union

from torch.distributed.checkpoint.filesystem import (
    FileSystemBase,
    FileSystemReader,
    FileSystemWriter,
    _StoragePrefix,
)
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner, SavePlan
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from .checkpoint import object_of
from .client import Client
from .errors import ObjectNotFound, PreconditionFailed

__all__ = ["CheckpointExists", "GristmillFileSystem", "GristmillStorageReader", "GristmillStorageWriter"]

PathLike = Union[str, "os.PathLike[str]"]
log = logging.getLogger("gristmill")


_METADATA = ".metadata"
# A data file of one save: `__<rank>_<save id>_<n>.distcp` (group 1: the save id).
_SAVE_FILE = re.compile(r"__\d+_([0-9a-f]{8})_\d+\.distcp")


class CheckpointExists(RuntimeError):
    """A save with ``overwrite=False`` found its path committed by another save."""


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
        # (The writer commits `.metadata` itself, in one PUT; this is DCP's general rename.)
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

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        plan = super().prepare_local_plan(plan)
        if self.rank is not None and not self.use_collectives:
            # Each rank names its own files (no coordinator): a save id of its own too.
            plan = dataclasses.replace(plan, storage_data=_StoragePrefix(f"__{self.rank}_{secrets.token_hex(4)}_"))
        return plan

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        # The coordinator names this save's files (the plans reach every rank): a save id in
        # each rank's prefix keeps them apart from every other save's files of this path.
        save_id = secrets.token_hex(4)
        return [dataclasses.replace(plan, storage_data=_StoragePrefix(f"__{rank}_{save_id}_"))
                if plan.storage_data is None else plan
                for rank, plan in enumerate(plans)]

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        # DCP's own finish writes a temporary object every save names alike, deletes the
        # committed `.metadata` and renames: concurrent saves mix their metadata, and a crash
        # in between leaves no checkpoint. Here: one PUT, conditional without overwrite.
        storage_md: Dict[Any, Any] = {}
        for wr_list in results:
            storage_md.update({wr.index: wr.storage_data for wr in wr_list})
        metadata.storage_data = storage_md
        metadata.storage_meta = self.storage_meta()
        if not self.use_collectives and self.rank is not None:
            path = str(self._get_metadata_path(self.rank))
        else:
            path = str(self._get_metadata_path())
        obj = self.fs._object(path)
        replaced: Optional[bytes] = None
        if self.overwrite:
            try:
                replaced = obj.get()
            except ObjectNotFound:
                pass
        body = pickle.dumps(metadata)
        try:
            obj.put(body, if_none_match=None if self.overwrite else "*")
        except PreconditionFailed as e:
            raise CheckpointExists(f"{path}: committed by another save meanwhile (overwrite=False)") from e
        if replaced is not None:
            try:
                self._drop_files_of(replaced, keep=body, under=path[: path.rindex("/") + 1])
            except Exception as e:  # the new checkpoint is committed: it stands
                log.warning("%s: committed; deleting the replaced checkpoint's files failed: %s", path, e)

    def _drop_files_of(self, replaced: bytes, keep: bytes, under: str) -> None:
        """Deletes the files of the replaced checkpoint that the new one does not name: every
        file of its saves (a rank writes files with no items too), or, for a checkpoint of
        files without save ids, the ones it named."""
        def files(metadata: bytes) -> set:
            try:
                md = pickle.loads(metadata)  # DCP's own format: the checkpoint's metadata
                return {d.relative_path for d in (md.storage_data or {}).values()}
            except Exception:  # not ours to judge: keep everything
                return set()

        kept = files(keep)
        gone = files(replaced) - kept
        saves = {m.group(1) for m in map(_SAVE_FILE.fullmatch, gone) if m} - {
            m.group(1) for m in map(_SAVE_FILE.fullmatch, kept) if m}
        if saves:
            scheme, _, rest = under.partition("://")
            bucket, _, prefix = rest.partition("/")
            b = object_of(f"{scheme}://{bucket}/x", self.fs.client).bucket
            for e in b.list_objects_iter(prefix=prefix):
                m = _SAVE_FILE.fullmatch(e.name[len(prefix):])
                if m and m.group(1) in saves:
                    gone.add(e.name[len(prefix):])
        for name in gone - kept:
            self.fs.rm_file(under + name)

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

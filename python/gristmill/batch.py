"""get-batch: many objects and members of shards in one request (``GET /v1/ml/moss``).

A ``Batch`` lists items — whole objects, byte ranges of them, or members of shards, in any
buckets — and sends them as one request. The proxy redirects it to the target that owns most
of the items (a ``direct`` client picks that target itself, from its cached cluster map, and
sends the request straight there); that target pulls the rest from their owners and answers
with one archive holding every item **in request order**. The SDK asks for the multipart form
of the answer: a JSON part with each item's size (or why it could not be read), then the
archive, which is read as it arrives (tar and tgz: member by member; zip: spooled, since a
zip's index is at its end). The i-th entry of the archive is the i-th item added; the
entry's name is checked against the item, so an answer out of order is an error, never a
mix-up.

With an ETL (``etl=``) the items' sizes are known only after the transforms ran, so the SDK
asks for the streaming form instead (the archive alone): sizes come from the entries, and an
item that could not be read or transformed is recognised by its ``__404__/`` entry.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, Dict, Generator, Iterator, List, Optional, Tuple, Union
from urllib.parse import quote

from . import hrw
from .client import _JSON, Bucket, Object, ObjectReader
from .errors import GristError

if TYPE_CHECKING:
    from .client import Client

_FORMATS: Dict[str, Optional[str]] = {".tar": "r|", ".tgz": "r|gz", ".tar.gz": "r|gz", ".zip": None}
"""Output formats this SDK reads → ``tarfile`` stream mode (None: zip, read from a spooled
copy). The server also writes ``.tar.lz4``, which Python's standard library cannot read."""
MISSING_DIR = "__404__"
"""Entries standing for items that could not be read (``continue_on_error``) are named
``__404__/<bucket>/<object>[/<member>]``."""
_Entries = Generator[Tuple[str, int, BinaryIO], None, None]
"""The archive's entries as they are read: ``(name, size, reader)``."""
_BUFFER = 256 * 1024  # bytes read from the network at a time
_SPOOL_MAX = 64 << 20  # a zip answer stays in memory up to this size, then goes to a temp file


@dataclass(eq=False)
class BatchItem:
    """One item of a ``Batch``: an object, a byte range of it, or a member of a shard.

    ``size`` and ``error`` are filled in from the answer when the batch is read: the item's
    size in bytes, or — with ``continue_on_error`` — why it could not be read (then
    ``missing`` is true and its data is empty).
    """

    bucket: Bucket
    name: str
    archpath: str = ""
    """Member of the object (a shard) to read instead of the whole object."""
    start: int = 0
    """Byte range: the offset into the object (or member)..."""
    length: int = 0
    """...and the number of bytes from there (0 or -1: to the end)."""
    opaque: str = ""
    """Caller's data; sent along and echoed by the server, not interpreted."""
    size: int = 0
    error: str = ""

    @property
    def missing(self) -> bool:
        """Whether the item could not be read (only with ``continue_on_error``)."""
        return bool(self.error)

    @property
    def entry_name(self) -> str:
        """The item's entry name in the archive the server writes: ``bucket/obj[/member]``."""
        name = f"{self.bucket.name}/{self.name}"
        return f"{name}/{self.archpath}" if self.archpath else name

    def __repr__(self) -> str:
        member = f", archpath={self.archpath!r}" if self.archpath else ""
        state = f", missing: {self.error!r}" if self.error else ""
        return f"BatchItem({self.bucket!r}, {self.name!r}{member}{state})"


class Batch:
    """A get-batch request under construction; ``Client.batch(...)`` makes one.

    Args:
        client: the cluster.
        bucket: default bucket of items added by name (and of the request's URL); items of
            other buckets are added as ``Object``s.
        output_format: the archive the server packs the items into on the wire: ``.tar``
            (default), ``.tgz`` (compressed; worth it for compressible data on slow links) or
            ``.zip`` (buffered whole before the first item is yielded). The items read back
            are the same whatever the format.
        continue_on_error: items that cannot be read (missing object or member, range past
            the end) come back marked ``missing`` with the server's ``error`` and empty data,
            instead of failing the whole request with a ``GristError`` (``ObjectNotFound``,
            ``BucketNotFound``, ``RangeNotSatisfiable``, ...) before the first item.
        etl: an ETL name, or a list of them (a pipeline), that every item goes through on the
            target; ``etl_args`` is passed to each. An item the ETL fails is ``missing`` with
            ``continue_on_error``; without it the answer breaks off at that item
            (``GristError``), since the items before it were already sent.

    ::

        batch = client.batch("train")
        batch.add("img/0001.jpg")
        batch.add("shard-0003.tar", archpath="0042.cls")
        batch.add(client.bucket("other").object("x.bin"), start=0, length=4096)
        for item, data in batch.get():
            ...

    The batch can be read any number of times (each ``get``/``stream`` sends the request
    again) and extended between reads.
    """

    def __init__(self, client: "Client", bucket: Union[Bucket, str, None] = None, *,
                 output_format: str = ".tar", continue_on_error: bool = False,
                 etl: Union[str, List[str], None] = None, etl_args: str = ""):
        fmt = output_format if output_format.startswith(".") else f".{output_format}"
        if fmt not in _FORMATS:
            raise ValueError(f"output_format {output_format!r}: the SDK reads {', '.join(_FORMATS)}")
        self.client = client
        self.bucket = client.bucket(bucket) if isinstance(bucket, str) else bucket
        self.output_format = fmt
        self.continue_on_error = continue_on_error
        self.etl = ",".join(etl) if isinstance(etl, (list, tuple)) else (etl or "")
        self.etl_args = etl_args
        self.items: List[BatchItem] = []

    def __len__(self) -> int:
        return len(self.items)

    def __repr__(self) -> str:
        return f"Batch({self.bucket!r}, {len(self.items)} items, {self.output_format})"

    def add(self, obj: Union[Object, str], *, archpath: str = "", start: int = 0, length: int = 0,
            opaque: str = "") -> BatchItem:
        """Appends an item; returns it (the answer's items are these very objects).

        ``obj`` is an ``Object`` (of any bucket) or a name in the batch's bucket. ``archpath``
        selects a member of that object (a shard); ``start``/``length`` a byte range of the
        object or member (``length`` 0 or -1: to the end). Items may repeat.
        """
        if isinstance(obj, Object):
            bucket, name = obj.bucket, obj.name
        elif self.bucket is None:
            raise ValueError(f"{obj!r} is a bare name but the batch has no bucket: pass an Object")
        else:
            bucket, name = self.bucket, obj
        if not name:
            raise ValueError("empty object name")
        if start < 0 or length < -1:
            raise ValueError(f"invalid range start={start} length={length}")
        item = BatchItem(bucket, name, archpath, start, length, opaque)
        self.items.append(item)
        return item

    def get(self) -> Iterator[Tuple[BatchItem, bytes]]:
        """Sends the request and yields ``(item, data)`` in the order the items were added.

        Only one item's data is in memory at a time (unless you keep them). Raises a
        ``GristError`` subclass when an item cannot be read and ``continue_on_error`` is off
        (before anything is yielded), and ``GristError`` if the answer breaks off.
        """
        for item, reader in self.stream():
            yield item, reader.read()

    def stream(self) -> Iterator[Tuple[BatchItem, BinaryIO]]:
        """Like ``get``, but yields ``(item, reader)``: a file object streaming the item's
        bytes straight off the connection, valid until the next item is requested (whatever
        the caller left unread is skipped then). A multi-GiB item goes through a few hundred
        KiB of memory. Stopping early (``break``) closes the connection.
        """
        if not self.items:
            raise ValueError("the batch is empty: add() items first")
        items = list(self.items)
        base, routed = self._target(items)
        resp = self.client._request("GET", base + self._path(), body=self._body(items), headers=_JSON,
                                    stream=True, subject="object", routed=routed)
        reader = io.BufferedReader(ObjectReader(resp, _BUFFER), buffer_size=_BUFFER)
        entries: Optional[_Entries] = None
        finished = False
        try:
            boundary: Optional[bytes] = None
            if not self.etl:
                boundary = _boundary(resp.headers.get("Content-Type", ""))
                meta = _read_meta(reader, boundary)
                if len(meta) != len(items):
                    raise GristError(0, f"get-batch: the answer describes {len(meta)} items, not {len(items)}")
                for item, out in zip(items, meta):
                    item.size = int(out.get("size") or 0)
                    item.error = str(out.get("err_msg") or "")
            mode = _FORMATS[self.output_format]
            entries = _tar_entries(reader, mode) if mode else _zip_entries(reader, boundary)
            for i, item in enumerate(items):
                entry = next(entries, None)
                if entry is None:
                    raise GristError(0, f"get-batch: the archive ends after {i} of {len(items)} items")
                name, size, data = entry
                if self.etl:  # streaming form: the entry tells size and whether it is missing
                    missing = name == f"{MISSING_DIR}/{item.entry_name}"
                    item.size = 0 if missing else size
                    item.error = f"could not be read or transformed by ETL {self.etl!r}" if missing else ""
                expected = f"{MISSING_DIR}/{item.entry_name}" if item.missing else item.entry_name
                if name != expected or size != (0 if item.missing else item.size):
                    raise GristError(0, f"get-batch: entry {i} is {name!r} ({size} bytes); expected "
                                        f"{expected!r} ({item.size} bytes)")
                yield item, data
            finished = True
        except (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError, ValueError) as e:
            raise GristError(0, f"get-batch: broken answer: {e}") from e
        finally:
            if entries is not None:
                entries.close()
            if not finished:
                resp.close()  # stopped early or failed: drop the connection, not read the rest
            reader.close()  # frees the connection (when finished: after the archive's trailer)

    # ---- the request ----

    def _target(self, items: List[BatchItem]) -> Tuple[str, bool]:
        """(base URL, routed): in direct mode the designated target — the owner of most items
        by HRW over the cached map, the proxy's rule (``hrw.designated``) — else the proxy
        (a bare path: the proxy in use), which redirects to that target. A routed request
        falls back to the proxy like a direct object GET does (``Client._request``): a target
        that cannot be reached drops the cached map and the batch goes through a proxy."""
        client = self.client
        if not client.direct:
            return "", False
        unames = [it.bucket.uname(it.name) for it in items]
        node = hrw.designated(client.cluster_map(refresh=False), unames)
        if node is None:
            node = hrw.designated(client.cluster_map(refresh=True), unames)
            if node is None:
                raise GristError(0, "no targets in the cluster map")
        return node["public_net"]["direct_url"].rstrip("/"), True

    def _path(self) -> str:
        etl = f"etl_name={quote(self.etl, safe=',')}&etl_args={quote(self.etl_args, safe='')}" if self.etl else ""
        if self.bucket is None:
            return f"/v1/ml/moss?{etl}" if etl else "/v1/ml/moss"
        query = "&".join(q for q in (self.bucket._query, etl) if q)
        return f"/v1/ml/moss/{quote(self.bucket.name, safe='')}?{query}"

    def _body(self, items: List[BatchItem]) -> bytes:
        wire = []
        for it in items:
            d: Dict[str, Any] = {"objname": it.name}
            if it.bucket != self.bucket:
                if it.bucket.namespace:  # items name no namespace; a uname does
                    d = {"uname": it.bucket.uname(it.name)}
                else:
                    d.update(bucket=it.bucket.name, provider=it.bucket.provider)
            for key in ("archpath", "opaque", "start", "length"):
                if getattr(it, key):
                    d[key] = getattr(it, key)
            wire.append(d)
        # strm=False: the multipart answer, whose JSON part has every item's size or error
        # (with an ETL, sizes are known only after the transforms: the archive alone).
        req = {"in": wire, "mime": self.output_format, "coer": self.continue_on_error,
               "onob": False, "strm": bool(self.etl)}
        return json.dumps(req).encode()


# ---- reading the answer ------------------------------------------------------------------------

def _boundary(content_type: str) -> bytes:
    kind, _, params = content_type.partition(";")
    for p in params.split(";"):
        k, _, v = p.strip().partition("=")
        if kind.strip() == "multipart/mixed" and k == "boundary" and v:
            return v.strip('"').encode()
    raise GristError(0, f"get-batch: expected a multipart answer, got {content_type!r}")


def _read_meta(r: io.BufferedReader, boundary: bytes) -> List[Dict[str, Any]]:
    """Reads the JSON part and the archive part's headers; ``r`` is then at the archive."""
    def delimiter() -> None:
        line = r.readline(len(boundary) + 8)
        if line.rstrip(b"\r\n") != b"--" + boundary:
            raise GristError(0, f"get-batch: malformed multipart answer at {line[:80]!r}")
        while r.readline(8192) not in (b"\r\n", b"\n", b""):  # part headers
            pass

    delimiter()
    doc = json.loads(r.readline())  # one line: JSON escapes every line break
    delimiter()
    return list(doc.get("out") or ())


def _tar_entries(r: BinaryIO, mode: str) -> _Entries:
    with tarfile.open(fileobj=r, mode=mode) as tar:
        for member in tar:
            tar.members = []  # stream mode would otherwise keep every header
            if member.isfile():
                yield member.name, member.size, tar.extractfile(member)  # type: ignore[misc]


def _zip_entries(r: BinaryIO, boundary: Optional[bytes]) -> _Entries:
    """A zip answer: the multipart's archive part (``boundary``) or the whole body (None)."""
    trailer = b"\r\n--" + boundary + b"--\r\n" if boundary is not None else b""
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_MAX) as spool:
        shutil.copyfileobj(r, spool, _BUFFER)
        end = spool.tell() - len(trailer)
        spool.seek(max(end, 0))
        if end < 0 or spool.read() != trailer:
            raise GristError(0, "get-batch: the zip answer is cut short")
        spool.truncate(end)
        spool.seek(0)
        with zipfile.ZipFile(spool) as z:  # type: ignore[arg-type]
            for info in z.infolist():
                if not info.is_dir():
                    with z.open(info) as f:
                        yield info.filename, info.file_size, f  # type: ignore[misc]

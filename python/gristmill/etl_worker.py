"""The Gristmill ETL worker: runs a user's ``transform`` for a target, one object at a time.

A target starts a pool of these processes per ETL (``python -c <this file>``; it needs nothing
but the standard library) and talks to each over stdin/stdout with length-prefixed frames, all
integers big-endian:

- startup: target → worker ``u32 n, n bytes``: the user's module source (UTF-8). The module must
  define ``transform(data: bytes, path: str, args: str) -> bytes`` and/or the streaming form
  ``transform_stream(reader, writer, path, args)`` (binary file objects: the object's bytes in,
  the result out). Worker → target: a response frame (below) with an empty payload when the
  module loaded, or the error.
- per object, whole: target → worker ``u32 h, h bytes of JSON {"path", "args"}, u64 n, n bytes
  of data``; worker → target ``u8 status (0 ok, 1 error), u64 n, n bytes`` (the result, or the
  error message).
- per object, streamed (the header has ``"stream": true``): target → worker ``u32 h, header``,
  then the data as frames ``u32 n, n bytes`` ended by ``u32 0``; worker → target, while it
  reads, frames ``u8 kind, u32 n, n bytes``: kind 0 a piece of the result, 1 the end (n = 0),
  2 an error message (the end too). The worker reads the input to its end in every case, so
  the next object starts on a frame boundary. Neither side holds the whole object.

The worker never sees where objects are stored: it gets bytes and the object's name. Anything
the transform prints goes to stderr (the target keeps the last lines as the ETL's log), never
into the protocol.
"""

import io
import json
import os
import struct
import sys
import traceback

_FRAME = 1 << 20  # largest piece of result per frame
_BUFFER = 256 * 1024


def _read_exact(f, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = f.read(n - len(buf))
        if not chunk:
            raise EOFError("target closed the pipe")
        buf.extend(chunk)
    return bytes(buf)


def _reply(out, status, payload):
    out.write(struct.pack(">BQ", status, len(payload)))
    out.write(payload)
    out.flush()


class _FrameReader(io.RawIOBase):
    """The object's bytes as the target streams them: ``u32 n, n bytes`` frames, ``u32 0`` last."""

    def __init__(self, inp):
        self.inp = inp
        self.left = 0
        self.ended = False

    def readable(self):
        return True

    def readinto(self, b):
        while self.left == 0:
            if self.ended:
                return 0
            (n,) = struct.unpack(">I", _read_exact(self.inp, 4))
            if n == 0:
                self.ended = True
                return 0
            self.left = n
        data = self.inp.read(min(len(b), self.left))
        if not data:
            raise EOFError("target closed the pipe")
        b[: len(data)] = data
        self.left -= len(data)
        return len(data)

    def drain(self):
        """Skips what the transform left unread, up to the end frame."""
        while not self.ended:
            if self.left:
                _read_exact(self.inp, self.left)
                self.left = 0
            self.readinto(bytearray(1))


class _FrameWriter(io.RawIOBase):
    """The result, sent as it is written: ``u8 0, u32 n, n bytes`` frames."""

    def __init__(self, out):
        self.out = out

    def writable(self):
        return True

    def write(self, b):
        view = memoryview(b).cast("B")
        for at in range(0, len(view), _FRAME):
            piece = view[at : at + _FRAME]
            self.out.write(struct.pack(">BI", 0, len(piece)))
            self.out.write(piece)
        return len(view)


def _stream_object(inp, out, header, transform, transform_stream):
    raw_in = _FrameReader(inp)
    reader = io.BufferedReader(raw_in, _BUFFER)
    writer = io.BufferedWriter(_FrameWriter(out), _BUFFER)
    path, args = header.get("path", ""), header.get("args", "")
    try:
        if transform_stream is not None:
            transform_stream(reader, writer, path, args)
        else:
            result = _checked(transform(reader.read(), path, args))
            writer.write(result)
        writer.flush()
        status, message = 1, b""
    except MemoryError:
        status, message = 2, b"MemoryError: the transform exceeded the ETL's memory limit"
    except BaseException as e:  # noqa: BLE001 - one object's failure, not the worker's
        if isinstance(e, SystemExit):
            raise
        status, message = 2, _error_text(e)
    raw_in.drain()
    out.write(struct.pack(">BI", status, len(message)))
    out.write(message)
    out.flush()


def _checked(result):
    if isinstance(result, str):
        return result.encode("utf-8")
    if not isinstance(result, (bytes, bytearray, memoryview)):
        raise TypeError(f"transform returned {type(result).__name__}, expected bytes")
    return bytes(result)


def _error_text(exc):
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return last.encode("utf-8", "replace")


def main():
    inp = sys.stdin.buffer
    out = sys.stdout.buffer
    # User code must not write into the protocol: its prints go to stderr.
    sys.stdout = sys.stderr
    (n,) = struct.unpack(">I", _read_exact(inp, 4))
    source = _read_exact(inp, n).decode("utf-8")
    module = {"__name__": "gristmill_etl_user"}
    try:
        exec(compile(source, "<etl>", "exec"), module)
        transform = module.get("transform")
        transform_stream = module.get("transform_stream")
        if transform is None and transform_stream is None:
            raise NameError("the module defines neither transform nor transform_stream")
        for f in (transform, transform_stream):
            if f is not None and not callable(f):
                raise TypeError(f"{f!r} is not callable")
        if transform is None:
            def transform(data, path, args):  # whole objects through the streaming form
                result = io.BytesIO()
                transform_stream(io.BytesIO(data), result, path, args)
                return result.getvalue()
    except BaseException as e:  # noqa: BLE001 - report anything the module raises
        _reply(out, 1, b"loading the ETL code: " + _error_text(e))
        return
    _reply(out, 0, b"")
    while True:
        try:
            (h,) = struct.unpack(">I", _read_exact(inp, 4))
        except EOFError:
            return
        header = json.loads(_read_exact(inp, h))
        if header.get("stream"):
            _stream_object(inp, out, header, transform, transform_stream)
            sys.stderr.flush()
            continue
        (n,) = struct.unpack(">Q", _read_exact(inp, 8))
        data = _read_exact(inp, n)
        try:
            result = _checked(transform(data, header.get("path", ""), header.get("args", "")))
            _reply(out, 0, result)
        except MemoryError:
            _reply(out, 1, b"MemoryError: the transform exceeded the ETL's memory limit")
        except BaseException as e:  # noqa: BLE001 - one object's failure, not the worker's
            if isinstance(e, SystemExit):
                raise
            _reply(out, 1, _error_text(e))
        sys.stderr.flush()


if __name__ == "__main__":
    try:
        main()
    except EOFError:
        pass
    os._exit(0)

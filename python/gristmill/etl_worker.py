"""The Gristmill ETL worker: runs a user's ``transform`` for a target, one object at a time.

A target starts a pool of these processes per ETL (``python -c <this file>``; it needs nothing
but the standard library) and talks to each over stdin/stdout with length-prefixed frames, all
integers big-endian:

- startup: target → worker ``u32 n, n bytes``: the user's module source (UTF-8). The module must
  define ``transform(data: bytes, path: str, args: str) -> bytes``. Worker → target: a response
  frame (below) with an empty payload when the module loaded, or the error.
- per object: target → worker ``u32 h, h bytes of JSON {"path", "args"}, u64 n, n bytes of
  data``; worker → target ``u8 status (0 ok, 1 error), u64 n, n bytes`` (the result, or the
  error message).

The worker never sees where objects are stored: it gets bytes and the object's name. Anything
the transform prints goes to stderr (the target keeps the last lines as the ETL's log), never
into the protocol.
"""

import json
import os
import struct
import sys
import traceback


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
        transform = module["transform"]
        if not callable(transform):
            raise TypeError("transform is not callable")
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
        (n,) = struct.unpack(">Q", _read_exact(inp, 8))
        data = _read_exact(inp, n)
        try:
            result = transform(data, header.get("path", ""), header.get("args", ""))
            if isinstance(result, str):
                result = result.encode("utf-8")
            elif not isinstance(result, (bytes, bytearray, memoryview)):
                raise TypeError(f"transform returned {type(result).__name__}, expected bytes")
            _reply(out, 0, bytes(result))
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

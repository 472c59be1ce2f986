"""Jobs and ETLs: long operations that run on every target (prefetch, evict, copy, transform,
LRU, rebalance) and the transforms that run next to the data.

    >>> job = client.bucket("data", provider="aws").prefetch(template="shard-{0000..0999}.tar")
    >>> job.wait(progress=lambda s: print(s["objects"], "/", s["total_objects"]))
    >>> etl = client.etl("upper")
    >>> etl.init_code(lambda data, path, args: data.upper())   # or source text
    >>> bucket.object("a.txt").get(etl="upper")
"""

from __future__ import annotations

import base64
import inspect
import json
import sys
import textwrap
import time
from typing import Any, Callable, Dict, List, Optional, Union
from urllib.parse import quote

from .errors import GristError

_JSON = {"Content-Type": "application/json"}


class JobFailed(GristError):
    """A job ended aborted, or with failed objects (``status`` holds the job's status)."""

    def __init__(self, message: str, status: Dict[str, Any]):
        super().__init__(0, message)
        self.status = status


class EtlError(GristError):
    """An ETL could not be made ready on a target (e.g. its dependencies failed to install)."""


class Job:
    """A cluster-wide job (its id is the same on every target)."""

    def __init__(self, client: Any, job_id: str):
        self.client = client
        self.id = job_id

    def __repr__(self) -> str:
        return f"Job({self.id})"

    def status(self) -> Dict[str, Any]:
        """Totals and per-target progress: ``state`` (running, finished, aborted),
        ``objects``, ``total_objects``, ``bytes``, ``skipped``, ``errors``, ``targets``."""
        resp = self.client._request("GET", f"/v1/jobs/{quote(self.id, safe='')}", subject="job")
        return json.loads(resp.data)

    def errors(self) -> List[Dict[str, str]]:
        """Failed objects (name and error), as sampled by each target."""
        return [e for t in self.status().get("targets", []) for e in t.get("error_samples", [])]

    def stop(self) -> None:
        """Aborts the job on every target."""
        self.client._request("DELETE", f"/v1/jobs/{quote(self.id, safe='')}", subject="job")

    def wait(self, timeout: float = 3600, progress: Optional[Callable[[Dict[str, Any]], None]] = None,
             raise_on_error: bool = True) -> Dict[str, Any]:
        """Polls until the job ends; returns its final status. Raises ``JobFailed`` if it was
        aborted or any object failed (unless ``raise_on_error`` is False), ``TimeoutError``
        after ``timeout`` seconds (the job keeps running)."""
        deadline = time.monotonic() + timeout
        pause = 0.05
        while True:
            s = self.status()
            if progress is not None:
                progress(s)
            if s["state"] != "running":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {self.id} still running after {timeout}s")
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
        if raise_on_error and (s["state"] == "aborted" or s.get("errors", 0) > 0):
            raise JobFailed(f"job {self.id} {s['state']} with {s.get('errors', 0)} failed objects", s)
        return s


def selection(names: Optional[List[str]] = None, template: Optional[str] = None,
              prefix: Optional[str] = None) -> Dict[str, Any]:
    """The selection fields of a job request (one of them; none = the whole bucket)."""
    given = [x for x in (names, template, prefix) if x]
    if len(given) > 1:
        raise ValueError("give one of names, template or prefix")
    v: Dict[str, Any] = {}
    if names:
        v["objnames"] = list(names)
    if template:
        v["template"] = template
    if prefix:
        v["prefix"] = prefix
    return v


class Etl:
    """A named transform, run by every target on its own objects."""

    def __init__(self, client: Any, name: str):
        self.client = client
        self.name = name

    def __repr__(self) -> str:
        return f"Etl({self.name})"

    def _init(self, spec: Dict[str, Any]) -> "Etl":
        spec = {"name": self.name, **spec}
        self.client._request("PUT", "/v1/etl", body=json.dumps(spec).encode(), headers=_JSON, subject="etl")
        return self

    def init_code(self, transform: Union[str, Callable[[bytes, str, str], bytes]], *,
                  workers: int = 0, timeout: int = 0, memory_limit: int = 0,
                  env: Optional[Dict[str, str]] = None,
                  dependencies: Optional[List[str]] = None,
                  wait_timeout: float = 600.0) -> "Etl":
        """Defines a Python ETL from a function ``transform(data, path, args) -> bytes``, a
        streaming function ``f(reader, writer, path, args)`` (four parameters: binary file
        objects in and out; large objects then pass without being whole in memory), or from
        module source text that defines ``transform`` and/or ``transform_stream``.

        A function's source is shipped when it has one and needs nothing around it (a ``def``
        without closures; module-level imports go inside it). Otherwise — a lambda, a closure,
        a function typed into a REPL or ``python -c`` — it is serialised with ``cloudpickle``,
        which travels with it (the targets need nothing installed); the Python version is
        recorded, and a worker running another version refuses it with a clear error rather
        than misreading the bytecode.

        ``dependencies``: pip requirements the code imports (``["numpy>=1.26", "pillow"]``, or
        paths of wheels on the targets). Every target installs them into a virtual environment
        before starting workers; this call waits (up to ``wait_timeout`` seconds) until all
        targets are ready and raises :class:`EtlError` with pip's message if one failed."""
        code = _etl_source(transform) if callable(transform) else transform
        self._init({"runtime": "python", "code": code, "workers": workers,
                    "timeout_secs": timeout, "memory_limit": memory_limit, "env": env or {},
                    "dependencies": list(dependencies or [])})
        if dependencies:
            self.wait_ready(wait_timeout)
        return self

    def wait_ready(self, timeout: float = 600.0) -> None:
        """Waits until every target has installed the ETL's dependencies; raises
        :class:`EtlError` naming the target and pip's last words if one could not, or
        :class:`TimeoutError`."""
        deadline = time.monotonic() + timeout
        while True:
            targets = self.show().get("targets", {})
            states = {node: s.get("dependencies", "ready") for node, s in targets.items()}
            failed = {n: s for n, s in states.items() if s.startswith("failed")}
            if failed:
                node, why = sorted(failed.items())[0]
                raise EtlError(f"ETL {self.name!r}: target {node}: dependencies {why}")
            if states and all(s == "ready" for s in states.values()):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"ETL {self.name!r}: dependencies not ready after {timeout}s: {states}")
            time.sleep(0.5)

    def init_command(self, command: List[str], *, framed: bool = False, workers: int = 0,
                     timeout: int = 0, memory_limit: int = 0) -> "Etl":
        """Defines a command ETL: per object stdin → stdout (``["gzip", "-c", "-n"]``), or a
        long-lived program speaking the framed protocol."""
        return self._init({"runtime": "command", "command": list(command), "framed": framed,
                           "workers": workers, "timeout_secs": timeout, "memory_limit": memory_limit})

    def init_http(self, url: str, *, timeout: int = 0) -> "Etl":
        """Defines an ETL served by an HTTP service (POST per object)."""
        return self._init({"runtime": "http", "url": url, "timeout_secs": timeout})

    def show(self) -> Dict[str, Any]:
        """The definition and per-target counters (objects, errors, worker restarts)."""
        return json.loads(self.client._request("GET", f"/v1/etl/{quote(self.name, safe='')}", subject="etl").data)

    def logs(self) -> Dict[str, List[str]]:
        return json.loads(self.client._request("GET", f"/v1/etl/{quote(self.name, safe='')}/logs",
                                               subject="etl").data)

    def stop(self) -> None:
        self.client._request("POST", f"/v1/etl/{quote(self.name, safe='')}/stop", subject="etl")

    def start(self) -> None:
        self.client._request("POST", f"/v1/etl/{quote(self.name, safe='')}/start", subject="etl")

    def delete(self) -> None:
        self.client._request("DELETE", f"/v1/etl/{quote(self.name, safe='')}", subject="etl")


def _etl_source(fn: Callable[..., Any]) -> str:
    """The module text that defines ``transform`` (or ``transform_stream``) as ``fn``: its
    source when that stands alone, else a cloudpickle of it (see ``Etl.init_code``)."""
    streaming = len(inspect.signature(fn).parameters) == 4
    entry = "transform_stream" if streaming else "transform"
    name = getattr(fn, "__name__", "")
    if name != "<lambda>" and not getattr(getattr(fn, "__code__", None), "co_freevars", ()):
        try:
            src = textwrap.dedent(inspect.getsource(fn))
        except (OSError, TypeError):
            src = None  # defined in a REPL or `python -c`: no source to read
        if src is not None:
            return f"{src}\n\n{entry} = {name}\n" if name != entry else src
    return pickled_etl_source(fn, entry)


def pickled_etl_source(fn: Callable[..., Any], entry: str = "transform",
                       python: Optional[tuple] = None) -> str:
    """Module text that rebuilds ``fn`` from a cloudpickle as ``entry``. The cloudpickle module
    this process uses travels inside it (pure Python), so the worker needs nothing installed and
    unpickles with the very version that pickled; ``python`` (default: this interpreter's
    ``(major, minor)``) is recorded and checked first, since pickled bytecode is only valid on
    the Python version that made it."""
    try:
        import cloudpickle
        import cloudpickle.cloudpickle as cloudpickle_impl
    except ImportError as e:  # pragma: no cover - a declared dependency of the SDK
        raise ImportError("init_code needs cloudpickle for functions without standalone source") from e
    major, minor = python or sys.version_info[:2]
    payload = base64.b64encode(cloudpickle.dumps(fn)).decode("ascii")
    impl = inspect.getsource(cloudpickle_impl)
    version = cloudpickle.__version__
    return f"""# {entry}: a function pickled by cloudpickle {version} under Python {major}.{minor} (gristmill SDK)
import sys as _sys
if tuple(_sys.version_info[:2]) != ({major}, {minor}):
    raise RuntimeError(
        "this ETL's function was pickled under Python {major}.{minor}, and this ETL worker runs "
        "Python %d.%d: pickled bytecode only loads on the same version; define the ETL from "
        "source text, or run it from the targets' Python version" % tuple(_sys.version_info[:2]))
import base64 as _base64
import pickle as _pickle
import types as _types
_impl = _types.ModuleType("cloudpickle.cloudpickle")
_pkg = _types.ModuleType("cloudpickle")
_pkg.__path__ = []
_pkg.__version__ = {version!r}
_pkg.cloudpickle = _impl
_sys.modules["cloudpickle"] = _pkg
_sys.modules["cloudpickle.cloudpickle"] = _impl
exec(compile({impl!r}, "cloudpickle/cloudpickle.py ({version})", "exec"), _impl.__dict__)
{entry} = _pickle.loads(_base64.b64decode({payload!r}))
"""

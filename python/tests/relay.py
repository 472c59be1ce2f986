"""A small HTTP relay for tests: sits on 127.0.0.1:0 in front of one upstream node (a proxy or
a target), records every request, and injects faults on demand (error statuses, connections
cut mid-body). Redirects from the upstream pass through untouched."""

from __future__ import annotations

import http.client
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}


@dataclass
class Seen:
    method: str
    path: str
    headers: Dict[str, str]


@dataclass
class _Faults:
    statuses: List[int] = field(default_factory=list)  # answered instead of relaying, one each
    retry_after: Optional[str] = None
    cuts: List[int] = field(default_factory=list)  # cut the body after this many bytes, one each
    methods: Optional[set] = None  # faults only hit these methods (None: all)


class Relay:
    """``with Relay("http://127.0.0.1:8080") as r: ...`` — ``r.url`` is the relay's address."""

    def __init__(self, upstream: str):
        up = urlsplit(upstream)
        self.upstream = (up.hostname, up.port)
        self.seen: List[Seen] = []
        self.faults = _Faults()
        self._lock = threading.Lock()
        relay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _relay(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                with relay._lock:
                    relay.seen.append(Seen(self.command, self.path, dict(self.headers.items())))
                    hit = relay.faults.methods is None or self.command in relay.faults.methods
                    status = relay.faults.statuses.pop(0) if hit and relay.faults.statuses else None
                    cut = relay.faults.cuts.pop(0) if hit and status is None and relay.faults.cuts else None
                if status is not None:
                    msg = b'{"message":"injected by the test relay","status":%d}' % status
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(msg)))
                    if relay.faults.retry_after is not None:
                        self.send_header("Retry-After", relay.faults.retry_after)
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                conn = http.client.HTTPConnection(*relay.upstream, timeout=120)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                    if body is not None:
                        headers["Content-Length"] = str(len(body))
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    clen = resp.getheader("Content-Length")
                    data = None if clen is not None or self.command == "HEAD" else resp.read()
                    self.send_response(resp.status, resp.reason)
                    for k, v in resp.getheaders():
                        if k.lower() not in _HOP_BY_HOP:
                            self.send_header(k, v)
                    n = int(clen) if clen is not None else len(data or b"")
                    self.send_header("Content-Length", str(n))
                    self.end_headers()
                    if self.command == "HEAD":
                        return
                    if data is not None:
                        self.wfile.write(data)
                        return
                    sent = 0
                    while True:
                        chunk = resp.read(64 * 1024)
                        if not chunk:
                            break
                        if cut is not None and sent + len(chunk) >= cut:
                            self.wfile.write(chunk[: cut - sent])
                            self.wfile.flush()
                            self.close_connection = True
                            self.connection.shutdown(socket.SHUT_RDWR)
                            return
                        self.wfile.write(chunk)
                        sent += len(chunk)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def requests(self, method: Optional[str] = None, path_prefix: str = "") -> List[Seen]:
        with self._lock:
            return [s for s in self.seen if (method is None or s.method == method) and s.path.startswith(path_prefix)]

    def inject(self, *, statuses=(), retry_after: Optional[str] = None, cuts=(), methods=None) -> None:
        """Answers the next requests with ``statuses`` (one each), then cuts the bodies of the
        following ones after ``cuts`` bytes (one each); ``methods`` limits the faults to those
        methods."""
        with self._lock:
            self.faults = _Faults(list(statuses), retry_after, list(cuts), set(methods) if methods else None)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "Relay":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def dead_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (a port just released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"

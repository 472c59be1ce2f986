"""Client, buckets and objects of Gristmill's native (AIStore-compatible) REST API."""

from __future__ import annotations

import http.client
import io
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING,
    Any,
    BinaryIO,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
)
from urllib.parse import quote, urlencode, urljoin, urlsplit

import msgpack
import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
    SSLError,
)

from . import hrw
from .errors import (
    BadRequest,
    BucketExists,
    BucketNotFound,
    ConnectionFailed,
    GristError,
    NotFound,
    ObjectNotFound,
    error_from_response,
)
from .retry import IDEMPOTENT_METHODS, RetryPolicy, as_policy, parse_retry_after

if TYPE_CHECKING:
    from .batch import Batch
    from .jobs import Etl, Job

log = logging.getLogger("gristmill")
"""The SDK's logger: retries and give-ups (INFO / WARNING), proxy failovers (WARNING), direct-mode
map refreshes (INFO), redirects (DEBUG). Silent unless the application configures logging."""

DEFAULT_ENDPOINT = "http://127.0.0.1:8080"
ENDPOINT_ENV = ("GRIST_ENDPOINT", "AIS_ENDPOINT")
"""Environment variables naming the proxy endpoint(s), in order of precedence (comma-separated
for several proxies); ``AIS_ENDPOINT`` lets AIStore users keep their setup."""
TOKEN_ENV = ("GRIST_TOKEN", "AIS_AUTHN_TOKEN")
"""Environment variables holding the bearer token, in order of precedence."""
MSGPACK = "application/msgpack"
_REDIRECTS = (301, 302, 307, 308)
_MAX_HOPS = 5
_CHUNK = 1 << 20

ByteRange = Union[Tuple[Optional[int], Optional[int]], str]
"""``(start, end_inclusive)``; ``(start, None)`` reads to the end, ``(None, n)`` the last n bytes;
or a raw ``"bytes=..."`` header value."""


# Connection failures: the request was not sent (safe to retry anything) ...
_NOT_SENT = (NewConnectionError, ConnectTimeoutError)
# ... or it may have been (retried only when idempotent and replayable).
_MAYBE_SENT = (ProtocolError, ReadTimeoutError, SSLError)


# Accepted by a cluster with S3 auth off (the playground's default).
DEFAULT_S3_ACCESS_KEY = "gristmill"
DEFAULT_S3_SECRET_KEY = "gristmill-secret"


class Client:
    """Connection to a Gristmill cluster through its proxy (or proxies).

    Args:
        endpoint: proxy URL, or a list of proxy URLs to fail over between (the first is tried
            first; on a connection failure the next one takes over). Defaults to
            ``$GRIST_ENDPOINT``, else ``$AIS_ENDPOINT`` (either may be comma-separated), else
            ``http://127.0.0.1:8080``.
        token: bearer token sent as ``Authorization: Bearer <token>`` on every request (to
            proxies and targets alike); defaults to ``$GRIST_TOKEN``, else ``$AIS_AUTHN_TOKEN``.
        direct: send object GET/HEAD/DELETE straight to the owning target (placement computed
            here by HRW from the cached cluster map) instead of through a proxy redirect, and
            get-batch requests to the target owning most of their items. PUTs always go to the
            owner this way, so the body is sent once. When a target cannot be reached, the map
            is refreshed and the request goes through a proxy.
        timeout: ``(connect, read)`` seconds, or one number for both.
        retry: a ``RetryPolicy``, a number of retries, or None for the default policy (see
            ``gristmill.retry`` for what is retried).
        pool_maxsize: connections kept per node. Each DataLoader worker process builds its own
            pools (the client is fork-safe and picklable), so this bounds the connections of one
            process: raise it when many threads share a client.
        retries: older spelling of ``retry=<int>``.
        ca_bundle: PEM file of CAs to trust for ``https://`` endpoints (a cluster with its own
            CA); defaults to ``$GRIST_CA_BUNDLE``, else the system's trust store.
        insecure: do not verify TLS certificates (tests only); defaults to ``$GRIST_INSECURE``.

    A client can be pickled or inherited by ``fork``: the copy opens its own connections on
    first use in the new process, and keeps the cached cluster map.
    """

    def __init__(
        self,
        endpoint: Union[str, Sequence[str], None] = None,
        *,
        token: Optional[str] = None,
        direct: bool = False,
        timeout: Union[float, Tuple[float, float]] = (5.0, 120.0),
        retry: Union[RetryPolicy, int, None] = None,
        pool_maxsize: int = 16,
        retries: Optional[int] = None,
        ca_bundle: Optional[str] = None,
        insecure: Optional[bool] = None,
    ):
        self.endpoints: List[str] = _endpoints(endpoint)
        self._active = 0  # index into endpoints of the proxy in use
        if token is None:
            token = next((os.environ[k] for k in TOKEN_ENV if os.environ.get(k)), None)
        self.token = token
        self.direct = direct
        self.timeout = (float(timeout), float(timeout)) if isinstance(timeout, (int, float)) else tuple(timeout)
        self.retry = as_policy(retry if retries is None else retries)
        self.pool_maxsize = pool_maxsize
        self.ca_bundle = ca_bundle if ca_bundle is not None else (os.environ.get("GRIST_CA_BUNDLE") or None)
        if insecure is None:
            insecure = os.environ.get("GRIST_INSECURE", "").lower() in ("1", "true", "yes")
        self.insecure = insecure
        self._smap: Optional[Dict[str, Any]] = None
        self._pool: Optional[urllib3.PoolManager] = None
        self._pool_pid = 0  # process that built _pool: a forked child builds its own

    @property
    def endpoint(self) -> str:
        """The proxy currently in use (changes on failover)."""
        return self.endpoints[self._active]

    @property
    def _http(self) -> urllib3.PoolManager:
        """The connection pools of this process, built on first use (after a fork, anew:
        sockets inherited from the parent must not be shared)."""
        pid = os.getpid()
        if self._pool is None or self._pool_pid != pid:
            self._pool = urllib3.PoolManager(
                num_pools=64,
                maxsize=self.pool_maxsize,
                block=False,
                blocksize=256 * 1024,
                timeout=urllib3.Timeout(connect=self.timeout[0], read=self.timeout[1]),
                retries=False,  # retries, redirects and failover are ours (see _request)
                **self._tls_kwargs(),
            )
            self._pool_pid = pid
        return self._pool

    def _tls_kwargs(self) -> Dict[str, Any]:
        """urllib3 settings for ``https://`` nodes: a CA bundle, or no verification."""
        if self.insecure:
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
            return {"cert_reqs": "CERT_NONE"}
        if self.ca_bundle:
            return {"cert_reqs": "CERT_REQUIRED", "ca_certs": self.ca_bundle}
        return {}

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["_pool"], state["_pool_pid"] = None, 0
        return state

    def __repr__(self) -> str:
        ep = self.endpoint if len(self.endpoints) == 1 else self.endpoints
        return f"Client({ep!r}, direct={self.direct})"

    def close(self) -> None:
        """Closes all pooled connections."""
        if self._pool is not None and self._pool_pid == os.getpid():
            self._pool.clear()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- cluster ---------------------------------------------------------------------------

    def job(self, job_id: str) -> "Job":
        """A handle to a running or finished job."""
        from .jobs import Job

        return Job(self, job_id)

    def jobs(self, kind: str = "", running: bool = False) -> List[Dict[str, Any]]:
        """Jobs across the cluster, newest first (``kind``: prefetch, evict, copy, etl, lru,
        rebalance, ...)."""
        query = urlencode({"kind": kind, "running": "true" if running else "false"})
        return json.loads(self._request("GET", f"/v1/jobs?{query}", subject="job").data)

    def etl(self, name: str) -> "Etl":
        """A handle to an ETL (define it with ``init_code``/``init_command``/``init_http``)."""
        from .jobs import Etl

        return Etl(self, name)

    def batch(self, bucket: Union["Bucket", str, None] = None, *, output_format: str = ".tar",
              continue_on_error: bool = False, etl: Union[str, List[str], None] = None,
              etl_args: str = "") -> "Batch":
        """A get-batch request (``GET /v1/ml/moss``): ``add()`` objects, byte ranges and
        members of shards, then ``get()`` or ``stream()`` them all with one request, in the
        order added. ``bucket`` is where names given to ``add`` live; ``etl`` runs every item
        through an ETL (or a pipeline, a list of names) on the target. See ``gristmill.batch``."""
        from .batch import Batch

        return Batch(self, bucket, output_format=output_format, continue_on_error=continue_on_error,
                     etl=etl, etl_args=etl_args)

    def bucket(self, name: str, provider: str = "ais", namespace: str = "") -> "Bucket":
        """A handle to bucket ``name`` (no request is sent)."""
        return Bucket(self, name, provider, namespace)

    def list_buckets(self, provider: Optional[str] = None) -> List["Bucket"]:
        """Buckets in the cluster, optionally only those of one provider (``ais``, ``aws``, ``ht``)."""
        resp = self._request(
            "GET", f"/v1/buckets?{urlencode({'provider': provider or ''})}",
            body=_action("list"), headers=_JSON,
        )
        out = []
        for b in json.loads(resp.data or b"[]"):
            ns = b.get("namespace") or {}
            nss = f"@{ns.get('uuid', '')}#{ns.get('name', '')}" if ns.get("uuid") or ns.get("name") else ""
            out.append(Bucket(self, b["name"], b.get("provider", "ais"), nss))
        return out

    def cluster_map(self, refresh: bool = True) -> Dict[str, Any]:
        """The cluster map (``tmap``, ``pmap``, ``proxy_si``, ``version``, ...) as a dict.

        With ``refresh=False`` the cached copy is returned when there is one.
        """
        smap = self._smap
        if refresh or smap is None:
            smap = json.loads(self._request("GET", "/v1/cluster?what=smap").data)
            self._smap = smap
            log.debug("cluster map v%s: %d targets, %d proxies", smap.get("version"),
                      len(smap.get("tmap") or {}), len(smap.get("pmap") or {}))
        return smap

    def login(self, user: str, password: str, ttl: str = "") -> str:
        """Logs in as ``user`` (a cluster with auth on): the token is kept for every later
        request of this client and returned (for ``$GRIST_TOKEN`` or another client). ``ttl``:
        the token's lifetime, such as ``"12h"`` (empty: the cluster's default)."""
        body = json.dumps({"name": user, "password": password, "ttl": ttl}).encode()
        resp = self._request("POST", "/v1/auth/login", body=body, headers=_JSON, subject="user",
                             idempotent=False)
        self.token = json.loads(resp.data)["token"]
        return self.token

    def whoami(self) -> Dict[str, Any]:
        """The user this client's token belongs to (name, roles)."""
        return json.loads(self._request("GET", "/v1/auth/whoami").data)

    def reshard(self, bucket: "Bucket", to: Optional["Bucket"] = None, *,
                input_template: Optional[str] = None, input_prefix: Optional[str] = None,
                output_template: str = "shard-{00000..}.tar", shard_size: int = 64 << 20,
                algorithm: str = "", seed: str = "", decreasing: bool = False,
                spec: Optional[Dict[str, Any]] = None) -> "Job":
        """Starts a reshard of ``bucket``'s shards (see ``Bucket.reshard``); returns its job."""
        from .jobs import Job

        out = to or bucket
        req: Dict[str, Any] = {
            "input_bck": {"name": bucket.name, "provider": bucket.provider},
            "output_bck": {"name": out.name, "provider": out.provider},
            "output_format": output_template,
            "output_shard_size": int(shard_size),
        }
        if input_template:
            req["input_format"] = {"template": input_template}
        elif input_prefix:
            req["input_format"] = {"prefix": input_prefix}
        if algorithm or seed or decreasing:
            req["algorithm"] = {"kind": algorithm, "seed": seed, "decreasing": decreasing}
        req.update(spec or {})
        resp = self._request("POST", "/v1/sort", body=json.dumps(req).encode(), headers=_JSON,
                             idempotent=False)
        return Job(self, resp.data.decode().strip())

    def cluster(self) -> "ClusterInfo":
        """The cluster now: every node (role, URL, state, mountpaths) and the capacity of the
        targets' file systems (each counted once however many mountpaths share it). One
        request: the proxy asks every node (a node that does not answer is ``up=False``)."""
        return ClusterInfo._from_overview(self._overview())

    def _overview(self) -> Dict[str, Any]:
        return json.loads(self._request("GET", "/v1/cluster?what=overview").data)

    def health(self) -> bool:
        """Whether the proxy answers its health check (one try, no retries)."""
        try:
            return self._http.request("GET", f"{self.endpoint}/v1/health", headers=self._headers()).status == 200
        except HTTPError:
            return False

    def s3_settings(self) -> Dict[str, Any]:
        """How S3 clients reach this cluster: endpoint, region, path-style, and whether
        anonymous access is on (then the playground's example key works too)."""
        r = self._request("GET", "/", raise_for_status=False)
        _discard(r)
        anonymous = r.status == 200
        return {
            "endpoint": self.endpoint,
            "region": "us-east-1",
            "path_style": True,
            "anonymous": anonymous,
            "access_key": DEFAULT_S3_ACCESS_KEY if anonymous else None,
            "secret_key": DEFAULT_S3_SECRET_KEY if anonymous else None,
        }

    def owner(self, uname: str) -> Dict[str, Any]:
        """The target node (Snode dict) that owns an object, by HRW over the cached map."""
        node = hrw.owner(self.cluster_map(refresh=False), uname)
        if node is None:
            node = hrw.owner(self.cluster_map(refresh=True), uname)
            if node is None:
                raise GristError(0, "no targets in the cluster map")
        return node

    # ---- HTTP --------------------------------------------------------------------------------

    def _headers(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        h = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        if extra:
            h.update(extra)
        return h

    def _proxy_path(self, url: str) -> Optional[str]:
        """The path + query of ``url`` when it is addressed to one of our proxies (or is a bare
        path), so that a retry can go to another proxy; None for any other URL."""
        if url.startswith("/"):
            return url
        for ep in self.endpoints:
            if url.startswith(ep) and url[len(ep):len(ep) + 1] in ("/", "?", ""):
                return url[len(ep):] or "/"
        return None

    def _request(
        self,
        method: str,
        url: str,
        *,
        body: Any = None,
        headers: Optional[Dict[str, str]] = None,
        stream: bool = False,
        subject: Optional[str] = None,
        routed: bool = False,
        idempotent: Optional[bool] = None,
        raise_for_status: bool = True,
        chunked: bool = False,
        conditional: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        """Sends a request with retries, proxy failover and redirects followed by hand.

        ``url`` is a path (``/v1/...``, sent to the proxy in use), a URL at one of our proxies,
        or any other URL (a target). ``routed`` marks a request sent to a target chosen from the
        cached map: a redirect then means the map is stale, so it is dropped; a connection
        failure drops it too and sends the request through a proxy instead. ``idempotent``
        overrides the method's default (True for GET/HEAD/PUT/DELETE). ``chunked`` sends an
        iterable body with ``Transfer-Encoding: chunked`` (never re-sent). ``conditional`` marks a
        conditional write: replayed after 429/503 (not carried out), never after a lost answer
        (it would fail on its own success). Raises a ``GristError``
        on 4xx/5xx (unless ``raise_for_status`` is False) and ``ConnectionFailed`` when the
        retry policy gives up on a connection error.
        """
        policy = self.retry
        if conditional:
            idempotent = False
        elif idempotent is None:
            idempotent = method in IDEMPOTENT_METHODS
        pos = None
        replayable = True
        if hasattr(body, "read"):
            replayable = _seekable(body)
            pos = body.tell() if replayable else None
        if chunked:
            replayable = False
        proxy_path = self._proxy_path(url)
        headers = self._headers(headers)
        started = time.monotonic()
        attempt = 0
        tried = {self._active}  # proxies tried by this request (failover skips the wait once)
        while True:
            attempt += 1
            first = self.endpoint + proxy_path if proxy_path is not None else url
            failed_url, error, retry_after, resp = first, None, None, None
            try:
                resp = self._follow(method, first, body, pos, headers, stream, routed, chunked)
            except _Hop as hop:
                failed_url, error = hop.url, hop.error
            if resp is not None:
                if resp.status not in policy.statuses:
                    break
                retry_after = parse_retry_after(resp.headers.get("Retry-After"))
                # 429 and 503 say the request was not carried out: a conditional write may
                # go again. (502/504 do not: it may have been.)
                may_retry = (idempotent or (conditional and resp.status in (429, 503))) and replayable
            else:
                may_retry = isinstance(error, _NOT_SENT) or (idempotent and replayable)
            # A failure: may we try again, and where?
            delay = policy.delay(attempt, retry_after)
            switched = False
            if error is not None:
                failed_proxy = self._proxy_path(failed_url) is not None
                if routed and not failed_proxy:
                    # The target we picked from the map is unreachable: refresh the map, and
                    # let a proxy route this request to whoever owns the object now.
                    log.info("target %s unreachable (%s): cluster map dropped, %s %s goes "
                             "through a proxy", _origin(failed_url), error, method, _path_of(url))
                    self._smap = None
                    routed = False
                    proxy_path = _path_of(url)
                    switched = True
                elif failed_proxy and len(self.endpoints) > 1:
                    gone = self.endpoint
                    self._active = (self._active + 1) % len(self.endpoints)
                    switched = self._active not in tried
                    tried.add(self._active)
                    log.warning("proxy %s unreachable (%s): failing over to %s", gone, error, self.endpoint)
            if switched:
                delay = 0.0
            why = f"{resp.status}" if resp is not None else f"{type(error).__name__}: {error}"
            if (not may_retry or attempt >= policy.attempts
                    or time.monotonic() - started + delay > policy.deadline):
                if may_retry:
                    log.warning("%s %s: %s; giving up after %d attempts in %.1f s", method,
                                _path_of(failed_url), why, attempt, time.monotonic() - started)
                if resp is not None:
                    break  # report the last answer (e.g. 503) as it is
                raise ConnectionFailed(0, f"{method} {failed_url}: {error}", url=failed_url) from error
            log.info("%s %s: %s; retry %d of %d in %.2f s", method, _path_of(failed_url), why,
                     attempt, policy.attempts - 1, delay)
            if resp is not None:
                _discard(resp)
            if delay:
                time.sleep(delay)
            if pos is not None:
                body.seek(pos)
        if raise_for_status and resp.status >= 400:
            data = resp.data if not stream else resp.read()
            _discard(resp)
            raise error_from_response(resp.status, data if method != "HEAD" else b"", url, subject)
        return resp

    def _follow(self, method: str, url: str, body: Any, pos: Optional[int], headers: Dict[str, str],
                stream: bool, routed: bool, chunked: bool = False) -> urllib3.BaseHTTPResponse:
        """One attempt: the request and the redirects it gets (re-sending the body, rewinding
        files). Connection errors come out as ``_Hop`` naming the URL that failed."""
        for _ in range(_MAX_HOPS + 1):
            try:
                resp = self._http.urlopen(
                    method, url, body=body, headers=headers, redirect=False,
                    preload_content=not stream, assert_same_host=False, chunked=chunked,
                )
            except (*_NOT_SENT, *_MAYBE_SENT) as e:
                raise _Hop(url, e) from e
            location = resp.headers.get("Location") if resp.status in _REDIRECTS else None
            if location is None:
                return resp
            _discard(resp)
            if routed:
                log.info("%s %s redirected to %s: the cached cluster map is stale, dropped",
                         method, _path_of(url), location)
                self._smap = None
            log.debug("%s %s: %d to %s", method, _path_of(url), resp.status, location)
            url = urljoin(url, location)
            if chunked:
                raise GristError(resp.status, f"redirected to {url} but a chunked body cannot be re-sent", url=url)
            if hasattr(body, "read"):
                if pos is None:
                    raise GristError(resp.status, f"redirected to {url} but the body cannot be re-sent", url=url)
                body.seek(pos)
        raise GristError(0, f"too many redirects ({method} {url})", url=url)


class _Hop(Exception):
    """A connection error at ``url`` during one attempt (internal to ``Client._request``)."""

    def __init__(self, url: str, error: Exception):
        super().__init__(str(error))
        self.url = url
        self.error = error


def _endpoints(endpoint: Union[str, Sequence[str], None]) -> List[str]:
    if endpoint is None:
        endpoint = next((os.environ[k] for k in ENDPOINT_ENV if os.environ.get(k)), DEFAULT_ENDPOINT)
    if isinstance(endpoint, str):
        endpoint = endpoint.split(",")
    eps = [e.strip().rstrip("/") for e in endpoint if e and e.strip()]
    if not eps:
        raise ValueError("no endpoint given")
    return [e if "://" in e else f"http://{e}" for e in eps]


_SCHEMES = {"aws": "s3", "gcp": "gs", "azure": "az"}
"""Providers by the scheme the cluster shows them with (others are shown as named)."""

LS_ARCH_DIR = 1 << 3
"""Listing flag: shard members too (AIStore's ``LsArchDir``)."""
ENTRY_IS_ARCHIVE = 1 << 9
"""Entry flag of a shard in an ``archive=True`` listing."""
ARCH_MODES = ("regexp", "prefix", "suffix", "substr", "wdskey")
"""How ``archregx`` matches shard members."""


def _archive_query(archpath: Optional[str], archregx: Optional[str], archmode: str) -> str:
    """The query of a read inside a shard (empty when neither is given)."""
    if archpath is not None and archregx is not None:
        raise ValueError("archpath and archregx are exclusive: one member, or every member that matches")
    if archpath is not None:
        if not archpath:
            raise ValueError("archpath must name a member")
        return urlencode({"archpath": archpath})
    if archregx is not None:
        if archmode not in ARCH_MODES:
            raise ValueError(f"archmode must be one of {', '.join(ARCH_MODES)}, not {archmode!r}")
        return urlencode({"archregx": archregx, "archmode": archmode})
    return ""


def _origin(url: str) -> str:
    """``scheme://host:port`` of a URL."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _path_of(url: str) -> str:
    """``/path?query`` of a URL."""
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


class Bucket:
    """A bucket: ``provider`` (``ais``, ``aws``/``s3``, ``ht``) + optional ``@uuid#name`` namespace + name."""

    def __init__(self, client: Client, name: str, provider: str = "ais", namespace: str = ""):
        self.client = client
        self.name = name
        self.provider = {"s3": "aws", "": "ais"}.get(provider, provider)
        self.namespace = namespace
        rest = namespace[1:] if namespace.startswith("@") else namespace
        self._ns_uuid, _, self._ns_name = rest.partition("#")
        params = {"provider": self.provider}
        if namespace:
            params["namespace"] = namespace
        self._query = urlencode(params)

    def __repr__(self) -> str:
        ns = f"{self.namespace}/" if self.namespace else ""
        return f"Bucket({self.provider}://{ns}{self.name})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Bucket) and (self.provider, self.namespace, self.name) == (
            other.provider, other.namespace, other.name)

    def __hash__(self) -> int:
        return hash((self.provider, self.namespace, self.name))

    @property
    def _url(self) -> str:
        return f"{self.client.endpoint}/v1/buckets/{quote(self.name, safe='')}?{self._query}"

    def create(self, exist_ok: bool = False) -> None:
        """Creates the bucket (``ais`` only). Raises ``BucketExists`` unless ``exist_ok``."""
        try:
            self.client._request("POST", self._url, body=_action("create-bck"), headers=_JSON, subject="bucket")
        except BucketExists:
            if not exist_ok:
                raise

    def delete(self, missing_ok: bool = False) -> None:
        """Destroys the bucket and its objects. Raises ``BucketNotFound`` unless ``missing_ok``."""
        try:
            self.client._request("DELETE", self._url, body=_action("destroy-bck"), headers=_JSON, subject="bucket")
        except BucketNotFound:
            if not missing_ok:
                raise

    def head(self) -> Dict[str, Any]:
        """Bucket properties (the ``Ais-Bucket-Props`` JSON). Raises ``BucketNotFound``."""
        resp = self.client._request("HEAD", self._url, subject="bucket")
        raw = resp.headers.get("Ais-Bucket-Props")
        return json.loads(raw) if raw else {}

    def exists(self) -> bool:
        """Whether the bucket exists."""
        try:
            self.head()
            return True
        except BucketNotFound:
            return False

    def list_objects(
        self,
        prefix: str = "",
        page_size: int = 0,
        props: str = "",
        continuation_token: str = "",
        uuid: str = "",
        archive: bool = False,
    ) -> "ListPage":
        """One page of the listing, in name order.

        Args:
            prefix: only names starting with it (it may reach into a shard: ``a.tar/train/``).
            page_size: entries per page; 0 lets the server choose.
            props: comma-separated properties (``name,size,checksum,atime,version,location,copies``
                or ``all``); empty gives name and size.
            continuation_token, uuid: from the previous page (empty for the first one).
            archive: also list the members of every shard (``.tar``, ``.tgz``/``.tar.gz``,
                ``.tar.lz4``, ``.zip``), each right after its shard as ``shard/member`` with
                ``ListEntry.in_archive`` set (AIStore's ``LsArchDir``).
        """
        value = {
            "prefix": prefix, "pagesize": page_size, "props": props,
            "continuation_token": continuation_token, "uuid": uuid,
            "flags": str(LS_ARCH_DIR if archive else 0),
        }
        resp = self.client._request(
            "GET", self._url, body=_action("list", value),
            headers={**_JSON, "Accept": MSGPACK}, subject="bucket",
        )
        if resp.headers.get("Content-Type", "").startswith(MSGPACK):
            return ListPage._from_msgpack(msgpack.unpackb(resp.data, raw=False))
        return ListPage._from_json(json.loads(resp.data))

    def list_objects_iter(self, prefix: str = "", page_size: int = 0, props: str = "",
                          archive: bool = False) -> Iterator["ListEntry"]:
        """Every entry of the listing, fetching pages lazily (``archive``: shard members too)."""
        token, uuid = "", ""
        while True:
            page = self.list_objects(prefix, page_size, props, token, uuid, archive=archive)
            yield from page.entries
            if not page.continuation_token:
                return
            token, uuid = page.continuation_token, page.uuid

    def list_all_objects(self, prefix: str = "", page_size: int = 0, props: str = "",
                         archive: bool = False) -> List["ListEntry"]:
        """Every entry of the listing, as a list (``archive``: shard members too)."""
        return list(self.list_objects_iter(prefix, page_size, props, archive))

    # --- jobs (see gristmill.jobs) -------------------------------------------------------

    def _job(self, method: str, action: str, value: Dict[str, Any], query: str = "") -> "Job":
        from .jobs import Job

        url = self._url + (f"&{query}" if query else "")
        resp = self.client._request(method, url, body=_action(action, value), headers=_JSON,
                                    subject="bucket", idempotent=False)
        return Job(self.client, resp.data.decode().strip())

    def prefetch(self, names: Optional[List[str]] = None, template: Optional[str] = None,
                 prefix: Optional[str] = None, latest: bool = False, num_workers: int = 0) -> "Job":
        """Caches objects of a remote bucket in the cluster (a job; ``.wait()`` it).
        ``template``: ``"shard-{0000..0999}.tar"``; none of the three = the whole bucket."""
        from .jobs import selection

        v = {**selection(names, template, prefix), "latest-ver": latest, "num-workers": num_workers}
        return self._job("POST", "prefetch-listrange", v)

    def evict(self, names: Optional[List[str]] = None, template: Optional[str] = None,
              prefix: Optional[str] = None) -> "Job":
        """Drops cached copies of remote objects (the remote keeps them); a job."""
        from .jobs import selection

        return self._job("DELETE", "evict-listrange", selection(names, template, prefix))

    def scrub(self, prefix: str = "", no_repair: bool = False, num_workers: int = 0) -> "Job":
        """Re-reads every stored copy of this bucket's objects on every target (owned copies
        and replicas), verifies size and checksum, and repairs corrupt copies from a replica or
        the remote (a job; ``no_repair`` only reports). The job's status counts them in
        ``counters``: ``corrupt``, ``repaired``, ``unrepairable``."""
        from .jobs import Job

        value = {
            "kind": "scrub",
            "bck": {"name": self.name, "provider": self.provider,
                    "namespace": {"uuid": self._ns_uuid, "name": self._ns_name}},
            "prefix": prefix, "no_repair": no_repair, "num-workers": num_workers,
        }
        resp = self.client._request("PUT", "/v1/cluster", body=_action("start", value), headers=_JSON,
                                    subject="cluster", idempotent=False)
        return Job(self.client, resp.data.decode().strip())

    def evict_all(self, keep_metadata: bool = False) -> None:
        """Drops every cached object of this remote bucket (and forgets the bucket unless
        ``keep_metadata``); returns when done."""
        url = f"{self._url}&keep_md={'true' if keep_metadata else 'false'}"
        self.client._request("DELETE", url, body=_action("evict-remote-bck"), headers=_JSON, subject="bucket")

    def _bck_to(self, to: "Bucket") -> str:
        ns = to.namespace or "@#"
        return urlencode({"bck_to": f"{to.provider}/{ns}/{to.name}/"})

    def copy(self, to: "Bucket", names: Optional[List[str]] = None, template: Optional[str] = None,
             prefix: Optional[str] = None, prepend: str = "", to_prefix: Optional[str] = None,
             dry_run: bool = False, num_workers: int = 0) -> "Job":
        """Copies this bucket (or a selection) to ``to``, across any providers (a job). With
        ``prefix`` and ``to_prefix`` the prefix is rewritten; ``prepend`` goes in front."""
        from .jobs import selection

        v: Dict[str, Any] = {**selection(names, template, prefix), "prepend": prepend,
                             "dry_run": dry_run, "num-workers": num_workers}
        if to_prefix is not None:
            v["to_prefix"] = to_prefix
        return self._job("POST", "copy-bck", v, self._bck_to(to))

    def transform(self, etl: Union[str, List[str]], to: "Bucket", names: Optional[List[str]] = None,
                  template: Optional[str] = None, prefix: Optional[str] = None,
                  ext: Optional[Dict[str, str]] = None, args: str = "", dry_run: bool = False,
                  num_workers: int = 0) -> "Job":
        """Runs objects through an ETL (or a pipeline: a list of names) into ``to`` (a job);
        ``ext`` maps extensions of output names (``{"jpg": "npy"}``)."""
        from .jobs import selection

        names_ = etl if isinstance(etl, str) else ",".join(etl)
        v: Dict[str, Any] = {**selection(names, template, prefix), "id": names_, "etl_args": args,
                             "ext": ext or {}, "dry_run": dry_run, "num-workers": num_workers}
        return self._job("POST", "etl-bck", v, self._bck_to(to))

    def delete_objects(self, names: Optional[List[str]] = None, template: Optional[str] = None,
                       prefix: Optional[str] = None, *, workers: int = 16) -> List[str]:
        """Deletes the objects named by exactly one of ``names``, a brace ``template``
        (``"img-{0000..0999}.jpg"``) or a ``prefix`` (listed first), ``workers`` at a time,
        each straight at its owner; returns the names deleted. Names in the list or the
        template that do not exist are skipped; any other failure raises after the rest."""
        from concurrent.futures import ThreadPoolExecutor

        from .template import expand_template

        given = [x for x in (names, template, prefix) if x]
        if len(given) != 1:
            raise ValueError("give exactly one of names, template or prefix (all objects: prefix=\"\" is refused)")
        if names:
            todo = list(names)
        elif template:
            todo = expand_template(template)
        else:
            todo = [e.name for e in self.list_objects_iter(prefix=prefix or "")]

        def one(name: str) -> Optional[str]:
            try:
                self.object(name)._send("DELETE", direct=self.client.direct)
                return name
            except ObjectNotFound:
                return None

        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            results = list(pool.map(one, todo))
        deleted = [n for n in results if n is not None]
        log.info("%r: deleted %d of %d objects", self, len(deleted), len(todo))
        return deleted

    def archive(self, archname: str, to: Optional["Bucket"] = None, names: Optional[List[str]] = None,
                template: Optional[str] = None, prefix: Optional[str] = None, *,
                shard_size: int = 0, mime: str = "", include_bucket: bool = False,
                append: bool = False, continue_on_error: bool = False) -> "Job":
        """Packs objects of this bucket (all, or a selection) into a shard ``archname`` of ``to``
        (default: this bucket), a job. The format follows ``archname``'s extension (``.tar``,
        ``.tgz``/``.tar.gz``, ``.tar.lz4``, ``.zip``) unless ``mime`` says otherwise. With
        ``shard_size`` (bytes) ``archname`` is a series template such as ``"out-{0000..}.tar"``
        and a new shard starts whenever one reaches that size. ``include_bucket`` names members
        ``bucket/object``; ``append`` adds to an existing shard instead of replacing it."""
        from .jobs import selection

        v: Dict[str, Any] = {**selection(names, template, prefix), "archname": archname,
                             "isbn": include_bucket, "aate": append, "coer": continue_on_error}
        if mime:
            v["mime"] = mime
        if shard_size:
            v["shard_size"] = int(shard_size)
        return self._job("PUT", "archive", v, self._bck_to(to or self))

    def reshard(self, to: Optional["Bucket"] = None, *, input_template: Optional[str] = None,
                input_prefix: Optional[str] = None, output_template: str = "shard-{00000..}.tar",
                shard_size: int = 64 << 20, algorithm: str = "", seed: str = "",
                decreasing: bool = False, spec: Optional[Dict[str, Any]] = None) -> "Job":
        """Re-packs the samples of this bucket's shards into new shards of about ``shard_size``
        bytes named by ``output_template`` in ``to`` (default: this bucket), never splitting a
        sample (AIStore's dsort), a job. ``algorithm``: ``alphanumeric`` (by sample key, the
        default; ``decreasing`` reverses it), ``shuffle`` (seeded by ``seed``) or ``none``
        (input order). ``spec`` adds or overrides any field of the dsort request."""
        return self.client.reshard(self, to, input_template=input_template, input_prefix=input_prefix,
                                   output_template=output_template, shard_size=shard_size,
                                   algorithm=algorithm, seed=seed, decreasing=decreasing, spec=spec)

    def set_props(self, **patch: Any) -> Optional["Job"]:
        """Changes bucket properties: ``set_props(lru={"quota": 10 << 30}, mirror={"copies": 2},
        versioning={"validate_warm_get": True})``. A change of ``mirror.copies`` starts a
        make-n-copies job that adds or drops replicas of the existing objects: it is returned
        (``.wait()`` it); otherwise ``None``."""
        from .jobs import Job

        resp = self.client._request("PATCH", self._url, body=_action("set-bprops", patch),
                                    headers=_JSON, subject="bucket")
        job_id = resp.data.decode().strip()
        return Job(self.client, job_id) if job_id else None

    def list_cached(self, prefix: str = "", cached: bool = True) -> List["ListEntry"]:
        """A remote bucket's objects that are (``cached``) or are not cached in the cluster."""
        flags = 1 if cached else 1 << 9
        out: List[ListEntry] = []
        token, uuid = "", ""
        while True:
            value = {"prefix": prefix, "continuation_token": token, "uuid": uuid, "flags": str(flags)}
            resp = self.client._request("GET", self._url, body=_action("list", value),
                                        headers={**_JSON, "Accept": MSGPACK}, subject="bucket")
            if resp.headers.get("Content-Type", "").startswith(MSGPACK):
                page = ListPage._from_msgpack(msgpack.unpackb(resp.data, raw=False))
            else:
                page = ListPage._from_json(json.loads(resp.data))
            out.extend(page.entries)
            if not page.continuation_token:
                return out
            token, uuid = page.continuation_token, page.uuid

    def summary(self) -> "BucketSummary":
        """Objects and bytes the targets store for this bucket now (replicas included: with
        ``mirror.copies = 2`` each object counts twice), and its copies setting."""
        props = self.head()  # raises BucketNotFound
        copies = int((props.get("mirror") or {}).get("copies") or 1)
        scheme = _SCHEMES.get(self.provider, self.provider)
        for b in self.client._overview().get("buckets", []):
            shown, _, rest = str(b.get("bucket", "")).partition("://")
            if shown == scheme and rest.rsplit("/", 1)[-1] == self.name:
                return BucketSummary(f"{shown}://{rest}", int(b.get("objects", 0)), int(b.get("bytes", 0)), copies)
        # Created a moment ago and not yet in the proxy's view: nothing stored.
        return BucketSummary(f"{scheme}://{self.name}", 0, 0, copies)

    def object(self, name: str) -> "Object":
        """A handle to object ``name`` in this bucket (no request is sent)."""
        return Object(self, name)

    def uname(self, obj: str) -> str:
        """Placement name of an object in this bucket (``ais/@#/bucket/obj``)."""
        return hrw.uname(self.name, obj, self.provider, self._ns_uuid, self._ns_name)


@dataclass
class ListEntry:
    """One listed object; properties not requested are empty / 0."""

    name: str
    size: int = 0
    checksum: str = ""
    atime: str = ""
    version: str = ""
    location: str = ""
    copies: int = 0
    flags: int = 0

    @property
    def is_cached(self) -> bool:
        """Whether the object is present in the cluster (for remote buckets: cached)."""
        return bool(self.flags & (1 << 6))

    @property
    def in_archive(self) -> bool:
        """Whether this entry is a member of a shard (``shard/member``; ``archive=True`` listings)."""
        return bool(self.flags & (1 << 7))

    @property
    def is_archive(self) -> bool:
        """Whether this entry is a shard whose members an ``archive=True`` listing shows."""
        return bool(self.flags & ENTRY_IS_ARCHIVE)


@dataclass
class NodeInfo:
    """One node of the cluster (see ``Client.cluster``)."""

    id: str
    role: str
    """``proxy`` or ``target``."""
    url: str
    up: bool
    """Whether it answered the proxy just now."""
    flags: List[str] = field(default_factory=list)
    """``maintenance``, ``decommission``."""
    mountpaths: List[Dict[str, Any]] = field(default_factory=list)
    """Targets: ``path``, ``total``, ``available``, ``used`` (bytes of its file system), ``fs``."""
    error: Optional[str] = None


@dataclass
class ClusterInfo:
    """The cluster's nodes and capacity (see ``Client.cluster``)."""

    version: int
    """Of the cluster map."""
    primary: str
    """Id of the primary proxy."""
    nodes: List[NodeInfo]
    total: int
    """Bytes of the targets' file systems, each counted once."""
    used: int
    available: int

    @property
    def proxies(self) -> List[NodeInfo]:
        return [n for n in self.nodes if n.role == "proxy"]

    @property
    def targets(self) -> List[NodeInfo]:
        return [n for n in self.nodes if n.role == "target"]

    @classmethod
    def _from_overview(cls, o: Dict[str, Any]) -> "ClusterInfo":
        nodes = [NodeInfo(n["id"], n["role"], n["url"], bool(n.get("up")), list(n.get("flags") or []),
                          list(n.get("mountpaths") or []), n.get("error")) for n in o.get("nodes", [])]
        seen: Dict[Tuple[str, Any], Dict[str, Any]] = {}
        for n in nodes:
            for mp in n.mountpaths:
                # Mountpaths on one file system report all of it: count it once per host.
                seen.setdefault((urlsplit(n.url).hostname or "", mp.get("fs")), mp)
        total = sum(int(mp.get("total", 0)) for mp in seen.values())
        available = sum(int(mp.get("available", 0)) for mp in seen.values())
        return cls(int(o.get("smap_version", 0)), o.get("primary", ""), nodes, total, total - available, available)


@dataclass
class BucketSummary:
    """What a bucket holds (see ``Bucket.summary``)."""

    bucket: str
    objects: int
    """Stored objects, replicas included."""
    bytes: int
    """Stored bytes, replicas included."""
    copies: int
    """``mirror.copies`` of the bucket (divide by it for distinct objects)."""


@dataclass
class ListPage:
    """A page of a listing. An empty ``continuation_token`` means this is the last page."""

    entries: List[ListEntry]
    continuation_token: str = ""
    uuid: str = ""
    flags: int = 0

    @classmethod
    def _from_msgpack(cls, d: Dict[str, Any]) -> "ListPage":
        entries = [
            ListEntry(e["n"], int(e.get("s") or 0), e.get("cs") or "", e.get("a") or "", e.get("v") or "",
                      e.get("t") or "", int(e.get("c") or 0), int(e.get("f") or 0))
            for e in d.get("Entries") or ()
        ]
        return cls(entries, d.get("ContinuationToken") or "", d.get("UUID") or "", int(d.get("Flags") or 0))

    @classmethod
    def _from_json(cls, d: Dict[str, Any]) -> "ListPage":
        entries = [
            ListEntry(e["name"], int(e.get("size") or 0), e.get("checksum", ""), e.get("atime", ""),
                      e.get("version", ""), e.get("location", ""), int(e.get("copies") or 0),
                      int(e.get("flags") or 0))
            for e in d.get("entries") or ()
        ]
        return cls(entries, d.get("continuation_token") or "", d.get("uuid") or "", int(d.get("flags") or 0))


@dataclass
class ObjectProps:
    """Object metadata from HEAD (or from a PUT's response).

    ``checksum_value`` is XXH64 (seed 0) of the content as 16 hex digits when
    ``checksum_type == "xxhash"``; ``atime_ns`` is Unix nanoseconds; ``location`` is
    ``t[<target id>]:<mountpath>``.
    """

    size: int = 0
    checksum_type: str = ""
    checksum_value: str = ""
    version: str = ""
    atime_ns: int = 0
    present: bool = False
    location: str = ""
    custom: Dict[str, str] = field(default_factory=dict)

    @property
    def target_id(self) -> str:
        """Id of the target holding the object (parsed from ``location``)."""
        if self.location.startswith("t[") and "]" in self.location:
            return self.location[2:self.location.index("]")]
        return ""

    @classmethod
    def from_headers(cls, h: Any, size: Optional[int] = None) -> "ObjectProps":
        """Parses ``Content-Length`` and the ``Ais-*`` headers."""
        custom = {}
        for part in (h.get("Ais-Custom-Md") or "").split(","):
            k, sep, v = part.strip().partition("=")
            if sep:
                custom[k] = v
        return cls(
            size=size if size is not None else _int(h.get("Content-Length")),
            checksum_type=h.get("Ais-Checksum-Type", ""),
            checksum_value=h.get("Ais-Checksum-Value", ""),
            version=h.get("Ais-Version", ""),
            atime_ns=_int(h.get("Ais-Atime")),
            present=h.get("Ais-Present", "") == "true",
            location=h.get("Ais-Location", ""),
            custom=custom,
        )


class Object:
    """An object in a bucket."""

    def __init__(self, bucket: Bucket, name: str):
        self.bucket = bucket
        self.name = name
        self.uname = bucket.uname(name)
        self._path = f"/v1/objects/{quote(bucket.name, safe='')}/{_quote_name(name)}?{bucket._query}"

    def __repr__(self) -> str:
        return f"Object({self.bucket!r}, {self.name!r})"

    def _target(self, force: bool) -> Tuple[str, bool]:
        """(base URL, routed): the owner when routing directly, else the proxy."""
        client = self.bucket.client
        if force or client.direct:
            return client.owner(self.uname)["public_net"]["direct_url"].rstrip("/"), True
        return client.endpoint, False

    def get_url(self, direct: bool = False) -> str:
        """The object's URL for plain HTTP clients (curl, ``webdataset``): at the proxy, which
        redirects to the owner, or with ``direct=True`` at the owning target itself."""
        return self._target(direct)[0] + self._path

    def _send(self, method: str, *, query: str = "", direct: bool = False, **kw) -> urllib3.BaseHTTPResponse:
        if not self.name:  # `/v1/objects/<bucket>/` names no object; don't send it
            raise BadRequest(400, "invalid object name: empty")
        base, routed = self._target(direct)
        url = base + self._path + (f"&{query}" if query else "")
        return self.bucket.client._request(method, url, subject="object", routed=routed, **kw)

    def put(self, data: Union[bytes, bytearray, memoryview, BinaryIO, str, os.PathLike], *,
            size: Optional[int] = None, if_none_match: Optional[str] = None,
            if_match: Optional[str] = None) -> ObjectProps:
        """Stores the object, replacing any previous content.

        ``data`` is the content (bytes-like), an open binary file (streamed from its current
        position; ``size`` bytes if given), or a ``str``/path-like naming a local file to stream.
        The body goes straight to the owning target (HRW), so it is sent once. Returns the new
        object's properties.

        A conditional write (decided by the owner atomically with the commit): ``if_none_match
        ="*"`` stores only if the object does not exist, ``if_match="<etag>"`` only if it still
        has that ETag (``"*"``: exists). Raises ``PreconditionFailed`` (412) when it does not hold,
        ``ObjectNotFound`` for ``if_match`` on a missing object (as S3 answers).
        """
        if isinstance(data, (str, os.PathLike)):
            with open(data, "rb") as f:
                return self.put(f, size=size, if_none_match=if_none_match, if_match=if_match)
        if isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        if not isinstance(data, bytes):
            if size is None:
                size = _remaining(data)
            if size is None:  # unknown length (pipe, generator-backed stream): buffer it
                data = data.read()
        if isinstance(data, bytes):
            size = len(data)
        headers = {"Content-Length": str(size), "Content-Type": "application/octet-stream"}
        if if_none_match is not None:
            headers["If-None-Match"] = if_none_match
        if if_match is not None:
            headers["If-Match"] = if_match
        conditional = if_none_match is not None or if_match is not None
        resp = self._send("PUT", body=data, headers=headers, direct=True, conditional=conditional)
        return ObjectProps.from_headers(resp.headers, size=size)

    def append_member(self, member: str, data: Union[bytes, bytearray, memoryview]) -> None:
        """Adds a file ``member`` with ``data`` to this shard (a ``.tar``, created when missing),
        in place on its target. Raises ``Conflict`` if the shard already has that member."""
        if not member:
            raise ValueError("name the member to append")
        self._send("PUT", query=urlencode({"archpath": member}), body=bytes(data),
                   headers={"Content-Type": "application/octet-stream"}, direct=True, idempotent=False)

    def put_chunks(self, chunks: Iterable[Union[bytes, bytearray, memoryview]]) -> ObjectProps:
        """Stores the object from an iterable of byte chunks of unknown total length, sent as
        they come (``Transfer-Encoding: chunked``, straight to the owning target): nothing is
        buffered here. The object appears only once the last chunk arrived and was stored whole;
        an exception from ``chunks`` aborts the upload and leaves any previous version. Not
        retried (the chunks cannot be replayed); see ``open_writer`` for a file-like form."""
        headers = {"Content-Type": "application/octet-stream"}
        resp = self._send("PUT", body=(bytes(c) for c in chunks if len(c)), headers=headers,
                          direct=True, chunked=True, idempotent=False)
        return ObjectProps.from_headers(resp.headers)

    def open_writer(self, chunk_size: int = _CHUNK, queue_depth: int = 8) -> "ObjectWriter":
        """A binary file to write the object into, uploaded while it is written (see
        ``put_chunks``): at most ``queue_depth`` pieces of ``chunk_size`` bytes wait in memory.
        ``close()`` (or leaving the ``with`` block) finishes the upload and raises if it failed;
        leaving on an exception aborts it."""
        return ObjectWriter(self, chunk_size, queue_depth)

    def open_reader(self, buffer_size: int = 4 * _CHUNK) -> "ObjectRangeReader":
        """A seekable binary file over the object, read with range GETs as it is read (a
        ``buffer_size`` read-ahead for small reads; large reads go straight into the caller's
        buffer): for formats that jump around, such as zip or ``torch.load``."""
        return ObjectRangeReader(self, buffer_size)

    def get(self, byte_range: Optional[ByteRange] = None, validate_checksum: bool = False,
            etl: Union[str, List[str], None] = None, etl_args: str = "", *,
            archpath: Optional[str] = None, archregx: Optional[str] = None,
            archmode: str = "regexp") -> bytes:
        """The object's content, or one byte range of it (see ``ByteRange``).

        ``validate_checksum`` makes the target verify the stored checksum before serving.
        ``etl``: the object run through an ETL (or a pipeline, a list of names) on its target.
        In a shard (``.tar``, ``.tgz``/``.tar.gz``, ``.tar.lz4``, ``.zip``): ``archpath`` reads
        one member; ``archregx`` reads every member that matches, as a tar, where ``archmode``
        says how it matches: ``regexp``, ``prefix``, ``suffix``, ``substr`` or ``wdskey`` (the
        WebDataset sample key: every file of one sample).
        Raises ``ObjectNotFound`` (also for a missing member), ``BucketNotFound``,
        ``RangeNotSatisfiable``.
        """
        if etl:
            names = etl if isinstance(etl, str) else ",".join(etl)
            query = urlencode({"etl_name": names, "etl_args": etl_args})
            return self._send("GET", query=query).data
        archive = _archive_query(archpath, archregx, archmode)
        return self._get(byte_range, validate_checksum, stream=False, query=archive).data

    def get_stream(self, chunk_size: int = _CHUNK, byte_range: Optional[ByteRange] = None,
                   validate_checksum: bool = False, resume: bool = True, *,
                   archpath: Optional[str] = None, archregx: Optional[str] = None,
                   archmode: str = "regexp") -> "ObjectReader":
        """A streaming reader: iterate it for chunks of ``chunk_size`` bytes, or ``read(n)`` it
        like a file. Use it as a context manager (or call ``close()``) to free the connection.

        With ``resume`` (the default), a connection that breaks mid-body is re-opened with a
        range request from the first byte not yet read (through the client's retry policy,
        so a dead target is routed around), as long as the object's version is unchanged;
        whole objects and ``(start, end)`` ranges resume, other range forms do not, nor do
        reads inside a shard (``archpath``, ``archregx``: see ``get``).
        """
        archive = _archive_query(archpath, archregx, archmode)
        resp = self._get(byte_range, validate_checksum, stream=True, query=archive)
        reopen = None
        if archive:
            resume = False
        if resume and (byte_range is None or (isinstance(byte_range, tuple) and byte_range[0] is not None)):
            start, end = (0, None) if byte_range is None else byte_range

            def reopen(offset: int) -> urllib3.BaseHTTPResponse:
                return self._get((start + offset, end), validate_checksum, stream=True)

        return ObjectReader(resp, chunk_size, reopen=reopen, retry=self.bucket.client.retry)

    def get_to_file(self, path: Union[str, os.PathLike], chunk_size: int = _CHUNK,
                    byte_range: Optional[ByteRange] = None) -> int:
        """Streams the object into a local file; returns the number of bytes written."""
        n = 0
        with self.get_stream(chunk_size, byte_range) as r, open(path, "wb") as f:
            for chunk in r:
                f.write(chunk)
                n += len(chunk)
        return n

    def _get(self, byte_range: Optional[ByteRange], validate: bool, stream: bool,
             query: str = "") -> urllib3.BaseHTTPResponse:
        headers = {}
        if byte_range is not None:
            headers["Range"] = _range_header(byte_range)
        if validate:
            query = "validate_checksum=true" + (f"&{query}" if query else "")
        return self._send("GET", query=query, headers=headers, stream=stream)

    def head(self) -> ObjectProps:
        """The object's properties. Raises ``ObjectNotFound`` (also when the bucket is missing,
        as HEAD errors carry no body to tell them apart)."""
        return ObjectProps.from_headers(self._send("HEAD").headers)

    def exists(self) -> bool:
        """Whether the object exists."""
        try:
            self.head()
            return True
        except NotFound:
            return False

    def delete(self) -> None:
        """Deletes the object. Raises ``ObjectNotFound`` if it does not exist."""
        self._send("DELETE")


class ObjectWriter(io.RawIOBase):
    """A binary file whose bytes are uploaded as the object while they are written (see
    ``Object.open_writer``): writes are cut into pieces of at most ``chunk_size`` bytes that a
    background thread sends, ``queue_depth`` at most waiting."""

    def __init__(self, obj: Object, chunk_size: int, queue_depth: int):
        super().__init__()
        import queue
        import threading

        self._obj = obj
        self._chunk = max(1, chunk_size)
        self._queue: "queue.Queue[Optional[bytes]]" = queue.Queue(maxsize=max(1, queue_depth))
        self._error: Optional[BaseException] = None
        self._aborted = False
        self._written = 0
        self.props: Optional[ObjectProps] = None
        self._thread = threading.Thread(target=self._upload, name="gristmill-writer", daemon=True)
        self._thread.start()

    def _pieces(self) -> Iterator[bytes]:
        while True:
            piece = self._queue.get()
            if piece is None:
                if self._aborted:
                    raise RuntimeError("upload aborted")
                return
            yield piece

    def _upload(self) -> None:
        try:
            self.props = self._obj.put_chunks(self._pieces())
        except BaseException as e:  # noqa: BLE001 - reported by write/close
            self._error = e
            while True:  # unblock a writer waiting on a full queue
                try:
                    if self._queue.get_nowait() is None:
                        break
                except Exception:  # noqa: BLE001 - queue.Empty
                    break

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._written

    def write(self, b: Any) -> int:
        if self.closed:
            raise ValueError("write to a closed ObjectWriter")
        view = memoryview(b).cast("B")
        for at in range(0, len(view), self._chunk):
            if self._error is not None:
                raise OSError(f"upload of {self._obj.name} failed: {self._error}") from self._error
            self._put(bytes(view[at:at + self._chunk]))
        self._written += len(view)
        return len(view)

    def _put(self, piece: Optional[bytes]) -> None:
        import queue

        while self._thread.is_alive():
            try:
                self._queue.put(piece, timeout=0.5)
                return
            except queue.Full:
                continue

    def abort(self) -> None:
        """Gives the upload up: the object keeps its previous content (or stays absent)."""
        if not self.closed:
            self._aborted = True
            self._put(None)
            self._thread.join()
            super().close()

    def close(self) -> None:
        if self.closed:
            return
        self._put(None)
        self._thread.join()
        super().close()
        if self._error is not None:
            raise OSError(f"upload of {self._obj.name} failed: {self._error}") from self._error

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abort()
            return False
        self.close()
        return False


class ObjectRangeReader(io.RawIOBase):
    """A seekable binary file over an object, read with range GETs (see ``Object.open_reader``).
    The object's version at open is pinned: a rewrite meanwhile makes reads fail rather than
    mix two versions."""

    def __init__(self, obj: Object, buffer_size: int):
        super().__init__()
        self._obj = obj
        props = obj.head()
        self.size = props.size
        self._version = props.version
        self._buffer_size = max(1, buffer_size)
        self._pos = 0
        self._buf = b""
        self._buf_at = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def _range(self, start: int, end: int) -> urllib3.BaseHTTPResponse:
        resp = self._obj._get((start, end - 1), False, stream=True)
        version = resp.headers.get("ais-version")
        if self._version and version and version != self._version:
            _discard(resp)
            raise OSError(f"{self._obj.name} changed while it was read (version {self._version} → {version})")
        return resp

    def readinto(self, b: Any) -> int:
        """Fills ``b`` (up to the end of the object): a read never comes back short."""
        view = memoryview(b).cast("B")
        done = 0
        while done < len(view):
            n = self._read_some(view[done:])
            if n == 0:
                break
            done += n
        return done

    def _read_some(self, view: memoryview) -> int:
        want = min(len(view), self.size - self._pos)
        if want <= 0:
            return 0
        at = self._pos - self._buf_at
        if 0 <= at < len(self._buf):
            n = min(want, len(self._buf) - at)
            view[:n] = self._buf[at:at + n]
            self._pos += n
            return n
        if want >= self._buffer_size:
            # A large read: straight into the caller's buffer.
            resp = self._range(self._pos, self._pos + want)
            try:
                n = 0
                while n < want:
                    got = _readinto(resp, view[n:want])
                    if not got:
                        raise OSError(f"{self._obj.name}: range answer ended at {n} of {want} bytes")
                    n += got
            finally:
                _discard(resp)
            self._pos += want
            return want
        end = min(self.size, self._pos + self._buffer_size)
        resp = self._range(self._pos, end)
        try:
            self._buf = resp.read()
        finally:
            _discard(resp)
        self._buf_at = self._pos
        if len(self._buf) != end - self._pos:
            raise OSError(f"{self._obj.name}: range answer of {len(self._buf)} bytes, expected {end - self._pos}")
        return self._read_some(view)


class ObjectReader(io.RawIOBase):
    """Streaming object content. Iterating yields chunks; ``read``/``readinto`` work as on a file.

    ``props`` has the object's properties, ``status`` is 200 or 206 (range), ``size`` the number
    of bytes this response carries. ``resumed`` counts the times a broken connection was
    re-opened at the current offset (see ``Object.get_stream``).
    """

    def __init__(self, resp: urllib3.BaseHTTPResponse, chunk_size: int = _CHUNK,
                 reopen: Optional[Callable[[int], urllib3.BaseHTTPResponse]] = None,
                 retry: Optional[RetryPolicy] = None):
        super().__init__()
        self._resp = resp
        self.chunk_size = chunk_size
        self.status = resp.status
        self.size = _int(resp.headers.get("Content-Length"))
        self.props = ObjectProps.from_headers(resp.headers)
        self._reopen = reopen
        self._retry = retry or RetryPolicy()
        self._pos = 0  # bytes handed to the caller so far
        self.resumed = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        amt = None if size is None or size < 0 else size
        failures = 0
        while True:
            try:
                data = self._resp.read(amt)
                self._pos += len(data)
                return data
            except _MAYBE_SENT as e:  # the connection broke (or stalled) mid-body
                failures += 1
                if self._reopen is None or failures >= self._retry.attempts:
                    raise ConnectionFailed(0, f"reading object: {e}") from e
                # (bytes urllib3 had buffered before the error are not counted in _pos, so the
                # re-opened range starts exactly after what the caller has.)
                self._resume()

    def _resume(self) -> None:
        _discard(self._resp)
        resp = self._reopen(self._pos)  # retries connection failures itself
        new = ObjectProps.from_headers(resp.headers)
        old = self.props
        if (old.version and new.version and old.version != new.version) or (
                old.checksum_value and new.checksum_value and old.checksum_value != new.checksum_value):
            _discard(resp)
            raise GristError(0, "object changed while being read; cannot resume")
        self._resp = resp
        self.resumed += 1

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def __iter__(self) -> Iterator[bytes]:  # type: ignore[override]
        # A generator method, so iterating keeps the reader (and its response) alive.
        while True:
            chunk = self.read(self.chunk_size)
            if not chunk:
                return
            yield chunk

    def close(self) -> None:
        if not self.closed:
            _discard(self._resp)
        super().close()


# ---- helpers ---------------------------------------------------------------------------------

_JSON = {"Content-Type": "application/json"}


def _action(action: str, value: Any = None) -> bytes:
    return json.dumps({"action": action, "name": "", "value": value}).encode()


def _quote_name(name: str) -> str:
    # '/' stays raw; '.' and '..' segments are escaped so no URL normaliser resolves them away
    # (the server then decodes and rejects them, as it should).
    return "/".join(
        s.replace(".", "%2E") if s in (".", "..") else quote(s, safe="")
        for s in name.split("/")
    )


def _range_header(r: ByteRange) -> str:
    if isinstance(r, str):
        return r if r.startswith("bytes=") else f"bytes={r}"
    start, end = r
    if start is None:
        if end is None:
            raise ValueError("byte_range needs a start or an end")
        return f"bytes=-{end}"
    return f"bytes={start}-" if end is None else f"bytes={start}-{end}"


def _int(v: Optional[str]) -> int:
    try:
        return int(v) if v else 0
    except ValueError:
        return 0


def _seekable(f: Any) -> bool:
    try:
        return bool(f.seekable()) if hasattr(f, "seekable") else hasattr(f, "seek")
    except (OSError, ValueError):
        return False


def _remaining(f: Any) -> Optional[int]:
    """Bytes left in a file-like object from its current position, or None if unknown."""
    try:
        return os.fstat(f.fileno()).st_size - f.tell()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        pass
    if _seekable(f):
        cur = f.tell()
        end = f.seek(0, io.SEEK_END)
        f.seek(cur)
        return end - cur
    return None


def _readinto(resp: urllib3.BaseHTTPResponse, view: memoryview) -> int:
    """Reads part of a body straight into ``view``. urllib3's ``readinto`` reads into a new
    ``bytes`` and copies it (two extra copies of every byte of a large read, which bounded
    checkpoint loads); a plain body of known length is read from the socket's own file into
    ``view``, and urllib3's count is kept, so the connection still goes back to the pool."""
    fp = getattr(resp, "_fp", None)
    remaining = getattr(resp, "length_remaining", None)
    if (fp is None or remaining is None or resp.headers.get("Content-Encoding")
            or not hasattr(fp, "readinto") or not hasattr(resp, "_fp_bytes_read")):
        return resp.readinto(view)
    try:
        n = fp.readinto(view[:remaining])
    except (OSError, http.client.HTTPException) as e:  # as urllib3 would have raised it
        raise ProtocolError(f"reading the body: {e}") from e
    resp.length_remaining = remaining - n
    resp._fp_bytes_read += n
    return n


def _discard(resp: urllib3.BaseHTTPResponse) -> None:
    """Frees a response's connection: back to the pool if fully read, else closed."""
    try:
        if getattr(resp, "length_remaining", None):
            resp.close()  # unread body: don't hand a dirty connection back to the pool
        else:
            resp.drain_conn()
    finally:
        resp.release_conn()

"""Typed exceptions for errors returned by a Gristmill cluster (or met on the way to it)."""

from __future__ import annotations

import json
from typing import Optional, Union


class GristError(Exception):
    """Any error answered by the cluster (or raised by the client about a request).

    Attributes:
        status: HTTP status code (0 when no HTTP response was involved).
        message: the server's error message (or a client-side description).
        tcode: the server's machine-readable error kind (e.g. ``"not_found"``), if any.
        url: the request URL, if known.

    ``GristError("text")`` (a message alone) works too, so the type survives being re-raised
    from a DataLoader worker, and every subclass pickles with all its fields.
    """

    def __init__(self, status: Union[int, str] = 0, message: Optional[str] = None, tcode: str = "",
                 url: str = ""):
        if message is None:  # GristError("text")
            status, message = (0, status) if isinstance(status, str) else (status, "")
        super().__init__(f"{status}: {message}" if status else message)
        self.status = int(status)
        self.message = message
        self.tcode = tcode
        self.url = url

    def __reduce__(self):
        return (type(self), (self.status, self.message, self.tcode, self.url))

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed if sent again later (overload, a node
        restarting, a lost connection) — as opposed to a permanent answer like 404."""
        return self.status in (429, 502, 503, 504)


class BadRequest(GristError):
    """400: invalid bucket or object name, malformed request."""


class Unauthorized(GristError):
    """401: no valid token (set ``token=`` or ``$GRIST_TOKEN``)."""


class Forbidden(GristError):
    """403: the token's user may not do this."""


class NotFound(GristError):
    """404: a bucket or object does not exist."""


class BucketNotFound(NotFound):
    """404: the bucket does not exist."""


class ObjectNotFound(NotFound):
    """404: the object does not exist."""


class Conflict(GristError):
    """409: the request conflicts with the cluster's state."""


class BucketExists(Conflict):
    """409: the bucket already exists."""


class RangeNotSatisfiable(GristError):
    """416: the requested byte range selects nothing in the object."""


class PreconditionFailed(GristError):
    """412: a conditional request's condition (``If-None-Match``, ``If-Match``) did not hold."""


class TooManyRequests(GristError):
    """429: the cluster asks the client to slow down (retried with backoff first)."""


class ServiceUnavailable(GristError):
    """502/503/504: a node is overloaded, starting or unreachable from the proxy (retried with
    backoff first)."""


class ConnectionFailed(GristError):
    """No HTTP answer: the connection could not be made, was reset, or timed out — after the
    retry policy gave up. ``status`` is 0; ``__cause__`` is the underlying urllib3 error."""

    @property
    def retryable(self) -> bool:
        return True


_BY_STATUS = {
    400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict,
    412: PreconditionFailed, 416: RangeNotSatisfiable, 429: TooManyRequests,
    502: ServiceUnavailable, 503: ServiceUnavailable, 504: ServiceUnavailable,
}


def error_from_response(status: int, body: bytes, url: str = "", subject: Optional[str] = None) -> GristError:
    """Builds the exception for an error response.

    ``subject`` (``"bucket"`` or ``"object"``) says what the request was about; it picks the
    specific class when the body (absent on HEAD responses) does not say.
    """
    message, tcode = "", ""
    if body:
        try:
            doc = json.loads(body)
            message = str(doc.get("message", ""))
            tcode = str(doc.get("tcode", "") or "")
        except (ValueError, AttributeError):
            message = body.decode("utf-8", "replace")
    if not message:
        message = f"HTTP {status}"
    cls = _BY_STATUS.get(status, GristError)
    if status == 404:
        if tcode == "bucket_not_found" or (not tcode and subject == "bucket"):
            cls = BucketNotFound
        elif subject == "object":
            cls = ObjectNotFound
    elif status == 409 and (tcode == "already_exists" or subject == "bucket"):
        cls = BucketExists
    return cls(status, message, tcode, url)

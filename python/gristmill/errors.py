"""Typed exceptions for errors returned by a Gristmill cluster."""

from __future__ import annotations

import json
from typing import Optional


class GristError(Exception):
    """Any error answered by the cluster (or raised by the client about a request).

    Attributes:
        status: HTTP status code (0 when no HTTP response was involved).
        message: the server's error message (or a client-side description).
        tcode: the server's machine-readable error kind (e.g. ``"not_found"``), if any.
        url: the request URL, if known.
    """

    def __init__(self, status: int, message: str, tcode: str = "", url: str = ""):
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.tcode = tcode
        self.url = url


class BadRequest(GristError):
    """400: invalid bucket or object name, malformed request."""


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


_BY_STATUS = {400: BadRequest, 404: NotFound, 409: Conflict, 416: RangeNotSatisfiable}


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

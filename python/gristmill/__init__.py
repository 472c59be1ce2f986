"""Python client for Gristmill, an AIStore-compatible storage cluster.

    >>> from gristmill import Client
    >>> c = Client("http://127.0.0.1:8080")
    >>> b = c.bucket("data"); b.create(exist_ok=True)
    >>> props = b.object("a/b.txt").put(b"hello")
    >>> b.object("a/b.txt").get()
    b'hello'
    >>> batch = c.batch(b); item = batch.add("a/b.txt")   # get-batch: many items, one request
    >>> [(i.name, data) for i, data in batch.get()]
    [('a/b.txt', b'hello')]

PyTorch datasets live in ``gristmill.torch`` (``pip install gristmill[torch]``); importing
``gristmill`` alone never imports torch.
"""

from .batch import Batch, BatchItem
from .client import (
    Bucket,
    BucketSummary,
    Client,
    ClusterInfo,
    ListEntry,
    ListPage,
    NodeInfo,
    Object,
    ObjectProps,
    ObjectReader,
)
from .errors import (
    BadRequest,
    BucketExists,
    BucketNotFound,
    Conflict,
    ConnectionFailed,
    Forbidden,
    GristError,
    NotFound,
    ObjectNotFound,
    PreconditionFailed,
    RangeNotSatisfiable,
    ServiceUnavailable,
    TooManyRequests,
    Unauthorized,
)
from .jobs import Etl, EtlError, Job, JobFailed
from .retry import RetryPolicy
from .template import expand_template

__version__ = "0.1.0"

__all__ = [
    "Client", "Bucket", "Object", "ObjectProps", "ObjectReader", "ListEntry", "ListPage",
    "Batch", "BatchItem", "RetryPolicy", "expand_template", "Job", "JobFailed", "Etl", "EtlError",
    "GristError", "BadRequest", "Unauthorized", "Forbidden", "NotFound", "BucketNotFound",
    "ObjectNotFound", "Conflict", "BucketExists", "PreconditionFailed", "RangeNotSatisfiable", "TooManyRequests",
    "ServiceUnavailable", "ConnectionFailed",
]

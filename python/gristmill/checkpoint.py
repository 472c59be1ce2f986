"""Checkpoints straight to and from a Gristmill cluster: ``torch.save`` streamed into an object
and ``torch.load`` read back through range requests, with no full copy of the checkpoint in
memory or on local disk.

    from gristmill.torch import checkpoint
    checkpoint.save(model.state_dict(), "ais://ckpt/run-7/step-100.pt")
    state = checkpoint.load("ais://ckpt/run-7/step-100.pt", map_location="cpu")

The object appears only when ``save`` has written all of it (a crash or exception mid-save
leaves the previous checkpoint of that name, or none): a checkpoint that exists loads.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from .client import Client, Object, ObjectProps

__all__ = ["save", "load", "object_of"]

_PROVIDERS = {"ais": "ais", "s3": "aws", "aws": "aws", "ht": "ht"}


def object_of(uri: str, client: Optional[Client] = None) -> Object:
    """The object a URI such as ``ais://bucket/path/step-100.pt`` names."""
    scheme, sep, rest = uri.partition("://")
    bucket, _, name = rest.partition("/")
    if not sep or scheme not in _PROVIDERS or not bucket or not name:
        raise ValueError(f"not an object URI: {uri!r} (expected e.g. 'ais://bucket/ckpt/step-100.pt')")
    return (client or Client()).bucket(bucket, _PROVIDERS[scheme]).object(name)


def save(obj: Any, uri: str, *, client: Optional[Client] = None, chunk_size: int = 8 << 20,
         **torch_save_kwargs: Any) -> ObjectProps:
    """``torch.save(obj)`` into the object ``uri``, uploaded while it is serialised (at most a
    few ``chunk_size`` pieces in memory besides ``obj`` itself). Returns the stored object's
    properties."""
    import torch

    target = object_of(uri, client)
    with target.open_writer(chunk_size=chunk_size, queue_depth=4) as w:
        torch.save(obj, w, **torch_save_kwargs)
    return target.head()


def load(uri: str, *, client: Optional[Client] = None, buffer_size: int = 8 << 20,
         **torch_load_kwargs: Any) -> Any:
    """``torch.load`` of the object ``uri``, read with range requests as torch asks for its
    parts (tensors go straight into their storage). ``torch_load_kwargs`` (``map_location``,
    ``weights_only``, ...) are passed on."""
    import torch

    with object_of(uri, client).open_reader(buffer_size=buffer_size) as r:
        return torch.load(r, **torch_load_kwargs)


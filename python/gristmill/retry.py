"""When and how long the client retries a request.

The client retries, with exponential backoff and jitter:

* connection failures before the request was sent (refused, unreachable, connect timeout):
  always — nothing reached the server;
* connection resets, read timeouts and 429/502/503/504 answers: only when the request is
  idempotent (GET, HEAD, PUT, DELETE) **and** its body can be sent again (bytes, or a seekable
  file that is rewound). A POST (e.g. starting a job) or a PUT from a pipe is never re-sent.

Every retry is bounded twice: by a number of attempts and by a total time budget.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import FrozenSet, Optional, Union

RETRY_STATUSES: FrozenSet[int] = frozenset({429, 502, 503, 504})
"""Answers that mean "try again later": overload, or a node restarting / unreachable."""

IDEMPOTENT_METHODS: FrozenSet[str] = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds and pacing of retries (see the module docstring for *what* is retried).

    Attributes:
        attempts: total tries of one request, the first included (1 = never retry).
        backoff: delay before the first retry, seconds; doubled at each further retry.
        max_backoff: cap on one delay (and on a server's ``Retry-After``), seconds.
        deadline: total seconds one request may spend, retries and waits included; no retry
            starts after it.
        statuses: HTTP statuses that are retried.
        jitter: fraction of each delay that is random (0 = fixed delays, 1 = full jitter), so
            many DataLoader workers hitting the same restarting node do not retry in lockstep.
    """

    attempts: int = 6
    backoff: float = 0.2
    max_backoff: float = 5.0
    deadline: float = 60.0
    statuses: FrozenSet[int] = field(default=RETRY_STATUSES)
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("RetryPolicy.attempts must be >= 1")
        if self.backoff < 0 or self.max_backoff < 0 or self.deadline < 0:
            raise ValueError("RetryPolicy delays must be >= 0")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("RetryPolicy.jitter must be in [0, 1]")

    @classmethod
    def never(cls) -> "RetryPolicy":
        """One attempt, no retries."""
        return cls(attempts=1)

    def delay(self, retry: int, retry_after: Optional[float] = None) -> float:
        """Seconds to wait before retry number ``retry`` (1-based).

        A server's ``Retry-After`` raises the delay (up to ``max_backoff``), never lowers it.
        """
        base = min(self.max_backoff, self.backoff * (2 ** (retry - 1)))
        d = base * (1.0 - self.jitter) + random.uniform(0.0, base * self.jitter)
        if retry_after is not None and retry_after > d:
            d = min(retry_after, self.max_backoff)
        return d


def as_policy(retry: Union[RetryPolicy, int, None]) -> RetryPolicy:
    """``RetryPolicy`` from the ``retry=`` argument: a policy, a number of retries, or None for
    the default."""
    if retry is None:
        return RetryPolicy()
    if isinstance(retry, RetryPolicy):
        return retry
    if isinstance(retry, bool) or not isinstance(retry, int) or retry < 0:
        raise TypeError("retry must be a RetryPolicy, a number of retries >= 0, or None")
    return RetryPolicy(attempts=retry + 1)


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds from a ``Retry-After`` header given in seconds (HTTP dates are ignored)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None

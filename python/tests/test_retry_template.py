"""Pure pieces of the SDK: retry pacing and brace templates (no cluster needed)."""

import braceexpand
import pytest

from gristmill import RetryPolicy, expand_template
from gristmill.retry import as_policy, parse_retry_after


def test_backoff_grows_is_capped_and_jittered():
    p = RetryPolicy(backoff=0.1, max_backoff=1.0, jitter=0.5)
    for retry, base in [(1, 0.1), (2, 0.2), (3, 0.4), (5, 1.0), (20, 1.0)]:
        ds = [p.delay(retry) for _ in range(200)]
        assert all(base * 0.5 <= d <= base for d in ds)
        assert len(set(ds)) > 1  # jitter
    assert RetryPolicy(backoff=0.1, jitter=0).delay(2) == pytest.approx(0.2)
    # Retry-After raises the delay, capped by max_backoff; it never lowers it.
    assert p.delay(1, retry_after=0.7) == pytest.approx(0.7)
    assert p.delay(1, retry_after=30) == pytest.approx(1.0)
    assert p.delay(5, retry_after=0.0) >= 0.5


def test_policy_arguments():
    assert as_policy(None) == RetryPolicy()
    assert as_policy(0).attempts == 1 and as_policy(3).attempts == 4
    assert RetryPolicy.never().attempts == 1
    with pytest.raises(TypeError):
        as_policy(True)
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)
    assert parse_retry_after("2") == 2.0 and parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None


@pytest.mark.parametrize("t", [
    "shard-{0000..0099}.tar", "x{0..10..3}", "{098..101}.tar", "a{1..3}b{x,y}", "p/{train,val}/{00..02}",
    "{10..8}", "plain.tar",
])
def test_templates_expand_like_braceexpand(t):
    assert expand_template(t) == list(braceexpand.braceexpand(t))


def test_bad_templates():
    for t in ["a{1..3", "a}b", "{}", "x{1..5..0}"]:
        with pytest.raises(ValueError):
            expand_template(t)

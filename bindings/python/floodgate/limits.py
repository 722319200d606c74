"""Limits, and the answers to them.

A Limit is built once by the constructors named like the C ones
(token_bucket(capacity, refill_per_sec), fixed_window(limit, window_ms),
...) and holds its C struct, so a check passes it without converting
anything. A Result is a read-only tuple with named fields."""

import collections
import ctypes
import enum

from . import _native

FIXED_WINDOW, SLIDING_WINDOW, SLIDING_LOG, TOKEN_BUCKET, LEAKY_BUCKET, GCRA = range(6)
_ALGORITHMS = ("fixed_window", "sliding_window", "sliding_log", "token_bucket", "leaky_bucket",
               "gcra")
# The names of limit, window_ms and rate in each algorithm's constructor
# (and the server's messages), for the errors of a number out of range.
_FIELD_NAMES = (("limit", "window_ms", "rate"), ("limit", "window_ms", "rate"),
                ("limit", "window_ms", "rate"), ("capacity", "window_ms", "refill_per_sec"),
                ("capacity", "window_ms", "leak_per_sec"), ("capacity", "period_ms", "count"))


class Limit:
    """A limit as the module's commands take it; build one with the
    constructors below. Immutable, hashable, comparable."""

    __slots__ = ("_c", "_ref", "_ptr")

    def __init__(self, algorithm, limit, window_ms=0.0, rate=0.0):
        if not 0 <= algorithm < len(_ALGORITHMS):
            raise ValueError("unknown algorithm %r" % (algorithm,))
        names = _FIELD_NAMES[algorithm]
        c = _native.Limit(algorithm, _native.arg(limit, names[0]),
                          _native.arg(window_ms, names[1], ctypes.c_double),
                          _native.arg(rate, names[2], ctypes.c_double))
        object.__setattr__(self, "_c", c)
        # made once: every check passes _ref, every batch request _ptr
        object.__setattr__(self, "_ref", ctypes.byref(c))
        object.__setattr__(self, "_ptr", ctypes.pointer(c))

    def __setattr__(self, name, value):
        raise AttributeError("a Limit is immutable")

    algorithm = property(lambda self: _ALGORITHMS[self._c.algorithm])
    limit = property(lambda self: self._c.limit)
    window_ms = property(lambda self: self._c.window_ms)
    rate = property(lambda self: self._c.rate)

    def _key(self):
        c = self._c
        return (c.algorithm, c.limit, c.window_ms, c.rate)

    def __eq__(self, other):
        return isinstance(other, Limit) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        c = self._c
        name = _ALGORITHMS[c.algorithm]
        if c.algorithm in (TOKEN_BUCKET, LEAKY_BUCKET):
            return "%s(%d, %r)" % (name, c.limit, c.rate)
        if c.algorithm == GCRA:
            return "gcra(%d, %r, %r)" % (c.limit, c.rate, c.window_ms)
        return "%s(%d, %r)" % (name, c.limit, c.window_ms)

    def quota_window_ms(self):
        """How long the whole quota takes to come back: the window, or the
        time a bucket takes to refill (the RateLimit-Policy's w)."""
        c = self._c
        if c.algorithm in (TOKEN_BUCKET, LEAKY_BUCKET):
            return c.limit * 1000.0 / c.rate if c.rate > 0 else 0.0
        if c.algorithm == GCRA:
            return c.limit * c.window_ms / c.rate if c.rate > 0 else 0.0
        return c.window_ms


def fixed_window(limit, window_ms):
    """limit units per clock-aligned window of window_ms."""
    return Limit(FIXED_WINDOW, limit, window_ms, 0)


def sliding_window(limit, window_ms):
    """limit units per sliding window, estimated from two counters."""
    return Limit(SLIDING_WINDOW, limit, window_ms, 0)


def sliding_log(limit, window_ms):
    """limit units per sliding window, exact (limit <= 100000)."""
    return Limit(SLIDING_LOG, limit, window_ms, 0)


def token_bucket(capacity, refill_per_sec):
    return Limit(TOKEN_BUCKET, capacity, 0, refill_per_sec)


def leaky_bucket(capacity, leak_per_sec):
    return Limit(LEAKY_BUCKET, capacity, 0, leak_per_sec)


def gcra(capacity, count, period_ms):
    """count units per period_ms, at most capacity at once."""
    return Limit(GCRA, capacity, period_ms, count)


class Source(enum.Enum):
    """Who decided."""
    SERVER = "server"                # the Redis module
    MEMORY = "memory"                # the in-process table (mem:)
    DENIAL_CACHE = "denial_cache"    # a remembered denial: no round trip
    FAILED_OPEN = "failed_open"      # server unreachable: allowed by the failure policy
    FAILED_CLOSED = "failed_closed"  # server unreachable: denied by the failure policy
    FALLBACK = "fallback"            # server unreachable: decided in process
    LEASE = "lease"                  # units of this client's lease: no round trip


SOURCES = tuple(Source)  # in the order of enum fg_source


def _seconds(ms):
    return 0 if ms <= 0 else (ms + 999) // 1000


class Result(collections.namedtuple(
        "Result", "allowed limit remaining retry_after_ms reset_after_ms source")):
    """One decision: allowed, the capacity (limit), the units left
    (remaining), retry_after_ms (-1 when allowed or never possible),
    reset_after_ms (until back to full) and its source."""

    __slots__ = ()

    def __bool__(self):
        return self.allowed

    def headers(self, limit=None, name="default"):
        """The response fields of the IETF httpapi draft, as a dict:
        RateLimit ("name";r=remaining;t=seconds until full), RateLimit-Policy
        when the Limit is given ("name";q=limit;w=seconds the quota takes to
        come back), and Retry-After (seconds) on a denial that can pass later.
        The same fields as nginx's floodgate_limit_req_headers."""
        out = {}
        if limit is not None:
            out["RateLimit-Policy"] = '"%s";q=%d;w=%d' % (
                name, self.limit, _seconds(int(limit.quota_window_ms())))
        out["RateLimit"] = '"%s";r=%d;t=%d' % (name, self.remaining,
                                               _seconds(self.reset_after_ms))
        if not self.allowed and self.retry_after_ms >= 0:
            out["Retry-After"] = str(_seconds(self.retry_after_ms))
        return out


def result_from(c):
    return Result(c.allowed, c.limit, c.remaining, c.retry_after_ms, c.reset_after_ms,
                  SOURCES[c.source])

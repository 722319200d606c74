"""Locks, semaphores and multi-key locks of a Client, and Redlock, as objects
that `with` takes and releases (docs/locks.md).

A lock object stands for one owner (an id; a random one by default), not a
thread: any thread may release what another took. It is created untaken;
acquire() answers the grant, and `with` raises LockNotAcquired when the
grant is refused. With renew=True the client's renewal thread keeps the
lease alive until release(); on_lost(key, owner, reason) is called from that
thread if the lock is lost meanwhile (it must not call back into the client).

on_lost is registered with the client under a fresh id for each renewed
grant, not once per object: the client forgets an id once its callback ran,
so an object taken again after a release or a loss needs a live one (the
renewal thread keeps the newest id of a re-entered lock). Ids are forgotten
when the object releases all it holds, so a released lock is never reported.
"""

import collections
import enum
from ctypes import byref

from . import _native as N
from . import errors


class LostReason(enum.Enum):
    """Why a renewed lock was lost (fg_lost_reason)."""
    NOT_HELD = "not_held"        # the server says the owner no longer holds it
    UNREACHABLE = "unreachable"  # renewals failed until the lease ended
    RENEW_LIMIT = "renew_limit"  # renew_max_ms reached; the lease ends by itself


LOST_REASONS = tuple(LostReason)


class LockGrant(collections.namedtuple("LockGrant", "acquired token ttl_ms holds")):
    """acquired; the fencing token (0 when not acquired); ttl_ms (the lease
    left, or when refused the soonest it could be granted); holds (the
    owner's holds, permits or keys). True when acquired."""

    __slots__ = ()

    def __bool__(self):
        return self.acquired


def _grant(c):
    return LockGrant(c.acquired, c.token, c.ttl_ms, c.holds)


class _Held:
    """What the three kinds share: the options, the owner, the grant and
    the lost-lock callback's registration."""

    def __init__(self, client, owner, options, allowed):
        from .client import owner_id  # client imports this module
        self.client = client
        self.owner = owner if owner is not None else owner_id()
        self.grant = None
        options = dict(options)
        self._on_lost = options.pop("on_lost", None)
        self._lost_ids = []  # on_lost's registrations of the grants held
        self._c = N.LockOptions()
        N.lock_options_init(byref(self._c))
        for name in options:
            if name not in allowed:
                raise TypeError("unknown option %r (options: %s)"
                                % (name, ", ".join(sorted(allowed + ("on_lost",)))))
        N.fill(self._c, **options)

    @property
    def token(self):
        """The fencing token of the last grant (0 before one)."""
        return self.grant.token if self.grant else 0

    def acquire(self):
        """Asks for it once (or waits, per wait_ms): the LockGrant."""
        b, out = self.client._tls, N.LockGrant()
        lost_id = self._watch()
        failed = True  # also when the client is closed: the call raises
        try:
            failed = self.client._call(self._acquire, byref(out), byref(b.err))
        finally:
            if failed or not out.acquired:
                self._unwatch(lost_id)  # nothing will be renewed under it
        if failed:
            raise errors.of(b.err)
        self.grant = _grant(out)
        return self.grant

    def release(self):
        """Gives it back: what the owner still holds (<= 0: nothing)."""
        left = self._release()
        if left <= 0:
            self._forget_on_lost()
        return left

    def _watch(self):
        """The id on_lost is registered under for the grant about to be
        asked (None when nothing would call it: no callback, or no renewal)."""
        if self._on_lost is None or not self._c.renew:
            return None
        lost_id = self.client._register_on_lost(self._on_lost)
        self._c.on_lost, self._c.on_lost_arg = self.client._lost_fn, lost_id
        self._lost_ids.append(lost_id)
        return lost_id

    def _unwatch(self, lost_id):
        if lost_id is not None:
            self.client._forget_on_lost(lost_id)
            if lost_id in self._lost_ids:  # another thread's release may have forgotten it
                self._lost_ids.remove(lost_id)

    def _forget_on_lost(self):
        ids, self._lost_ids = self._lost_ids, []
        for lost_id in ids:
            self.client._forget_on_lost(lost_id)

    def __enter__(self):
        grant = self.acquire()
        if not grant.acquired:
            raise errors.LockNotAcquired("%s is held (retry in %d ms)" % (self, grant.ttl_ms),
                                         grant)
        return self

    def __exit__(self, *exc):
        self.release()


_LOCK_OPTIONS = ("lease_ms", "wait_ms", "shared", "reentrant", "renew", "renew_max_ms",
                 "durable_replicas", "durable_timeout_ms")
_SEMAPHORE_OPTIONS = ("lease_ms", "wait_ms", "renew", "renew_max_ms", "durable_replicas",
                      "durable_timeout_ms")


class Lock(_Held):
    """FG.LOCK on one key (Client.lock)."""

    def __init__(self, client, key, owner, options):
        super().__init__(client, owner, options, _LOCK_OPTIONS)
        self.key = key
        self._key = N.as_cstr(key)

    def _acquire(self, h, out, err):
        return N.lock(h, self._key, N.as_cstr(self.owner), byref(self._c), out, err)

    def _release(self):
        return self.client.unlock(self._key, self.owner)

    def extend(self, lease_ms=None):
        """FG.EXTEND by lease_ms (default: the lock's lease): False when the
        owner no longer holds it."""
        return self.client.extend(self._key, self.owner,
                                  self._c.lease_ms if lease_ms is None else lease_ms)

    def __repr__(self):
        return "Lock(%r, owner=%r)" % (self.key, self.owner)


class Semaphore(_Held):
    """`permits` of FG.ACQUIRE's semaphore of `capacity` (Client.semaphore)."""

    def __init__(self, client, key, capacity, permits, owner, options):
        super().__init__(client, owner, options, _SEMAPHORE_OPTIONS)
        self.key = key
        self.capacity, self.permits = N.arg(capacity, "capacity"), N.arg(permits, "permits")
        self._key = N.as_cstr(key)

    def _acquire(self, h, out, err):
        return N.semaphore_acquire(h, self._key, self.capacity, N.as_cstr(self.owner),
                                   self.permits, byref(self._c), out, err)

    def _release(self):
        return self.client.semaphore_release(self._key, self.owner, self.permits)

    def extend(self, lease_ms=None):
        return self.client.extend(self._key, self.owner,
                                  self._c.lease_ms if lease_ms is None else lease_ms)

    def __repr__(self):
        return "Semaphore(%r, %d of %d, owner=%r)" % (self.key, self.permits, self.capacity,
                                                      self.owner)


class MultiLock(_Held):
    """FG.MLOCK over keys of one hash slot, all or none (Client.lock_multi)."""

    def __init__(self, client, keys, owner, options):
        super().__init__(client, owner, options, _LOCK_OPTIONS)
        self.keys = list(keys)
        self._keep, self._arr, self._n = N.key_array(self.keys)

    def _acquire(self, h, out, err):
        return N.lock_multi(h, self._arr, self._n, N.as_cstr(self.owner), byref(self._c), out,
                            err)

    def release(self):
        """Gives every key back: how many were released."""
        released = self.client.unlock_multi(self.keys, self.owner)
        self._forget_on_lost()
        return released

    def __repr__(self):
        return "MultiLock(%r, owner=%r)" % (self.keys, self.owner)


# ------------------------------------------------------------------ redlock

class RedlockGrant(collections.namedtuple("RedlockGrant", "acquired validity_ms votes token")):
    """acquired; validity_ms (how long the lock may be trusted from now);
    votes (servers that granted it); token (the largest of theirs). True
    when acquired."""

    __slots__ = ()

    def __bool__(self):
        return self.acquired


class Redlock(N.Owned):
    """Redlock over independent servers (redis:// or unix:// URLs of
    servers with the module), as published; see include/floodgate.h for
    what it assumes. Calls are serialized by the library; close() may come
    while they run (_native.Owned)."""

    _what = "Redlock"

    def __init__(self, urls, retry_count=3, retry_delay_ms=200, retry_jitter_ms=100,
                 drift_factor=0.01, server_timeout_ms=50):
        super().__init__()
        opts = N.RedlockOptions()
        N.redlock_options_init(byref(opts))
        N.fill(opts, retry_count=retry_count, retry_delay_ms=retry_delay_ms,
               retry_jitter_ms=retry_jitter_ms, drift_factor=drift_factor,
               server_timeout_ms=server_timeout_ms)
        _, arr, n = N.key_array(urls)
        err = N.Error()
        h = N.redlock_open(arr, n, byref(opts), byref(err))
        if not h:
            raise errors.of(err)
        self._h = h

    def _free(self, h):
        N.redlock_close(h)

    def _grant(self, fn, key, owner, lease_ms):
        err, out = N.Error(), N.RedlockGrant()
        if self._call(fn, N.as_cstr(key), N.as_cstr(owner), N.arg(lease_ms, "lease_ms"),
                      byref(out), byref(err)):
            raise errors.of(err)
        return RedlockGrant(out.acquired, out.validity_ms, out.votes, out.token)

    def acquire(self, key, owner, lease_ms):
        """Asks a majority for the lock: the RedlockGrant."""
        return self._grant(N.redlock_lock, key, owner, lease_ms)

    def extend(self, key, owner, lease_ms):
        """Extends on every server: acquired says whether a majority did in time."""
        return self._grant(N.redlock_extend, key, owner, lease_ms)

    def release(self, key, owner):
        """Releases on every server (also those that did not grant it)."""
        err = N.Error()
        if self._call(N.redlock_unlock, N.as_cstr(key), N.as_cstr(owner), byref(err)):
            raise errors.of(err)

    def lock(self, key, lease_ms=30000, owner=None):
        """A RedlockLock for `with`: taken on entry (LockNotAcquired when
        no majority grants it), released on exit (where servers answer)."""
        return RedlockLock(self, key, lease_ms, owner)


class RedlockLock:
    """One owner's lock of a Redlock. grant is the last answer (acquire's
    or extend's); token is the acquired grant's, which an extension (whose
    grant has no token) keeps."""

    def __init__(self, redlock, key, lease_ms, owner):
        from .client import owner_id
        self.redlock, self.key, self.lease_ms = redlock, key, lease_ms
        self.owner = owner if owner is not None else owner_id()
        self.grant = None
        self.token = 0

    def acquire(self):
        self.grant = self.redlock.acquire(self.key, self.owner, self.lease_ms)
        self.token = self.grant.token
        return self.grant

    def extend(self, lease_ms=None):
        self.grant = self.redlock.extend(self.key, self.owner,
                                         self.lease_ms if lease_ms is None else lease_ms)
        return self.grant

    def release(self):
        self.redlock.release(self.key, self.owner)

    def __enter__(self):
        grant = self.acquire()
        if not grant.acquired:
            raise errors.LockNotAcquired("no majority granted %r (%d votes)"
                                         % (self.key, grant.votes), grant)
        return self

    def __exit__(self, *exc):
        try:
            self.release()
        except errors.IOError:
            # Servers that did not answer drop the lock when its lease ends;
            # a minority down is what Redlock is for, not a failed block.
            pass


"""Client: one libfloodgate client (fg_client) and every call on it.

A Client is safe to share between threads, as the C client is; each call
keeps its result and error buffers in a per-thread slot, so calls allocate
nothing in ctypes but the answer they return. close() may come from any
thread at any time (_native.Owned): calls begun after it raise
floodgate.Error, and fg_close runs once the calls in flight have returned.
Clients still open at interpreter exit are closed then, before Python stops,
so that no renewal thread calls into a stopping interpreter."""

import atexit
import collections
import ctypes
import sys
import threading
import weakref
from ctypes import byref, c_bool, c_char_p, c_int64, c_size_t

from . import _native as N
from . import errors, locks, policies
from .limits import Limit, Result, SOURCES, result_from

_FAILURE_POLICIES = {"error": 0, "open": 1, "closed": 2, "fallback": 3}

SECONDS, MINUTES, HOURS, DAYS = 1, 60, 3600, 86400

Stats = collections.namedtuple(
    "Stats", "decisions round_trips denials_cached failures reconnects lease_hits")

Request = collections.namedtuple("Request", "key limit cost peek", defaults=(1, False))
Request.__doc__ = "One request of Client.check_batch (a plain tuple works as well)."

_open_clients = weakref.WeakSet()


@atexit.register
def _close_open_clients():
    for client in list(_open_clients):
        client.close()


class _Callback(threading.local):
    """How deep this thread is in a callback that may run on the client's
    renewal thread (on_lost, the clock): fg_close joins that thread, so a
    client closed from there is freed on a thread of its own."""
    depth = 0


_callback = _Callback()


class _Buffers(threading.local):
    def __init__(self):
        self.result = N.Result()
        self.err = N.Error()
        self.result_ref = byref(self.result)
        self.err_ref = byref(self.err)
        self.flag = c_bool()
        self.int64 = c_int64()


def raise_error(err):
    raise errors.of(err)


def owner_id():
    """A random owner id (32 hex characters), as fg_owner_id makes."""
    buf = ctypes.create_string_buffer(N.OWNER_ID_LEN + 1)
    N.owner_id(buf)
    return buf.value.decode()


def request_key(kind, name, value):
    """The key of a value a request chose (a header, an address): "kind:
    name:value", the value as it is when every byte is printable ASCII
    other than '~', '{' and '}', else '~' and its hex, as fg_request_key
    and the nginx module build it, so that no value names another kind's,
    name's or value's state. value is str (UTF-8) or bytes."""
    raw = N.as_bytes(value)
    kind_b, name_b = N.as_cstr(kind), N.as_cstr(name)
    room = len(kind_b) + len(name_b) + 2 * len(raw) + 4
    buf = ctypes.create_string_buffer(room)
    if N.request_key(buf, room, kind_b, name_b, raw, len(raw)) == 0:
        raise errors.InvalidError("ERR a key's kind and name are printable ASCII without ':' "
                                  "or blanks: %r, %r" % (kind, name))
    return buf.value.decode()


class Window:
    """A window of unique counting: the last n units ending now, or
    [start_us, end_us) in unix microseconds. Build with last() or between()."""

    __slots__ = ("_c",)

    def __init__(self, c):
        self._c = c

    def __repr__(self):
        c = self._c
        if c.last:
            return "last(%d, %d)" % (c.n, c.unit)
        return "between(%d, %d)" % (c.start_us, c.end_us)


def last(n, unit=SECONDS):
    """The last n units (SECONDS, MINUTES, HOURS, DAYS) ending now."""
    return Window(N.fill(N.Window(), last=True, n=n, unit=unit))


def between(start_us, end_us):
    """[start_us, end_us), unix microseconds, truncated to seconds."""
    return Window(N.fill(N.Window(), last=False, unit=SECONDS, start_us=start_us,
                         end_us=end_us))


def _parse_state(text):
    """FG.INSPECT's "k=v k=v" as a dict: numbers as int, a list of
    numbers ("entries=ts,count,...") as a list of int."""
    state = {}
    for field in text.split():
        name, _, value = field.partition("=")
        try:
            state[name] = [int(v) for v in value.split(",")] if "," in value else int(value)
        except ValueError:
            state[name] = value
    return state


def _lost_trampoline(callbacks):
    """The C on_lost of a client: finds the Python callback by its id (it
    holds the callbacks, not the client, so a client is freed when unused)."""
    def on_lost(key, owner, why, arg):
        callback = callbacks.pop(arg, None)
        if callback is None:
            return
        _callback.depth += 1
        try:
            callback(key.decode(errors="replace"), owner.decode(errors="replace"),
                     locks.LOST_REASONS[why])
        finally:
            _callback.depth -= 1
    return N.LOST_FN(on_lost)


class Client(N.Owned):
    """A client of floodgate for `url`:

      mem:                                   in process, no server (the default)
      redis://[user:password@]host[:port][/db][?backend=B]
      unix:///path/to/redis.sock[?db=N][&backend=B]
      redis+cluster://[user:password@]host:port[,host:port...][?backend=B]

    backend= is auto (the module where it is loaded, the server scripts
    elsewhere), module or script.

    Options (include/floodgate.h, fg_options): connect_timeout_ms,
    command_timeout_ms, on_failure ("error", "open", "closed", "fallback"),
    cache_denials, clock (a callable giving unix microseconds, for the
    in-process clock), send_clock, lease_units, lease_ms; and policy_loader
    (see set_policy_loader)."""

    _what = "client"
    _free_elsewhere = False  # __del__: the collector may run on the renewal thread

    def __init__(self, url="mem:", *, connect_timeout_ms=1000, command_timeout_ms=1000,
                 on_failure="error", cache_denials=False, clock=None, send_clock=False,
                 lease_units=0, lease_ms=100, policy_loader=None):
        super().__init__()
        if on_failure not in _FAILURE_POLICIES:
            raise errors.InvalidError("on_failure is one of %s, not %r" %
                                      (", ".join(sorted(_FAILURE_POLICIES)), on_failure))
        opts = N.Options()
        N.options_init(byref(opts))
        N.fill(opts, connect_timeout_ms=connect_timeout_ms,
               command_timeout_ms=command_timeout_ms, on_failure=_FAILURE_POLICIES[on_failure],
               cache_denials=cache_denials, send_clock=send_clock, lease_units=lease_units,
               lease_ms=lease_ms)
        # Callbacks the library keeps pointers to live as long as the client.
        self._clock = self._clock_trampoline(clock) if clock is not None else None
        if self._clock is not None:
            opts.clock_us = self._clock
        self._tls = _Buffers()
        self._lost = {}  # on_lost callbacks by id (the C callback's arg)
        self._lost_ids = iter(range(1, sys.maxsize))
        self._lost_fn = _lost_trampoline(self._lost)
        self._loader = None
        self.url = url
        err = N.Error()
        h = N.open_client(N.as_cstr(url), byref(opts), byref(err))
        if not h:
            raise_error(err)
        self._h = h
        _open_clients.add(self)
        if policy_loader is not None:
            self.set_policy_loader(policy_loader)

    # -------------------------------------------------------------- lifetime

    def close(self):
        """Closes the client: returns leased units, stops renewals. Calls
        begun after it raise floodgate.Error; calls in flight on other
        threads finish first, and the last of them to return frees the
        client. Closing twice is harmless."""
        super().close()

    def _free(self, h):
        # fg_close joins the renewal thread, and this may run on it: in
        # on_lost or the clock (a close, or a call leaving last), or in the
        # collector, which runs on any thread. Then a thread of its own
        # closes the client.
        if self._free_elsewhere or _callback.depth:
            try:
                threading.Thread(target=self._close_handle, args=(h,),
                                 name="floodgate-close").start()
                return
            except RuntimeError:  # the interpreter is exiting: no callback runs any more
                pass
        self._close_handle(h)

    def _close_handle(self, h):
        _open_clients.discard(self)
        N.close_client(h)

    def __del__(self):
        self._free_elsewhere = True
        super().__del__()

    def __repr__(self):
        return "Client(%r%s)" % (self.url, ", closed" if self._closing else "")

    @property
    def is_remote(self):
        """True when calls go to a server (they may wait on the network)."""
        return not (self.url in ("", "mem:") or self.url.startswith("mem:"))

    @staticmethod
    def _clock_trampoline(clock):
        def clock_us(_arg):
            _callback.depth += 1  # mem: leases read it on the renewal thread
            try:
                return int(clock())
            finally:
                _callback.depth -= 1
        return N.CLOCK_FN(clock_us)

    # ------------------------------------------------------------ decisions

    def check(self, key, limit, cost=1):
        """Takes `cost` units (>= 0) of `limit` for `key` and answers a
        Result; cost 0 asks without taking anything."""
        return self._decide(N.check, key, limit, cost)

    def peek(self, key, limit, cost=1):
        """The answer check() would give, without taking or writing anything."""
        return self._decide(N.peek, key, limit, cost)

    def _decide(self, fn, key, limit, cost):
        # The hot path: one ctypes call with references made in advance
        # (the limit's, the thread's buffers) and the result read once.
        b = self._tls
        try:
            ref = limit._ref
        except AttributeError:
            raise TypeError("a floodgate Limit is needed (token_bucket(...), ...), not %r"
                            % (limit,)) from None
        key = key.encode() if key.__class__ is str and "\0" not in key else N.as_cstr(key)
        cost = N.arg(cost, "cost")
        h = self._enter()
        try:
            failed = fn(h, key, ref, cost, b.result_ref, b.err_ref)
        finally:
            self._leave()
        if failed:
            raise_error(b.err)
        c = b.result
        return Result(c.allowed, c.limit, c.remaining, c.retry_after_ms, c.reset_after_ms,
                      SOURCES[c.source])

    def reset(self, key):
        """Forgets the key's state; True when it had one."""
        b = self._tls
        if self._call(N.reset, N.as_cstr(key), byref(b.flag), byref(b.err)):
            raise_error(b.err)
        return b.flag.value

    def inspect(self, key):
        """The key's stored state as a dict (FG.INSPECT's fields), {} when
        it has none."""
        key, b = N.as_cstr(key), self._tls
        size = 4096
        while True:
            buf = ctypes.create_string_buffer(size)
            if self._call(N.inspect, key, buf, size, byref(b.err)) == 0:
                return _parse_state(buf.value.decode())
            if b"buffer too small" not in b.err.message or size >= 1 << 28:
                raise_error(b.err)
            size *= 16

    def check_batch(self, requests, raise_on_error=True):
        """Decides many requests in one round trip per node. Each request is
        a Request or a tuple (key, limit[, cost[, peek]]). Answers a list of
        Results in the same order; a request that failed raises its error,
        or with raise_on_error=False stands in the list as the exception."""
        rows = [_request_row(*r) for r in requests]
        n = len(rows)
        if n == 0:
            return []
        arr = (N.Request * n)(*rows)  # ctypes fills the structs from the tuples
        b = self._tls
        if self._call(N.check_batch, arr, n, byref(b.err)):
            raise_error(b.err)
        out = []
        for c in arr:
            if c.code == 0:
                out.append(result_from(c.result))
                continue
            e = errors.from_code(c.code, N.code_name(c.code).decode())
            if raise_on_error:
                raise e
            out.append(e)
        return out

    def stats(self):
        s = N.Stats()
        self._call(N.get_stats, byref(s))
        return Stats(s.decisions, s.round_trips, s.denials_cached, s.failures, s.reconnects,
                     s.lease_hits)

    # ----------------------------------------------------------------- locks

    def lock(self, key, owner=None, **options):
        """A lock on `key` for `owner` (None: a random id), not yet taken:
        use it in `with`, or call acquire() and release(). Options:
        lease_ms, wait_ms (0 try once, > 0 wait in the server's queue, -1
        without a timeout), shared, reentrant, renew, renew_max_ms, on_lost
        (called as on_lost(key, owner, reason) from the renewal thread),
        durable_replicas, durable_timeout_ms."""
        return locks.Lock(self, key, owner, options)

    def semaphore(self, key, capacity, permits=1, owner=None, **options):
        """`permits` of a semaphore of `capacity` on `key`, not yet taken;
        the options of lock() but shared and reentrant."""
        return locks.Semaphore(self, key, capacity, permits, owner, options)

    def lock_multi(self, keys, owner=None, **options):
        """All of `keys` (one hash slot) at once, or none."""
        return locks.MultiLock(self, keys, owner, options)

    def unlock(self, key, owner):
        """FG.UNLOCK: what the owner still holds, -1 when it held nothing."""
        b = self._tls
        if self._call(N.unlock, N.as_cstr(key), N.as_cstr(owner), byref(b.int64),
                      byref(b.err)):
            raise_error(b.err)
        return b.int64.value

    def extend(self, key, owner, lease_ms):
        """FG.EXTEND: False when the owner holds nothing."""
        b = self._tls
        if self._call(N.extend, N.as_cstr(key), N.as_cstr(owner), N.arg(lease_ms, "lease_ms"),
                      byref(b.flag), byref(b.err)):
            raise_error(b.err)
        return b.flag.value

    def semaphore_release(self, key, owner, permits=0):
        """FG.RELEASE of `permits` (0: all of the owner's): the permits left."""
        b = self._tls
        if self._call(N.semaphore_release, N.as_cstr(key), N.as_cstr(owner),
                      N.arg(permits, "permits"), byref(b.int64), byref(b.err)):
            raise_error(b.err)
        return b.int64.value

    def unlock_multi(self, keys, owner):
        """FG.MUNLOCK: the keys released."""
        _, arr, n = N.key_array(keys)
        b = self._tls
        if self._call(N.unlock_multi, arr, n, N.as_cstr(owner), byref(b.int64), byref(b.err)):
            raise_error(b.err)
        return b.int64.value

    def _register_on_lost(self, callback):
        """An id for the C callback's arg, under which `callback` waits for
        a loss until _forget_on_lost (the lock was released)."""
        lost_id = next(self._lost_ids)
        self._lost[lost_id] = callback
        return lost_id

    def _forget_on_lost(self, lost_id):
        self._lost.pop(lost_id, None)

    # ---------------------------------------------------------- bloom filters

    def bf_reserve(self, key, error_rate=0.01, capacity=100, expansion=2):
        """BF.RESERVE; an existing key raises InvalidError."""
        o = N.fill(N.BloomOptions(), error_rate=error_rate, capacity=capacity,
                   expansion=expansion)
        b = self._tls
        if self._call(N.bf_reserve, N.as_cstr(key), byref(o), byref(b.err)):
            raise_error(b.err)

    def bf_add(self, key, item):
        """BF.ADD: True when the item was new."""
        return self._bf_one(N.bf_add, key, item)

    def bf_exists(self, key, item):
        """BF.EXISTS: False when the item was certainly never added."""
        return self._bf_one(N.bf_exists, key, item)

    def _bf_one(self, fn, key, item):
        item, b = N.as_bytes(item), self._tls
        if self._call(fn, N.as_cstr(key), item, len(item), byref(b.flag), byref(b.err)):
            raise_error(b.err)
        return b.flag.value

    def bf_madd(self, key, items):
        """BF.MADD: a list of bools, True for each new item."""
        return self._bf_many(N.bf_madd, key, items)

    def bf_mexists(self, key, items):
        """BF.MEXISTS: a list of bools."""
        return self._bf_many(N.bf_mexists, key, items)

    def _bf_many(self, fn, key, items):
        keep, ptrs, lens, n = N.byte_items(items)
        flags = (c_bool * max(n, 1))()
        b = self._tls
        if self._call(fn, N.as_cstr(key), ptrs, lens, n, flags, byref(b.err)):
            e = errors.of(b.err)
            e.added = list(flags[:n])  # BF.MADD: the items before the refused one were added
            raise e
        return list(flags[:n])

    def bf_card(self, key):
        """BF.CARD: the distinct items added, estimated."""
        b = self._tls
        if self._call(N.bf_card, N.as_cstr(key), byref(b.int64), byref(b.err)):
            raise_error(b.err)
        return b.int64.value

    # --------------------------------------------------------- unique counting

    def distinct_create(self, key, span_s=604800, minutes=60, hours=48, days=31, tzoffset_s=0):
        """FG.UVCREATE; an existing key raises InvalidError."""
        o = N.fill(N.DistinctOptions(), span_s=span_s, minutes=minutes, hours=hours, days=days,
                   tzoffset_s=tzoffset_s)
        b = self._tls
        if self._call(N.distinct_create, N.as_cstr(key), byref(o), byref(b.err)):
            raise_error(b.err)

    def distinct_add(self, key, items, at_us=None):
        """FG.UVADD of the items now, or FG.UVADDAT at at_us: True when the
        counter changed. A single str or bytes is one item."""
        if isinstance(items, (str, bytes)):
            items = (items,)
        at_us = -1 if at_us is None else N.arg(at_us, "at_us")
        keep, ptrs, lens, n = N.byte_items(items)
        b = self._tls
        if self._call(N.distinct_add, N.as_cstr(key), ptrs, lens, n, at_us, byref(b.flag),
                      byref(b.err)):
            raise_error(b.err)
        return b.flag.value

    def distinct_count(self, keys, window):
        """FG.UVCOUNT over the union of the counters `keys` (one key, or a
        list of one hash slot) in `window` (last() or between())."""
        keep, arr, n = N.key_array((keys,) if isinstance(keys, (str, bytes)) else keys)
        b = self._tls
        if self._call(N.distinct_count, arr, n, window._c, byref(b.int64), byref(b.err)):
            raise_error(b.err)
        return b.int64.value

    def distinct_export(self, keys, window):
        """FG.UVEXPORT: the window as a dense HyperLogLog string (bytes that
        PFCOUNT and PFMERGE take)."""
        keep, arr, n = N.key_array((keys,) if isinstance(keys, (str, bytes)) else keys)
        hll = (ctypes.c_uint8 * N.HLL_BYTES)()
        b = self._tls
        if self._call(N.distinct_export, arr, n, window._c, hll, byref(b.err)):
            raise_error(b.err)
        return bytes(hll)

    # ---------------------------------------------------------------- policies

    def policy_set(self, name, definition):
        """FG.POLICY SET: creates or replaces the policy (a PolicyDef)."""
        c = definition.to_c()
        b = self._tls
        if self._call(N.policy_set, N.as_cstr(name), byref(c), byref(b.err)):
            raise_error(b.err)

    def policy_delete(self, name):
        """FG.POLICY DEL: True when there was one."""
        b = self._tls
        if self._call(N.policy_delete, N.as_cstr(name), byref(b.flag), byref(b.err)):
            raise_error(b.err)
        return b.flag.value

    def policy_get(self, name):
        """FG.POLICY GET: a PolicyInfo."""
        info, b = N.PolicyInfo(), self._tls
        if self._call(N.policy_get, N.as_cstr(name), byref(info), byref(b.err)):
            raise_error(b.err)
        return policies.info_from(info)

    def policy_names(self):
        """FG.POLICY LIST: the names, sorted."""
        names, count, b = ctypes.POINTER(c_char_p)(), c_size_t(), self._tls
        if self._call(N.policy_names, byref(names), byref(count), byref(b.err)):
            raise_error(b.err)
        try:
            return [names[i].decode() for i in range(count.value)]
        finally:
            N.policy_names_free(names, count)

    def policy_allow(self, name, items):
        """FG.POLICY ALLOW: adds to the allowlist; the items that were new."""
        return self._policy_list_add(name, False, items)

    def policy_deny(self, name, items):
        """FG.POLICY DENY: adds to the denylist; the items that were new."""
        return self._policy_list_add(name, True, items)

    def _policy_list_add(self, name, deny, items):
        if isinstance(items, (str, bytes)):
            items = (items,)
        keep, ptrs, lens, n = N.byte_items(items)
        b = self._tls
        if self._call(N.policy_list_add, N.as_cstr(name), deny, ptrs, lens, n, byref(b.int64),
                      byref(b.err)):
            raise_error(b.err)
        return b.int64.value

    def policy_check(self, name, key, cost=1, identity=None):
        """FG.CHECK: one request of `cost` for `key` under the policy `name`;
        `identity` (default: the key) is what the lists are checked against."""
        out, b = N.PolicyResult(), self._tls
        if self._call(N.policy_check, N.as_cstr(name), N.as_cstr(key),
                      None if identity is None else N.as_cstr(identity), N.arg(cost, "cost"),
                      byref(out), byref(b.err)):
            raise_error(b.err)
        return policies.result_from(out)

    def policy_acquire(self, name, key, timeout_ms, cost=1, identity=None):
        """The same, waiting up to timeout_ms in the key's FIFO queue for
        the request to be allowed."""
        out, b = N.PolicyResult(), self._tls
        if self._call(N.policy_acquire, N.as_cstr(name), N.as_cstr(key),
                      None if identity is None else N.as_cstr(identity), N.arg(cost, "cost"),
                      N.arg(timeout_ms, "timeout_ms"), byref(out), byref(b.err)):
            raise_error(b.err)
        return policies.result_from(out)

    def set_policy_loader(self, loader):
        """loader(name) -> PolicyDef or None, asked once for a policy the
        server does not have; what it gives is set and the check retried.
        Called from the checking thread. None removes the loader."""
        fn = policies.loader_trampoline(loader) if loader is not None else N.LOADER_FN()
        h = self._enter()
        try:
            # A check in flight may still call the loader replaced: it is
            # kept until those calls have returned (Owned._retired).
            with self._mu:
                N.set_policy_loader(h, fn, None)
                self._retired.append(self._loader)
                self._loader = fn
        finally:
            self._leave()

    def apply_policy_file(self, path):
        """Sets the policies of a config file (docs/policies.md): how many."""
        applied, b = c_size_t(), self._tls
        if self._call(N.policies_apply_file, N.as_cstr(str(path)), byref(applied),
                      byref(b.err)):
            raise_error(b.err)
        return applied.value


def _request_row(key, limit, cost=1, peek=False):
    """A request of a batch as the fields of its fg_request."""
    if not isinstance(limit, Limit):
        raise TypeError("a floodgate Limit is needed (token_bucket(...), ...), not %r"
                        % (limit,))
    return (N.as_cstr(key), limit._ptr, N.arg(cost, "cost"), peek)

"""libfloodgate through ctypes: finding the library, its structs, and the
prototypes of include/floodgate.h.

The structs below mirror the header field for field; tests/client/abi_layout.c
prints the C sizes and offsets and test_python.py compares them with these,
so a change to the header that is not made here fails the tests.

ctypes releases the GIL for the length of every foreign call, so a thread
waiting on the network (or in a server's lock queue) never holds up the
others; callbacks from the library's threads (a lost lock, a policy loader,
a clock) take the GIL back while they run. The in-process filter's calls
are the exception: they keep the GIL (pylib), which makes them one at a
time as fg_filter needs, for the nanoseconds they take.

ctypes also converts an integer to a C type by masking it to its width
(2**64 + 3 becomes 3) without a word, so every number a caller gives goes
through arg() or fill() first, which refuse what the C type cannot hold.

Where the library is looked for, first to last (library_path tells which
was loaded):
  1. $FLOODGATE_LIBRARY, a path to the shared library: nothing else is tried;
  2. the lib directory this package is installed under: `make install`'s
     PREFIX/lib/python3/dist-packages/floodgate -> PREFIX/lib, and pip's
     PREFIX/lib/python3.X/site-packages/floodgate -> PREFIX/lib (in a
     virtual environment: the environment's lib);
  3. the source tree's build/ (bindings/python/floodgate -> build), only
     for the package in a source tree;
  4. in a virtual environment, sys.prefix/lib, the environment's lib, for
     a package found elsewhere on sys.path (PYTHONPATH, a .pth file);
  5. the system's loader: libfloodgate.so.0 in LD_LIBRARY_PATH, the
     ld.so cache (PREFIX/lib after `make install` and ldconfig, for a
     PREFIX such as /usr/local that ld.so.conf names) and the default paths.
Steps 2 to 4 are relative to this file or to the interpreter, so an
installed tree still works after it is moved to another prefix, without
LD_LIBRARY_PATH. A path that does not exist is skipped; one that exists but
does not load is kept for the error, and the next is tried.
"""

import ctypes
import operator
import os
import sys
import threading
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_bool,
    c_char,
    c_char_p,
    c_double,
    c_int,
    c_int64,
    c_size_t,
    c_uint8,
    c_uint64,
    c_void_p,
)

from . import errors

SONAME = "libfloodgate.so.0"
MAX_POLICY_LIMITS = 8
OWNER_ID_LEN = 32
HLL_BYTES = 12304


def _candidates():
    explicit = os.environ.get("FLOODGATE_LIBRARY")
    if explicit:
        return [explicit]
    here = os.path.dirname(os.path.abspath(__file__))
    found = [os.path.normpath(os.path.join(here, "..", "..", "..", SONAME))]
    if here.split(os.sep)[-3:] == ["bindings", "python", "floodgate"]:
        found.append(os.path.normpath(os.path.join(here, "..", "..", "..", "build", SONAME)))
    if sys.prefix != sys.base_prefix:  # a virtual environment
        found.append(os.path.join(os.path.abspath(sys.prefix), "lib", SONAME))
    out = []
    for path in found + [SONAME]:
        if path not in out:
            out.append(path)
    return out


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError("floodgate: libfloodgate not found; tried " + ", ".join(tried) +
                      " (set FLOODGATE_LIBRARY to its path)")


lib, library_path = _load()
pylib = ctypes.PyDLL(library_path)  # the same library, its calls keeping the GIL

# ------------------------------------------------------------------ structs


class Error(Structure):
    _fields_ = [("code", c_int), ("message", c_char * 256)]


class Limit(Structure):
    _fields_ = [("algorithm", c_int), ("limit", c_int64), ("window_ms", c_double),
                ("rate", c_double)]


class Result(Structure):
    _fields_ = [("allowed", c_bool), ("limit", c_int64), ("remaining", c_int64),
                ("retry_after_ms", c_int64), ("reset_after_ms", c_int64), ("source", c_int)]


CLOCK_FN = CFUNCTYPE(c_int64, c_void_p)


class Options(Structure):
    _fields_ = [("connect_timeout_ms", c_int), ("command_timeout_ms", c_int),
                ("on_failure", c_int), ("cache_denials", c_bool), ("clock_us", CLOCK_FN),
                ("clock_arg", c_void_p), ("send_clock", c_bool), ("lease_units", c_int64),
                ("lease_ms", c_int)]


class Request(Structure):
    _fields_ = [("key", c_char_p), ("limit", POINTER(Limit)), ("cost", c_int64),
                ("peek", c_bool), ("code", c_int), ("result", Result)]


LOST_FN = CFUNCTYPE(None, c_char_p, c_char_p, c_int, c_void_p)


class LockOptions(Structure):
    _fields_ = [("lease_ms", c_int64), ("wait_ms", c_int64), ("shared", c_bool),
                ("reentrant", c_bool), ("renew", c_bool), ("renew_max_ms", c_int64),
                ("on_lost", LOST_FN), ("on_lost_arg", c_void_p), ("durable_replicas", c_int),
                ("durable_timeout_ms", c_int)]


class LockGrant(Structure):
    _fields_ = [("acquired", c_bool), ("token", c_uint64), ("ttl_ms", c_int64),
                ("holds", c_int64)]


class RedlockOptions(Structure):
    _fields_ = [("retry_count", c_int), ("retry_delay_ms", c_int), ("retry_jitter_ms", c_int),
                ("drift_factor", c_double), ("server_timeout_ms", c_int)]


class RedlockGrant(Structure):
    _fields_ = [("acquired", c_bool), ("validity_ms", c_int64), ("votes", c_int),
                ("token", c_uint64)]


class BloomOptions(Structure):
    _fields_ = [("error_rate", c_double), ("capacity", c_int64), ("expansion", c_int)]


class ListSpec(Structure):
    _fields_ = [("kind", c_int), ("error", c_double), ("capacity", c_int64)]


class PolicyDef(Structure):
    _fields_ = [("nlimits", c_size_t), ("limits", Limit * MAX_POLICY_LIMITS),
                ("ban_ms", c_double), ("ban_after", c_int64), ("ban_within_ms", c_double),
                ("shadow", c_bool), ("allowlist", ListSpec), ("denylist", ListSpec)]


class PolicyInfo(Structure):
    _fields_ = [("def", PolicyDef), ("allow_entries", c_int64),
                ("deny_entries", c_int64), ("allowed", c_int64), ("denied", c_int64),
                ("banned", c_int64), ("shadow_denied", c_int64), ("waited", c_int64)]


class PolicyResult(Structure):
    _fields_ = [("result", Result), ("decided_by", c_int), ("limit_index", c_int),
                ("shadow_denied", c_bool)]


class Window(Structure):
    _fields_ = [("last", c_bool), ("n", c_int64), ("unit", c_int), ("start_us", c_int64),
                ("end_us", c_int64)]


class DistinctOptions(Structure):
    _fields_ = [("span_s", c_int64), ("minutes", c_int64), ("hours", c_int64),
                ("days", c_int64), ("tzoffset_s", c_int64)]


class Stats(Structure):
    _fields_ = [("decisions", c_uint64), ("round_trips", c_uint64),
                ("denials_cached", c_uint64), ("failures", c_uint64), ("reconnects", c_uint64),
                ("lease_hits", c_uint64)]


LOADER_FN = CFUNCTYPE(c_bool, c_char_p, POINTER(PolicyDef), c_void_p)

# The structs as tests/client/abi_layout.c names them.
STRUCTS = {
    "fg_error": Error, "fg_limit": Limit, "fg_result": Result, "fg_options": Options,
    "fg_request": Request, "fg_lock_options": LockOptions, "fg_lock_grant": LockGrant,
    "fg_redlock_options": RedlockOptions, "fg_redlock_grant": RedlockGrant,
    "fg_bloom_options": BloomOptions, "fg_list_spec": ListSpec, "fg_policy_def": PolicyDef,
    "fg_policy_info": PolicyInfo, "fg_policy_result": PolicyResult, "fg_window": Window,
    "fg_distinct_options": DistinctOptions, "fg_stats": Stats,
}

# --------------------------------------------------------------- prototypes

_client = c_void_p
_err = POINTER(Error)
_items = POINTER(c_void_p)
_lens = POINTER(c_size_t)


def _proto(name, restype, *argtypes, dll=lib):
    fn = getattr(dll, name)
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


code_name = _proto("fg_code_name", c_char_p, c_int)
options_init = _proto("fg_options_init", None, POINTER(Options))
open_client = _proto("fg_open", _client, c_char_p, POINTER(Options), _err)
close_client = _proto("fg_close", None, _client)
check = _proto("fg_check", c_int, _client, c_char_p, POINTER(Limit), c_int64, POINTER(Result), _err)
peek = _proto("fg_peek", c_int, _client, c_char_p, POINTER(Limit), c_int64, POINTER(Result), _err)
reset = _proto("fg_reset", c_int, _client, c_char_p, POINTER(c_bool), _err)
inspect = _proto("fg_inspect", c_int, _client, c_char_p, c_char_p, c_size_t, _err)
check_batch = _proto("fg_check_batch", c_int, _client, POINTER(Request), c_size_t, _err)
get_stats = _proto("fg_get_stats", None, _client, POINTER(Stats))
owner_id = _proto("fg_owner_id", None, c_char_p)
request_key = _proto("fg_request_key", c_size_t, c_char_p, c_size_t, c_char_p, c_char_p,
                     c_char_p, c_size_t)

lock_options_init = _proto("fg_lock_options_init", None, POINTER(LockOptions))
lock = _proto("fg_lock", c_int, _client, c_char_p, c_char_p, POINTER(LockOptions),
              POINTER(LockGrant), _err)
unlock = _proto("fg_unlock", c_int, _client, c_char_p, c_char_p, POINTER(c_int64), _err)
extend = _proto("fg_extend", c_int, _client, c_char_p, c_char_p, c_int64, POINTER(c_bool), _err)
semaphore_acquire = _proto("fg_semaphore_acquire", c_int, _client, c_char_p, c_int64, c_char_p,
                           c_int64, POINTER(LockOptions), POINTER(LockGrant), _err)
semaphore_release = _proto("fg_semaphore_release", c_int, _client, c_char_p, c_char_p, c_int64,
                           POINTER(c_int64), _err)
lock_multi = _proto("fg_lock_multi", c_int, _client, POINTER(c_char_p), c_size_t, c_char_p,
                    POINTER(LockOptions), POINTER(LockGrant), _err)
unlock_multi = _proto("fg_unlock_multi", c_int, _client, POINTER(c_char_p), c_size_t, c_char_p,
                      POINTER(c_int64), _err)

redlock_options_init = _proto("fg_redlock_options_init", None, POINTER(RedlockOptions))
redlock_open = _proto("fg_redlock_open", c_void_p, POINTER(c_char_p), c_size_t,
                      POINTER(RedlockOptions), _err)
redlock_close = _proto("fg_redlock_close", None, c_void_p)
redlock_lock = _proto("fg_redlock_lock", c_int, c_void_p, c_char_p, c_char_p, c_int64,
                      POINTER(RedlockGrant), _err)
redlock_extend = _proto("fg_redlock_extend", c_int, c_void_p, c_char_p, c_char_p, c_int64,
                        POINTER(RedlockGrant), _err)
redlock_unlock = _proto("fg_redlock_unlock", c_int, c_void_p, c_char_p, c_char_p, _err)

bloom_options_init = _proto("fg_bloom_options_init", None, POINTER(BloomOptions))
bf_reserve = _proto("fg_bf_reserve", c_int, _client, c_char_p, POINTER(BloomOptions), _err)
bf_add = _proto("fg_bf_add", c_int, _client, c_char_p, c_char_p, c_size_t, POINTER(c_bool), _err)
bf_exists = _proto("fg_bf_exists", c_int, _client, c_char_p, c_char_p, c_size_t,
                   POINTER(c_bool), _err)
bf_madd = _proto("fg_bf_madd", c_int, _client, c_char_p, _items, _lens, c_size_t,
                 POINTER(c_bool), _err)
bf_mexists = _proto("fg_bf_mexists", c_int, _client, c_char_p, _items, _lens, c_size_t,
                    POINTER(c_bool), _err)
bf_card = _proto("fg_bf_card", c_int, _client, c_char_p, POINTER(c_int64), _err)
# An fg_filter is not thread-safe: its calls keep the GIL, so they run one
# at a time however many threads share the filter.
filter_new = _proto("fg_filter_new", c_void_p, POINTER(BloomOptions), _err, dll=pylib)
filter_add = _proto("fg_filter_add", c_int, c_void_p, c_char_p, c_size_t, dll=pylib)
filter_contains = _proto("fg_filter_contains", c_bool, c_void_p, c_char_p, c_size_t, dll=pylib)
filter_cardinality = _proto("fg_filter_cardinality", c_int64, c_void_p, dll=pylib)
filter_bytes = _proto("fg_filter_bytes", c_size_t, c_void_p, dll=pylib)
filter_free = _proto("fg_filter_free", None, c_void_p, dll=pylib)

policy_def_init = _proto("fg_policy_def_init", None, POINTER(PolicyDef))
policy_set = _proto("fg_policy_set", c_int, _client, c_char_p, POINTER(PolicyDef), _err)
policy_delete = _proto("fg_policy_delete", c_int, _client, c_char_p, POINTER(c_bool), _err)
policy_get = _proto("fg_policy_get", c_int, _client, c_char_p, POINTER(PolicyInfo), _err)
policy_names = _proto("fg_policy_names", c_int, _client, POINTER(POINTER(c_char_p)),
                      POINTER(c_size_t), _err)
policy_names_free = _proto("fg_policy_names_free", None, POINTER(c_char_p), c_size_t)
policy_list_add = _proto("fg_policy_list_add", c_int, _client, c_char_p, c_bool, _items, _lens,
                         c_size_t, POINTER(c_int64), _err)
policy_check = _proto("fg_policy_check", c_int, _client, c_char_p, c_char_p, c_char_p, c_int64,
                      POINTER(PolicyResult), _err)
policy_acquire = _proto("fg_policy_acquire", c_int, _client, c_char_p, c_char_p, c_char_p,
                        c_int64, c_int64, POINTER(PolicyResult), _err)
set_policy_loader = _proto("fg_set_policy_loader", None, _client, LOADER_FN, c_void_p)
policies_apply_file = _proto("fg_policies_apply_file", c_int, _client, c_char_p,
                             POINTER(c_size_t), _err)

distinct_options_init = _proto("fg_distinct_options_init", None, POINTER(DistinctOptions))
distinct_create = _proto("fg_distinct_create", c_int, _client, c_char_p,
                         POINTER(DistinctOptions), _err)
distinct_add = _proto("fg_distinct_add", c_int, _client, c_char_p, _items, _lens, c_size_t,
                      c_int64, POINTER(c_bool), _err)
distinct_count = _proto("fg_distinct_count", c_int, _client, POINTER(c_char_p), c_size_t, Window,
                        POINTER(c_int64), _err)
distinct_export = _proto("fg_distinct_export", c_int, _client, POINTER(c_char_p), c_size_t,
                         Window, POINTER(c_uint8), _err)


class Owned:
    """A C handle this object owns (a client, a Redlock, a filter), which
    threads share. Every call on the handle is a use of it (_call, or
    _enter and _leave); close() marks the object closing, so that calls
    begun later raise floodgate.Error, and the handle is freed once, when
    no call uses it any more: by close() when none does, else by the call
    that leaves last. So a C call never gets a freed handle, whatever the
    threads do, and what C may still call back (a callback it was given and
    no longer has, _retired) lives until the calls that could reach it are
    over. Subclasses call Owned.__init__ first, set `_h` and name what
    frees it in _free."""

    _h = None  # until a handle is made: the __del__ of a failed __init__ frees nothing
    _what = "handle"

    def __init__(self):
        # One entry per call using _h: list.append and list.pop are atomic,
        # cheaper than a lock on every call; _mu orders only the rare rest.
        self._uses = []
        self._closing = False
        self._retired = []
        self._mu = threading.Lock()

    def _free(self, h):
        raise NotImplementedError

    def _enter(self):
        """The handle, for one call that _leave ends."""
        self._uses.append(None)
        if self._closing:
            self._leave()
            raise errors.Error("the %s is closed" % self._what)
        return self._h

    def _leave(self):
        uses = self._uses
        uses.pop()
        if not uses and (self._closing or self._retired):
            self._drained()

    def _call(self, fn, *args):
        """fn(handle, *args) as one use of the handle."""
        h = self._enter()
        try:
            return fn(h, *args)
        finally:
            self._leave()

    def _drained(self):
        """No call used the handle a moment ago: what waited for that is done,
        unless a call came in since (then it does it when it leaves)."""
        with self._mu:
            # closing first: a call that entered after this read saw it
            # False, and is in _uses by the check below
            closing = self._closing
            if self._uses:
                return
            del self._retired[:]
            h = None
            if closing:
                h, self._h = self._h, None
        if h:
            self._free(h)

    def close(self):
        self._closing = True
        if not self._uses:
            self._drained()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if self._h is not None:
            self.close()


_INT_RANGES = {t: ((-(1 << (8 * ctypes.sizeof(t) - 1)), (1 << (8 * ctypes.sizeof(t) - 1)) - 1)
                   if t(-1).value < 0 else (0, (1 << (8 * ctypes.sizeof(t))) - 1))
               for t in (c_int, c_int64, c_size_t, c_uint64)}
_TYPE_NAMES = {c_int: "int", c_int64: "int64_t", c_size_t: "size_t", c_uint64: "uint64_t"}


def arg(value, name, ctype=c_int64):
    """value for the C parameter `name` of type ctype, which receives it
    unchanged, or InvalidError naming the parameter and its type's range.
    Integers (bool as 0 or 1, as in C) must fit the type; a double is what
    ctypes makes of a number, and NaN and the infinities reach the library,
    which refuses them wherever it reads one. The library then checks its
    own ranges (1 .. for a capacity, ...), with the server's words."""
    if ctype is c_double:
        try:
            return c_double(value).value
        except OverflowError:
            raise errors.InvalidError("ERR %s must be a number a double holds (at most %g)"
                                      % (name, sys.float_info.max)) from None
    value = operator.index(value)
    low, high = _INT_RANGES[ctype]
    if low <= value <= high:
        return value
    raise errors.InvalidError("ERR %s must be an integer from %d to %d (%s), not %d"
                              % (name, low, high, _TYPE_NAMES[ctype], value))


def fill(struct, **values):
    """Sets the fields of a ctypes struct through arg(), each checked for
    its field's type (bool fields take any value's truth, as C does)."""
    types = dict(struct._fields_)
    for name, value in values.items():
        ctype = types[name]
        setattr(struct, name, value if ctype is c_bool else arg(value, name, ctype))
    return struct


def byte_items(items):
    """n items (bytes or str) as the (items, lens, n) triple the C calls take;
    the returned tuple keeps the buffers alive as long as it lives."""
    data = [as_bytes(i) for i in items]
    n = len(data)
    ptrs = (c_void_p * n)(*[ctypes.cast(c_char_p(d), c_void_p).value for d in data])
    lens = (c_size_t * n)(*[len(d) for d in data])
    return data, ptrs, lens, n


def key_array(keys):
    data = [as_cstr(k) for k in keys]
    return data, (c_char_p * len(data))(*data), len(data)


def as_cstr(value):
    """A key, name, owner or URL for a C string: a NUL would end it early
    and name another key, so it is refused."""
    b = as_bytes(value)
    if b"\0" in b:
        raise errors.InvalidError("ERR a key, name or owner cannot hold a NUL byte: %r" % (value,))
    return b


def as_bytes(value):
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError("expected str or bytes, not %s" % type(value).__name__)

"""Named policies (docs/policies.md): several limits applied together, all
or nothing, with a penalty box, shadow mode and allow/deny lists."""

import collections
import sys
import traceback
from ctypes import byref, c_double

from . import _native as N
from .errors import InvalidError
from .limits import Limit, result_from as _result_from

MAX_LIMITS = N.MAX_POLICY_LIMITS
_LIST_KINDS = ("exact", "bloom")
_DECIDERS = ("limit", "penalty", "denylist", "allowlist")


class ListSpec(collections.namedtuple("ListSpec", "kind error capacity",
                                      defaults=("exact", 0.001, 10000))):
    """An allow or deny list: "exact", or "bloom" with its false-positive
    rate (error) and expected entries (capacity)."""
    __slots__ = ()


class PolicyDef(collections.namedtuple(
        "PolicyDef", "limits ban_ms ban_after ban_within_ms shadow allowlist denylist",
        defaults=(0.0, 1, 0.0, False, ListSpec(), ListSpec()))):
    """A policy: 1 to 8 limits (any algorithm but sliding_log), a penalty
    box (ban_ms, after ban_after denials within ban_within_ms; 0: ban_ms),
    shadow mode (decide and count, never deny) and its lists."""

    __slots__ = ()

    def to_c(self):
        c = N.PolicyDef()
        N.policy_def_init(byref(c))
        limits = list(self.limits)
        if not 1 <= len(limits) <= MAX_LIMITS:  # the server's words, as for other bad input
            raise InvalidError("ERR a policy needs 1 to %d LIMIT rules" % MAX_LIMITS)
        c.nlimits = len(limits)
        for i, limit in enumerate(limits):
            if not isinstance(limit, Limit):  # as Client.check says it
                raise TypeError("a floodgate Limit is needed (token_bucket(...), ...), not %r"
                                % (limit,))
            c.limits[i] = limit._c
        N.fill(c, ban_ms=self.ban_ms, ban_after=self.ban_after, ban_within_ms=self.ban_within_ms,
               shadow=self.shadow)
        for rule, c_spec, spec in (("ALLOWLIST", c.allowlist, self.allowlist),
                                   ("DENYLIST", c.denylist, self.denylist)):
            if spec.kind not in _LIST_KINDS:
                raise InvalidError("ERR %s takes EXACT or BLOOM error capacity" % rule)
            c_spec.kind = _LIST_KINDS.index(spec.kind)
            c_spec.error = N.arg(spec.error, rule.lower() + " error", c_double)
            c_spec.capacity = N.arg(spec.capacity, rule.lower() + " capacity")
        return c


def _limit_from(c):
    return Limit(c.algorithm, c.limit, c.window_ms, c.rate)


def def_from(c):
    def spec(s):
        # An exact list reads as the default ListSpec (as mem: reports it),
        # so that a definition read back equals the one set.
        if s.kind == _LIST_KINDS.index("exact"):
            return ListSpec("exact")
        return ListSpec(_LIST_KINDS[s.kind], s.error, s.capacity)
    return PolicyDef([_limit_from(c.limits[i]) for i in range(c.nlimits)], c.ban_ms,
                     c.ban_after, c.ban_within_ms, c.shadow, spec(c.allowlist),
                     spec(c.denylist))


PolicyInfo = collections.namedtuple(
    "PolicyInfo", "definition allow_entries deny_entries allowed denied banned shadow_denied "
    "waited")
PolicyInfo.__doc__ = ("A policy as FG.POLICY GET shows it: its definition, which policy_set "
                      "takes again, and its counters.")


def info_from(c):
    return PolicyInfo(def_from(getattr(c, "def")), c.allow_entries, c.deny_entries, c.allowed,
                      c.denied, c.banned, c.shadow_denied, c.waited)


class PolicyResult(collections.namedtuple(
        "PolicyResult", "result decided_by limit_index shadow_denied")):
    """A policy check: the Result, who decided ("limit", "penalty",
    "denylist", "allowlist"), the 0-based limit_index when a limit did, and
    whether shadow mode turned a denial into this allowance. True when
    allowed."""

    __slots__ = ()

    @property
    def allowed(self):
        return self.result.allowed

    def __bool__(self):
        return self.result.allowed

    def headers(self, name="default"):
        """The RateLimit fields of the result; none when a list decided (no
        quota was counted, and its zeros would read as "none left")."""
        if self.decided_by in ("allowlist", "denylist"):
            return {}
        return self.result.headers(name=name)


def result_from(c):
    return PolicyResult(_result_from(c.result), _DECIDERS[c.decided_by], c.limit_index,
                        c.shadow_denied)


def loader_trampoline(loader):
    """The C policy loader calling loader(name) -> PolicyDef or None. An
    exception in the loader counts as no such policy, and is reported as
    Python reports errors it cannot raise (sys.unraisablehook)."""
    def load(name, out, _arg):
        try:
            definition = loader(name.decode())
            if definition is None:
                return False
            out[0] = definition.to_c()
            return True
        except Exception as e:  # noqa: BLE001 - it cannot cross into C
            _report_unraisable(e, loader)
            return False
    return N.LOADER_FN(load)


class _Unraisable:
    def __init__(self, exc, obj):
        self.exc_type, self.exc_value = type(exc), exc
        self.exc_traceback, self.err_msg, self.object = exc.__traceback__, \
            "Exception ignored in floodgate policy loader", obj


def _report_unraisable(exc, obj):
    """Hands the exception to sys.unraisablehook. Python's own hook takes
    only the interpreter's UnraisableHookArgs, which Python code cannot
    build, so for it the report is written as that hook writes it. Nothing
    may escape: an exception leaving a ctypes callback makes its return
    value undefined (the check would go on with a garbage definition)."""
    args = _Unraisable(exc, obj)
    try:
        if sys.unraisablehook is not sys.__unraisablehook__:
            sys.unraisablehook(args)
            return
    except Exception:  # noqa: BLE001 - a failing hook: report as the default one
        pass
    if sys.stderr is not None:
        sys.stderr.write("%s: %r\n" % (args.err_msg, obj))
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)

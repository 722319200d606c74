"""Policies under concurrency: many clients hammer a few keys of a policy
with three limits of different algorithms, and the test proves from what
they were answered that (a) the admitted units never exceed any limit and
(b) every request was charged to all limits or to none (docs/policies.md:
"Only when all allow it is it charged to all of them").

Time. A check's decision instant is never known exactly, only bracketed: a
checker sends MULTI TIME FG.CHECK TIME EXEC, so its decision lies between
the two TIMEs (Redis 7.0: TIME and the module both read the wall clock, to
the microsecond, the module once per command); a waiter pipelines TIME,
FG.CHECK ... WAIT, TIME on its connection (the second TIME runs after the
blocked client is answered); the C driver brackets each library call with
two reads of its clock. Every check below is sound for any instant inside
the brackets: it may miss a violation hidden by a wide bracket, never
report one that did not happen. MULTI brackets are tens of microseconds
wide against emission intervals of 50 ms, so they miss little.

(a) The bounds, per key, over the admitted requests only:
  - TOKEN C at r/s (emission interval T = 1/r, exact in ns): for every
    interval [a, b] with a a bracket's start and b a bracket's end, the
    units of the requests whose brackets lie inside it are at most
    C + (b - a) / T, compared exactly as U * T <= C * T + (b - a) in ns.
    GCRA guarantees it with no tolerance: the TAT grows by T per unit
    admitted in the interval and never runs more than C * T ahead.
  - FIXED A per W: the units surely inside k consecutive aligned windows
    are at most k * A (k = 1 to 3; k > 1 covers brackets across a border).
  - SLIDING B per W is an estimate (src/core/sliding_window.c): what it
    guarantees is the inequality it admits by, at each admission at e into
    its window: prev * (W - e) + (count + cost) * W <= B * W, prev the units
    of the window before and count those already in the window. It is
    checked with lower bounds of prev and count (the requests surely in
    those windows and surely before) and the latest possible e, which only
    weakens it. An exact sliding bound (B per any W) is not guaranteed by
    the counter and not checked.

(b) All or nothing, on the real stored state. A monitor reads every key's
state in MULTI TIME DUMP... TIME EXEC (the FG.PLSTATE payload, decoded)
about every 100 ms and at the end. The admitted requests alone determine
that state: a fixed window's count is exactly the units admitted in it, a
sliding window's two counts the units of its two windows, a bucket's TAT
max over i of (t_i + T * units admitted from i on). Each is bracketed from
the admitted requests (sure ones give the lower end, possible ones the
upper) and the stored value must fall inside. A limit charged for a
request that another limit denied holds more than the admitted requests
explain -- a window count above its range, a TAT T * cost beyond it --
and the limits deny at different times here (the token bucket under the
hammering, the windows at their ends), so such a charge would happen
often. test_the_checks_catch_non_atomic_clients proves the checks see it:
clients that call FG.TOKEN and FG.FIXED one after the other pass every
bound and fail exactly this check. The policy's allowed and denied
counters must also equal the answers.

Waiters (WAIT 2000) must be allowed, or denied only when they could not
have been allowed by their deadline: retry_after + the time they spent
>= the timeout, less 2 ms as timers fire on whole milliseconds (a timeout
spends the timeout; an answer at once has a retry_after beyond it).

Shadow mode is checked deterministically on the explicit-time server:
concurrent clients send FG.CHECK ... AT their own clock and INCR a counter
in the same MULTI, which gives the server's order; replaying that order
serially on an enforcing twin must deny exactly what was flagged.

libfloodgate's threads, on mem: (in process, one lock) and on a server,
go through tests/client/policy_hammer.c: the same bounds and waiter rule
(WAIT 1000 there), and the state read back through the documented API
only, after the run (see its top comment), each limit's remaining units
within the range the admitted requests give. On a stock server too
(backends.py), where each check is one server script and acquire the
library's own retries: the same bounds and waiter rule, no counters.
"""

import bisect
import random
import struct
import subprocess
import threading
import time
from collections import Counter, defaultdict, namedtuple

import pytest

import rdbpayload
from backends import target
from harness import RawClient, RespError
from test_client import program

WAIT_MS = 2000
TIMER_SLACK_US = 2000   # module and library timers fire on whole milliseconds
MONITOR_EVERY_S = 0.1


# --------------------------------------------------------------------------
# limits and what the admitted requests imply

class Limit:
    """One LIMIT rule: TOKEN capacity rate, FIXED or SLIDING limit window_ms."""

    def __init__(self, algo, n, x):
        self.algo, self.n, self.x = algo, n, x
        if algo == "TOKEN":
            self.t_ns = round(1e9 / x)   # the emission interval, as params.c rounds it
        else:
            self.w = x * 1000            # window, us

    def words(self):
        return ["LIMIT", self.algo, str(self.n), str(self.x)]

    def rule(self):
        return "%s:%d:%d" % (self.algo.lower(), self.n, self.x)

    def __repr__(self):
        return "%s %d %d" % (self.algo, self.n, self.x)


# A bucket of 10 refilled at 20/s, 15 per 1 s window, 30 per 2 s sliding
# window. Under the hammering the bucket is empty at every window's start
# and denies; it refills faster (20/s) than the windows allow (15/s), so
# they deny later in each window. Each limit is the only one to deny at
# some point of every second, whatever the phase of the run.
LIMITS = (Limit("TOKEN", 10, 20), Limit("FIXED", 15, 1000), Limit("SLIDING", 30, 2000))

Admit = namedtuple("Admit", "cost lo hi")


def window_of(t, w):
    return t - t % w


class Book:
    """The admitted requests of one key, sorted by bracket start (us)."""

    def __init__(self, admits):
        self.a = sorted(admits, key=lambda x: x.lo)

    def units(self, start, end, read_lo, read_hi):
        """(sure, possible) units admitted within [start, end) before a read
        taken at some instant of [read_lo, read_hi]."""
        sure = sum(a.cost for a in self.a if start <= a.lo and a.hi < end and a.hi < read_lo)
        possible = sum(a.cost for a in self.a if a.hi >= start and a.lo < end and a.lo <= read_hi)
        return sure, possible

    def tat_range(self, t_ns, read_lo, read_hi):
        """Bounds of a bucket's TAT (ns) at a read: max over i of t_i + T *
        (units admitted at or after t_i). Lower: i and the j surely after it,
        all surely before the read, t_i >= lo_i. Upper: every request
        possibly before the read, t_i <= hi_i, and every j that may come at
        or after i (hi_j >= lo_i)."""
        sure = sorted((a for a in self.a if a.hi < read_lo), key=lambda x: x.lo)
        los = [a.lo for a in sure]
        after = suffix_sums([a.cost for a in sure])
        low = max((a.lo * 1000 + t_ns * (a.cost + after[bisect.bisect_right(los, a.hi)])
                   for a in sure), default=0)
        possible = sorted((a for a in self.a if a.lo <= read_hi), key=lambda x: x.hi)
        his = [a.hi for a in possible]
        from_ = suffix_sums([a.cost for a in possible])
        high = max((a.hi * 1000 + t_ns * from_[bisect.bisect_left(his, a.lo)]
                    for a in possible), default=0)
        return low, high


def suffix_sums(xs):
    out = [0] * (len(xs) + 1)
    for i in range(len(xs) - 1, -1, -1):
        out[i] = out[i + 1] + xs[i]
    return out


# -- (a) the bounds

def token_excess(book, lim):
    out, c, t = [], lim.n, lim.t_ns
    by_hi = sorted(book.a, key=lambda x: x.hi)
    for first in book.a:
        units = 0
        for r in by_hi:
            if r.lo < first.lo:
                continue
            units += r.cost
            if units * t > c * t + (r.hi - first.lo) * 1000:
                out.append("%r: %d units within [%d, %d] us" % (lim, units, first.lo, r.hi))
                break
    return out


def fixed_excess(book, lim):
    out, w = [], lim.w
    if not book.a:
        return out
    first, last = window_of(book.a[0].lo, w), max(a.hi for a in book.a)
    for start in range(first, last + 1, w):
        for k in (1, 2, 3):
            units = sum(a.cost for a in book.a if a.lo >= start and a.hi < start + k * w)
            if units > k * lim.n:
                out.append("%r: %d units in %d windows from %d" % (lim, units, k, start))
    return out


def sliding_excess(book, lim):
    out, w, b = [], lim.w, lim.n
    for j in book.a:
        start = window_of(j.lo, w)
        if j.hi >= start + w:
            continue
        prev = sum(a.cost for a in book.a if a.lo >= start - w and a.hi < start)
        count = sum(a.cost for a in book.a if a is not j and a.lo >= start and a.hi < j.lo)
        e = j.hi - start
        if prev * (w - e) + (count + j.cost) * w > b * w:
            out.append("%r: admitted %d at %d with prev %d, count %d"
                       % (lim, j.cost, j.hi, prev, count))
    return out


EXCESS = {"TOKEN": token_excess, "FIXED": fixed_excess, "SLIDING": sliding_excess}


def excess(books, limits):
    return [v for key, book in sorted(books.items()) for lim in limits
            for v in (key + " " + x for x in EXCESS[lim.algo](book, lim))]


# -- (b) the state against the admitted requests

def window_claims(lim, obs, now_w):
    """{window start: units the stored state says were admitted in it}: its
    window (and, sliding, the one before) and none since. A count of 0 or
    no key: nothing in the current window (nor, sliding, the previous)."""
    w = lim.w
    if obs is None or obs[1] == 0:
        claims = {now_w: 0}
        if lim.algo == "SLIDING":
            claims[now_w - w] = 0
        return claims
    start = window_of(obs[0], w)
    claims = {start: obs[1]}
    if lim.algo == "SLIDING":
        claims[start - w] = obs[2]
    for later in range(start + w, now_w + 1, w):
        claims[later] = 0
    return claims


def state_violations(lim, obs, book, lo, hi):
    """A limit's stored state (TOKEN: tat_ns; FIXED: (start, count);
    SLIDING: (start, count, prev); None: no key) read at [lo, hi]."""
    if lim.algo == "TOKEN":
        low, high = book.tat_range(lim.t_ns, lo, hi)
        if obs is None:
            return [] if low <= hi * 1000 else ["%r: no state, but the admitted requests "
                                                "make the TAT >= %d" % (lim, low)]
        if low <= obs <= high:
            return []
        return ["%r: TAT %d, the admitted requests make it %d..%d (%s)"
                % (lim, obs, low, high, "charged more" if obs > high else "charged less")]
    now_w = window_of(lo, lim.w)
    if window_of(hi, lim.w) != now_w:
        return []   # read across a border: skipped
    if obs is not None and window_of(obs[0], lim.w) > now_w:
        return ["%r: state of a future window %r" % (lim, obs)]
    out = []
    for start, units in sorted(window_claims(lim, obs, now_w).items()):
        sure, possible = book.units(start, start + lim.w, lo, hi)
        if not sure <= units <= possible:
            out.append("%r: window %d holds %d, the admitted requests make it %d..%d (%s)"
                       % (lim, start, units, sure, possible,
                          "charged more" if units > possible else "charged less"))
    return out


def remaining_range(lim, book, lo, hi):
    """The (fewest, most) units left a peek at [lo, hi] may answer for
    this limit alone; None when the peek straddles a window border."""
    if lim.algo == "TOKEN":
        low, high = book.tat_range(lim.t_ns, lo, hi)
        dvt = lim.n * lim.t_ns

        def left(tat, now_us):
            ttl = max(0, tat - now_us * 1000)
            return 0 if ttl >= dvt else (dvt - ttl) // lim.t_ns
        return left(high, lo), left(low, hi)
    w = lim.w
    now_w = window_of(lo, w)
    if window_of(hi, w) != now_w:
        return None
    sure, possible = book.units(now_w, now_w + w, lo, hi)
    if lim.algo == "FIXED":
        return max(0, lim.n - possible), max(0, lim.n - sure)
    psure, ppossible = book.units(now_w - w, now_w, lo, hi)

    def left(count, prev, e):
        if count >= lim.n:
            return 0
        free = (lim.n - count) * w - prev * (w - e)
        return 0 if free <= 0 else free // w
    return left(possible, ppossible, lo - now_w), left(sure, psure, hi - now_w)


def waiter_violations(denials, wait_ms):
    """Denied waiters (lo, hi, retry_after_ms): each must have spent its
    timeout, or been told to wait beyond it."""
    return ["denied after %d us with retry_after %d ms" % (hi - lo, retry)
            for lo, hi, retry in denials
            if retry < 0 or retry * 1000 + (hi - lo) < wait_ms * 1000 - TIMER_SLACK_US]


# --------------------------------------------------------------------------
# the server side: clients, monitor, decoding

def us(time_reply):
    return int(time_reply[0]) * 1_000_000 + int(time_reply[1])


def pipeline(conn, *commands):
    conn.sock.sendall(b"".join(conn.encode(c) for c in commands))
    return [conn.read_reply() for _ in commands]


def transaction(conn, *commands):
    """The replies of commands run in MULTI/EXEC."""
    replies = pipeline(conn, ["MULTI"], *commands, ["EXEC"])
    assert replies[0] == b"OK" and all(r == b"QUEUED" for r in replies[1:-1]), replies
    return replies[-1]


def lzf_decompress(data, size):
    """An LZF block (Redis compresses strings in DUMP): a control byte below
    32 copies that many + 1 literal bytes; above, its top 3 bits (7: plus
    the next byte) + 2 bytes are copied from a back reference."""
    out, i = bytearray(), 0
    while i < len(data):
        ctrl = data[i]
        i += 1
        if ctrl < 32:
            out += data[i:i + ctrl + 1]
            i += ctrl + 1
            continue
        length = ctrl >> 5
        if length == 7:
            length += data[i]
            i += 1
        ref = len(out) - ((ctrl & 0x1F) << 8) - data[i] - 1
        i += 1
        for _ in range(length + 2):
            out.append(out[ref])
            ref += 1
    assert len(out) == size, (len(out), size)
    return bytes(out)


def module_string(dump):
    """The one string a module value of a DUMP holds (opcode STRING)."""
    body, _, _ = rdbpayload.split(dump)
    assert body[0] == rdbpayload.RDB_TYPE_MODULE_2, body
    _, pos, _ = rdbpayload.dec_len(body, 1)          # the module type id
    op, pos, _ = rdbpayload.dec_len(body, pos)
    assert op == rdbpayload.OP_STRING, op
    n, pos, encoded = rdbpayload.dec_len(body, pos)
    if not encoded:
        return body[pos:pos + n]
    assert n == 3, n                                   # RDB_ENC_LZF
    clen, pos, _ = rdbpayload.dec_len(body, pos)
    size, pos, _ = rdbpayload.dec_len(body, pos)
    return lzf_decompress(body[pos:pos + clen], size)


ALGORITHMS = {0: "TOKEN", 1: "LEAKY", 2: "GCRA", 3: "FIXED", 4: "SLIDING"}


def decode_policy_state(dump):
    """A policy key's DUMP: [(algorithm, params, state)] per limit, from
    the FG.PLSTATE payload (src/module/policy_types.c: version, name length,
    name; src/core/policy.c: version 2, nlimits with 0x80 when the penalty's
    integers follow, then per limit its algorithm byte and little-endian
    int64 params and state)."""
    payload = module_string(dump)
    assert payload[0] == 1, payload
    state = payload[2 + payload[1]:]
    assert state[0] == 2, state
    out, pos = [], 2
    for _ in range(state[1] & 0x7F):
        algo = ALGORITHMS[state[pos]]
        words = 2 + {"FIXED": 2, "SLIDING": 3}.get(algo, 1)
        values = struct.unpack_from("<%dq" % words, state, pos + 1)
        pos += 1 + 8 * words
        out.append((algo, values[:2], values[2:]))
    return out


def policy_observation(limits, dump):
    """Per limit, the state in state_violations' terms."""
    if dump is None:
        return [None] * len(limits)
    decoded = decode_policy_state(dump)
    assert [d[0] for d in decoded] == [lim.algo for lim in limits], decoded
    out = []
    for lim, (algo, params, st) in zip(limits, decoded):
        if algo == "TOKEN":
            assert params == (lim.t_ns, lim.n), params
            out.append(st[0])
        else:
            assert params == (lim.n, lim.w), params
            out.append(st)
    return out


class Run:
    """What the clients saw: per key the admitted requests, the denied
    waiters, the deciders of denials, the answers, the state readings."""

    def __init__(self):
        self.admits = defaultdict(list)
        self.waiter_denials = []
        self.deciders = Counter()
        self.allowed = self.denied = self.waits = 0
        self.readings = []   # (lo, hi, {key: [observation per limit]})
        self.errors = []
        self.lock = threading.Lock()

    def record(self, key, cost, lo, hi, reply, waited=False):
        with self.lock:
            if isinstance(reply, RespError):
                self.errors.append(str(reply))
                return
            self.waits += waited
            if reply[0] == 1:
                self.allowed += 1
                self.admits[key].append(Admit(cost, lo, hi))
                return
            self.denied += 1
            by = reply[5]
            self.deciders[by.decode() if isinstance(by, bytes) else by] += 1
            if waited:
                self.waiter_denials.append((lo, hi, reply[3]))

    def books(self, keys):
        return {k: Book(self.admits[k]) for k in keys}

    def state_violations(self, keys, limits):
        books = self.books(keys)
        out = []
        for lo, hi, seen in self.readings:
            for key in keys:
                for i, lim in enumerate(limits):
                    out += ["%s at %d: %s" % (key, lo, v)
                            for v in state_violations(lim, seen[key][i], books[key], lo, hi)]
        return out


class Crew:
    """Client threads, each with a connection of its own; what one of them
    raises fails the test at join()."""

    def __init__(self):
        self.threads, self.errors = [], []

    def start(self, port, count, body, seconds, *args):
        """count threads running body(conn, rnd, stop, *args) until
        `seconds` from now."""
        stop = time.monotonic() + seconds

        def main(seed):
            try:
                with RawClient(port, timeout=60) as conn:
                    body(conn, random.Random(seed), stop, *args)
            except Exception as e:  # noqa: BLE001 - reported by join()
                self.errors.append(repr(e))
        for seed in range(count):
            t = threading.Thread(target=main, args=(seed,), daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def join(self, timeout):
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in self.threads), "clients still running"
        assert self.errors == []


def checker(conn, rnd, stop, run, policy, keys):
    while time.monotonic() < stop:
        key, cost = rnd.choice(keys), rnd.randint(1, 3)
        t1, reply, t2 = transaction(conn, ["TIME"], ["FG.CHECK", policy, key, "COST", cost],
                                    ["TIME"])
        run.record(key, cost, us(t1), us(t2), reply)


def waiter(conn, rnd, stop, run, policy, keys):
    while time.monotonic() < stop:
        key, cost = rnd.choice(keys), rnd.randint(1, 3)
        t1, reply, t2 = pipeline(conn, ["TIME"], ["FG.CHECK", policy, key, "COST", cost,
                                                  "WAIT", WAIT_MS], ["TIME"])
        run.record(key, cost, us(t1), us(t2), reply, waited=True)


class Monitor:
    """Reads every key's state at one instant, every MONITOR_EVERY_S, with
    read(conn) -> (lo, hi, {key: observation})."""

    def __init__(self, port, run, read):
        self.run, self.read = run, read
        self.conn = RawClient(port, timeout=60)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        try:
            while not self.stopping.wait(MONITOR_EVERY_S):
                self.run.readings.append(self.read(self.conn))
        except Exception as e:  # noqa: BLE001 - fails the test through run.errors
            self.run.errors.append("monitor: %r" % e)

    def stop(self):
        """Stops, then takes one last reading."""
        self.stopping.set()
        self.thread.join(10)
        self.run.readings.append(self.read(self.conn))
        self.conn.close()


def policy_reader(limits, keys):
    def read(conn):
        replies = transaction(conn, ["TIME"], *[["DUMP", k] for k in keys], ["TIME"])
        seen = {k: policy_observation(limits, d) for k, d in zip(keys, replies[1:-1])}
        return us(replies[0]), us(replies[-1]), seen
    return read


def counters(c, name):
    rep = c.execute_command("FG.POLICY", "GET", name)
    d = dict(zip([x.decode() for x in rep[0::2]], rep[1::2]))
    return {k: int(d[k]) for k in ("allowed", "denied", "banned", "shadow_denied", "waited")}


@pytest.fixture
def policy(r):
    """A fresh policy name on the session server, deleted afterwards."""
    name = "conc.%d" % (time.time_ns() // 1000)
    yield name
    r.execute_command("FG.POLICY", "DEL", name)


def hammer(server, r, name, limits, seconds, checkers, waiters):
    r.execute_command("FG.POLICY", "SET", name, *[w for lim in limits for w in lim.words()])
    keys = ["%s:%d" % (name, k) for k in range(3)]
    run = Run()
    monitor = Monitor(server.port, run, policy_reader(limits, keys))
    crew = Crew().start(server.port, checkers, checker, seconds, run, name, keys)
    crew.start(server.port, waiters, waiter, seconds, run, name, keys)
    crew.join(seconds + WAIT_MS / 1000 + 30)
    monitor.stop()
    return run, keys


def assert_consistent(run, keys, limits, c, name):
    assert run.errors == []
    books = run.books(keys)
    assert excess(books, limits) == []
    assert run.state_violations(keys, limits) == []
    assert waiter_violations(run.waiter_denials, WAIT_MS) == []
    got = counters(c, name)
    assert (got["allowed"], got["denied"], got["banned"], got["shadow_denied"]) == \
        (run.allowed, run.denied, 0, 0)
    assert got["waited"] <= run.waits
    # the scenario did what it is for: much denied, by more than one limit,
    # and the monitor saw the states all along
    assert sum(len(b.a) for b in books.values()) >= 50, run.allowed
    assert len([d for d in run.deciders if d.startswith("limit:")]) >= 2, run.deciders
    assert len(run.readings) >= 20
    return got


# --------------------------------------------------------------------------
# the tests

def test_many_clients_never_exceed_and_charge_all_or_nothing(server, r, policy):
    run, keys = hammer(server, r, policy, LIMITS, 6, checkers=8, waiters=0)
    assert_consistent(run, keys, LIMITS, r, policy)
    assert run.denied > 10 * run.allowed


def test_waiters_among_checkers(server, r, policy):
    run, keys = hammer(server, r, policy, LIMITS, 5, checkers=4, waiters=8)
    got = assert_consistent(run, keys, LIMITS, r, policy)
    assert got["waited"] > 0
    # some waiters were let through after waiting, not only at once
    waited_long = [a for k in keys for a in run.admits[k] if a.hi - a.lo > 20_000]
    assert waited_long, "no waiter was allowed after waiting"


# -- the checks catch clients that charge limits one after the other

BROKEN = LIMITS[:2]   # the bucket and the fixed window


def non_atomic_client(conn, rnd, stop, run, keys, first):
    """FG.TOKEN and FG.FIXED with the numbers of BROKEN on two keys, the
    second only when the first allowed: what a policy must not be."""
    order = sorted(BROKEN, key=lambda lim: lim.algo != first)
    while time.monotonic() < stop:
        key, cost = rnd.choice(keys), rnd.randint(1, 3)
        lo = hi = None
        allowed = True
        for lim in order:
            cmd = ["FG." + lim.algo, "%s:%s" % (key, lim.algo.lower()), lim.n, lim.x, "COST", cost]
            t1, reply, t2 = transaction(conn, ["TIME"], cmd, ["TIME"])
            lo, hi = lo or us(t1), us(t2)
            if reply[0] != 1:
                allowed = False
                break
        run.record(key, cost, lo, hi, [int(allowed), 0, 0, 0, 0, "limit:?", 0])


def inspect_reader(keys):
    def observe(raw, algo):
        if raw is None:
            return None
        d = dict(zip([x.decode() for x in raw[0::2]], raw[1::2]))
        return d["tat_ns"] if algo == "TOKEN" else (d["window_start_us"], d["count"])

    def read(conn):
        cmds = [["FG.INSPECT", "%s:%s" % (k, lim.algo.lower())] for k in keys for lim in BROKEN]
        replies = transaction(conn, ["TIME"], *cmds, ["TIME"])
        raw = iter(replies[1:-1])
        seen = {k: [observe(next(raw), lim.algo) for lim in BROKEN] for k in keys}
        return us(replies[0]), us(replies[-1]), seen
    return read


@pytest.mark.parametrize("first", ["TOKEN", "FIXED"])
def test_the_checks_catch_non_atomic_clients(server, r, first):
    keys = ["nonatomic.%s:%d" % (first, k) for k in range(3)]
    run = Run()
    monitor = Monitor(server.port, run, inspect_reader(keys))
    Crew().start(server.port, 6, non_atomic_client, 2, run, keys, first).join(30)
    monitor.stop()
    assert run.errors == [] and run.allowed > 20
    # the limits are respected...
    assert excess(run.books(keys), BROKEN) == []
    # ...but the limit asked first was charged for requests the other denied,
    # and only that one
    found = run.state_violations(keys, BROKEN)
    assert found, "charging one limit after the other went unnoticed"
    assert all(("%r:" % BROKEN[0 if first == "TOKEN" else 1]) in v and "charged more" in v
               for v in found), found[:5]


# -- shadow mode

SHADOW_RULES = ["LIMIT", "TOKEN", "10", "20", "LIMIT", "FIXED", "15", "1000",
                "LIMIT", "SLIDING", "30", "2000", "PENALTY", "300", "AFTER", "15", "WITHIN", "500"]


def as_text(reply):
    return [x.decode() if isinstance(x, bytes) else x for x in reply]


def shadow_client(conn, rnd, stop, log, keys):
    while time.monotonic() < stop:
        key, cost = rnd.choice(keys), rnd.randint(1, 3)
        at = time.time_ns() // 1000
        reply, seq = transaction(conn, ["FG.CHECK", "shadow", key, "COST", cost, "AT", at],
                                 ["INCR", "shadow:seq"])
        log.append((seq, key, cost, at, reply))


def test_shadow_flags_are_the_denials_of_an_enforcing_twin(timed, t):
    """Concurrent clients on a SHADOW policy (stamped AT their own clock, so
    arrivals come out of time order too); the server's order, replayed on
    the same rules without SHADOW, denies exactly what was flagged."""
    t.execute_command("FG.POLICY", "SET", "shadow", *SHADOW_RULES, "SHADOW")
    t.execute_command("FG.POLICY", "SET", "twin", *SHADOW_RULES)
    try:
        keys = ["s%d" % k for k in range(3)]
        log = []
        Crew().start(timed.port, 6, shadow_client, 2, log, keys).join(30)
        log.sort()
        assert [x[0] for x in log] == list(range(1, len(log) + 1))
        # the twin, in the server's order, on one connection (pipelined)
        with RawClient(timed.port, timeout=60) as conn:
            twin = []
            for i in range(0, len(log), 500):
                twin += pipeline(conn, *[["FG.CHECK", "twin", "twin:" + key, "COST", cost, "AT", at]
                                         for _, key, cost, at, _ in log[i:i + 500]])
        flagged = 0
        for (seq, _, _, _, sh), tw in zip(log, twin):
            sh, tw = as_text(sh), as_text(tw)
            assert sh[0] == 1 and sh[3] == -1, (seq, sh)
            assert sh[6] == 1 - tw[0], (seq, sh, tw)
            assert sh[1:3] + sh[4:6] == tw[1:3] + tw[4:6], (seq, sh, tw)
            flagged += sh[6]
        sh_c, tw_c = counters(t, "shadow"), counters(t, "twin")
        assert sh_c == dict(allowed=len(log), denied=0, banned=tw_c["banned"],
                            shadow_denied=flagged, waited=0)
        assert tw_c["denied"] == flagged and tw_c["allowed"] == len(log) - flagged
        # both sides of the flag, and the penalty box, were exercised
        assert 0 < flagged < len(log) and tw_c["banned"] > 0, (flagged, len(log), tw_c)
    finally:
        t.execute_command("FG.POLICY", "DEL", "shadow")
        t.execute_command("FG.POLICY", "DEL", "twin")


# -- libfloodgate's threads: mem: and a server

DRIVER_WAIT_MS = 1000


def hammer_driver(url, name, seconds, checkers, waiters):
    argv = [program("policy_hammer"), url, name, str(seconds), str(checkers), str(waiters),
            str(DRIVER_WAIT_MS), "6000"] + [lim.rule() for lim in LIMITS]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    parsed = defaultdict(list)
    for line in out.stdout.splitlines():
        word, *rest = line.split()
        parsed[word].append([int(x) for x in rest])
    return parsed


@pytest.mark.parametrize("backend", ["mem", "server", "stock"])
def test_threads_of_one_client(server, backend):
    name = "hammer.%s.%d" % (backend, time.time_ns() // 1000)
    url = {"mem": "mem:", "server": "redis://127.0.0.1:%d" % server.port}.get(backend) or \
        target(backend).url
    try:
        got = hammer_driver(url, name, 2.7, checkers=6, waiters=2)
    finally:
        if backend == "server":
            c = server.client()
            c.execute_command("FG.POLICY", "DEL", name)
            c.close()
    admits = defaultdict(list)
    for key, cost, lo, hi, _ in got["admit"]:
        admits[key].append(Admit(cost, lo, hi))
    books = {k: Book(admits[k]) for k in range(3)}
    assert excess({str(k): b for k, b in books.items()}, LIMITS) == []
    denials = [(lo, hi, retry) for _, _, lo, hi, retry in got["waitdeny"]]
    assert waiter_violations(denials, DRIVER_WAIT_MS) == []
    # the read-back: each limit's remaining units, as the admitted requests
    # alone make them
    assert len(got["peek"]) == 3 * len(LIMITS)
    wrong = []
    for index, key, lo, hi, remaining in got["peek"]:
        lim = LIMITS[index - 1]
        expected = remaining_range(lim, books[key], lo, hi)
        if expected is not None and not expected[0] <= remaining <= expected[1]:
            wrong.append((lim, key, remaining, expected))
    assert wrong == []
    (allowed, denied, waiters), = got["replies"]
    (c_allowed, c_denied, c_waited, c_shadow, c_banned), = got["counters"]
    assert allowed == len(got["admit"])
    if backend == "stock":  # the scripts count nothing (docs/scripts.md)
        assert (c_allowed, c_denied, c_waited, c_shadow, c_banned) == (0, 0, 0, 0, 0)
    else:
        assert (c_allowed, c_denied, c_shadow, c_banned) == (allowed, denied, 0, 0)
        assert 0 < c_waited <= waiters
    (deciders,) = got["deciders"]
    assert sum(1 for n in deciders if n > 0) >= 2, deciders
    assert sum(len(b.a) for b in books.values()) >= 50

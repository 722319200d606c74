"""The script backend against the module: src/scripts/ratelimit.lua on a
stock server must answer every rate-limit command exactly as floodgate.so
does (docs/commands.md), errors included.

For each family a seeded random walk (reproducible: the seed is the
family's name) drives both servers with the same commands at explicit
times: parameters at and beyond their bounds, costs 0, 1, the limit, one
more and 2^63 - 1, times that advance, stand still, step back and land on
window ends, retry and reset points, AT from 0 to its maximum: STEPS steps
per family, after every refusal of its commands once. After every step the
replies must be equal (a script cannot reply an integer above 2^53: it
replies the decimal string, read here as the integer), and so must the
key's FG.INSPECT, its type and its expiry; every key of the stock server
must have an expiry. test_edges adds the sequences a walk meets only by
chance.

The expiries count from each server's own clock (t_ratelimit.c's
expiry_ms: the TTL is the state's life after AT), so the two may differ by
the time between the two servers' calls of the step that wrote them: that
time, measured, is the tolerance. GCRA's expiry is the TAT's and is
compared exactly. CL.THROTTLE has no AT: its walk only compares what the
clock does not change (see test_throttle).

Where the script backend answers otherwise on purpose (ratelimit.lua's
top): FG.INSPECT and FG.RESET tell a bucket's decimal TAT from GCRA's by
its length, so a bucket TAT below 10^17 ns (AT before 1973) is WRONGTYPE
to them, and a GCRA TAT of 18 or more digits (past the year 5138) is a
bucket's; bucket checks and GCRA do not refuse each other's strings.
"""

import os
import random
import time

import pytest

import harness
from harness import RawClient, RespError

I64 = 2 ** 63 - 1
EXACT = 2 ** 53
MAX_AT = I64 // 1000
T0 = harness.T0
# GCRA's key expires at its TAT, in the server's time: a base time ahead
# of any clock this test will meet keeps its keys alive.
GCRA_T0 = 4_000_000_000_000_000
STEPS = 500
# A key whose expiry is nearer than this is waited out before the next
# step, so that it never expires between the two servers' calls.
MARGIN_MS = 50
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
# The module's types, and what the script keeps instead.
SCRIPT_TYPE = {b"fg-bucket": b"string", b"fg-fixwin": b"string", b"fg-sliwin": b"string",
               b"fg-slilog": b"zset"}


def now_ms():
    return time.time_ns() // 1_000_000


def same(m, s):
    """The module's reply m and the script's s are the same: equal, but for
    the script's decimal string of an integer beyond 2^53."""
    if isinstance(m, RespError) or isinstance(s, RespError):
        return isinstance(m, RespError) and isinstance(s, RespError) and str(m) == str(s)
    if isinstance(m, list):
        return isinstance(s, list) and len(m) == len(s) and all(map(same, m, s))
    if isinstance(m, int) and isinstance(s, bytes) and abs(m) >= EXACT:
        return s == str(m).encode()
    return type(m) is type(s) and m == s


def fields(reply):
    """FG.INSPECT's flat pairs as a dict."""
    return dict(zip(reply[0::2], reply[1::2]))


def as_int(v):
    return int(v) if isinstance(v, bytes) else v


def window_us(ms):
    """params.c: round(ms * 1000), halves away from zero."""
    x = float(ms) * 1000
    r = int(x)
    return r + 1 if x - r >= 0.5 else r


class Pair:
    """The module server and the stock one, called together."""

    def __init__(self, module, stock):
        self.m = RawClient(module.port)
        self.s = RawClient(stock.port)
        self.sha = self.s.execute("SCRIPT", "LOAD", harness.built_script("ratelimit")).decode()
        self.expiry = {}  # key -> (module's, script's) PEXPIRETIME last read
        self.tolerance = {}  # key -> ms their expiries may differ by
        self.log = []  # the walk so far, for a failure's message
        self.took = 0  # ms the last command took on both

    def raw(self, m_args, s_args):
        """Both replies, and how long the two calls took (ms, rounded up)."""
        start = time.time_ns()
        self.m.sock.sendall(RawClient.encode(m_args))
        self.s.sock.sendall(RawClient.encode(s_args))
        a, b = self.m.read_reply(), self.s.read_reply()
        return a, b, (time.time_ns() - start) // 1_000_000 + 1

    def script_args(self, args):
        args = [str(a) for a in args]
        at_key = 2 if args[0].upper() in ("FG.PEEK", "FG.REFUND") else 1
        rest = args[1:at_key] + args[at_key + 1:]
        return ["EVALSHA", self.sha, 1, args[at_key], args[0]] + rest

    def fail(self, what, m, s):
        walk = "\n".join(self.log[-12:])
        pytest.fail("%s\n  module: %r\n  script: %r\nlast steps:\n%s" % (what, m, s, walk))

    def command(self, *args):
        """A floodgate command on both: the module's reply (asserted equal)."""
        self.log.append(" ".join(map(str, args)))
        m, s, took = self.raw([str(a) for a in args], self.script_args(args))
        if not same(m, s):
            self.fail("replies differ", m, s)
        self.took = took
        return m

    def read(self, *args):
        """A plain command on both: (module's reply, script server's)."""
        m, s, _ = self.raw(list(args), list(args))
        return m, s

    def wait_out(self, key):
        """Waits until a key about to expire has expired on both."""
        if key not in self.expiry:
            return
        live = [e for e in self.expiry[key] if e >= 0]
        if live and min(live) < now_ms() + MARGIN_MS:
            delay = max(live) + 2 - now_ms()
            if delay > 0:
                time.sleep(delay / 1000)

    def settle(self, key, exact=False):
        """After a step: the key's expiry and type agree, and every key of
        the stock server has an expiry. A key about to expire is waited
        out, so that the next commands find it on neither server."""
        m_exp, s_exp = self.read("PEXPIRETIME", key)
        if self.expiry.get(key) != (m_exp, s_exp):
            self.tolerance[key] = 0 if exact else self.took
        tolerance = self.tolerance.get(key, 0)
        if m_exp == -1 or s_exp == -1:
            self.fail("a key without expiry", m_exp, s_exp)
        if (m_exp < 0) != (s_exp < 0):
            # gone on one side: it must be expiring on the other
            if max(m_exp, s_exp) > now_ms() + tolerance + 1:
                self.fail("one key is gone, the other expires later", m_exp, s_exp)
        elif m_exp >= 0 and abs(m_exp - s_exp) > tolerance:
            self.fail("expiries differ by more than %d ms" % tolerance, m_exp, s_exp)
        self.expiry[key] = (m_exp, s_exp)
        self.wait_out(key)
        m_type, s_type = self.read("TYPE", key)
        if SCRIPT_TYPE.get(m_type, m_type) != s_type:
            self.fail("types differ", m_type, s_type)
        if m_type == b"none":
            self.expiry[key] = (-2, -2)
        for k in self.s.execute("KEYS", "*"):
            if self.s.execute("PTTL", k) == -1:
                self.fail("a key of the stock server without expiry", k, None)

    def inspect(self, key):
        """FG.INSPECT on both, equal but for pttl (within the expiries'
        tolerance) and the documented bucket/GCRA cases; the module's
        fields, None when absent or refused."""
        self.log.append("FG.INSPECT " + key)
        m, s, took = self.raw(["FG.INSPECT", key], self.script_args(["FG.INSPECT", key]))
        if isinstance(m, list) and m[1] == b"bucket" and m[3] < 10 ** 17:
            if not (isinstance(s, RespError) and str(s) == WRONGTYPE):
                self.fail("a bucket TAT below 10^17 is WRONGTYPE to the script", m, s)
            return fields(m)
        if isinstance(m, list) and isinstance(s, list):
            slack = self.tolerance.get(key, 0) + took
            if len(m) != len(s) or abs(m[-1] - s[-1]) > slack:
                self.fail("FG.INSPECT's pttl differs by more than %d ms" % slack, m, s)
            m, s = m[:-1], s[:-1]
        if not same(m, s):
            self.fail("FG.INSPECT differs", m, s)
        return fields(m) if isinstance(m, list) else None

    def reset(self, key, state):
        """FG.RESET on both; a bucket TAT below 10^17 stays on the stock
        server (WRONGTYPE), which is then emptied by hand."""
        self.log.append("FG.RESET " + key)
        m, s, _ = self.raw(["FG.RESET", key], self.script_args(["FG.RESET", key]))
        if m == 1 and state and state.get(b"type") == b"bucket" and state[b"tat_ns"] < 10 ** 17:
            if not (isinstance(s, RespError) and str(s) == WRONGTYPE):
                self.fail("a bucket TAT below 10^17 is WRONGTYPE to the script", m, s)
            self.s.execute("DEL", key)
        elif not same(m, s):
            self.fail("FG.RESET differs", m, s)

    def close(self):
        self.m.close()
        self.s.close()


@pytest.fixture(scope="module")
def pair():
    module = harness.Server(["--floodgate.explicit-time", "yes"])
    stock = harness.Server(module=False)
    try:
        module.start()
        stock.start()
        p = Pair(module, stock)
        yield p
        p.close()
    finally:
        module.cleanup()
        stock.cleanup()


@pytest.fixture
def fresh(pair):
    for c in (pair.m, pair.s):
        c.execute("FLUSHALL")
    pair.expiry.clear()
    pair.tolerance.clear()
    pair.log = []
    return pair


# ------------------------------------------------------------ the walks

class Clock:
    """The walk's explicit time: it advances, stands, steps back and lands
    on the instants the last answer and the state name."""

    BASES = (T0, 0, 1, 999_999, EXACT - 3_000_000, EXACT + 1, MAX_AT - 5_000_000, MAX_AT)

    def __init__(self, rng, base=T0):
        self.rng = rng
        self.t = base
        self.bases = self.BASES

    def move(self, marks):
        rng, r = self.rng, self.rng.random()
        if r < 0.15:
            pass
        elif r < 0.3:
            self.t += rng.choice((1, 2, 999, 1000, 1001))
        elif r < 0.55 and marks:
            self.t = rng.choice(marks) + rng.choice((-1, 0, 0, 1))
        elif r < 0.75:
            self.t += rng.randrange(1, 10 ** rng.randrange(1, 13))
        elif r < 0.85:
            self.t -= rng.randrange(1, 10 ** rng.randrange(1, 10))
        elif r < 0.9:
            self.t -= self.t % rng.choice((1000, 10 ** 6))  # whole ms: exact waits show
        elif r < 0.94:
            self.t = rng.choice(self.bases)
        else:
            self.t += rng.randrange(10 ** 12, 10 ** 15)
        self.t = min(max(self.t, 0), MAX_AT)
        return self.t


def answer_marks(t, reply):
    """The instants a check's reply names: its retry and reset points, and
    a millisecond before (the reply rounds up)."""
    if not isinstance(reply, list) or len(reply) != 5:
        return []
    marks = []
    for ms in reply[3:5]:
        ms = as_int(ms)
        if 0 <= ms <= 10 ** 13:
            marks += [t + ms * 1000, t + ms * 1000 - 1000]
    return marks


def pick_cost(rng, limit):
    return rng.choice((0, 1, 1, 1, 1, 2, 3, limit, limit - 1, limit + 1,
                       rng.randrange(0, limit + 2), EXACT, EXACT + 1, I64))


# Inputs every check refuses, after its parameters (the module's texts).
BAD_OPTIONS = (
    ["COST"], ["AT"], ["COST", "-1"], ["COST", "1.5"], ["COST", str(I64 + 1)],
    ["AT", "-1"], ["AT", str(MAX_AT + 1)], ["AT", "x"], ["NOPE", "1"], ["COST", "1", "AT"],
    ["cost", "01"], ["at", " 1"],
)


class Walk:
    """A family's walk: its checks, peeks, refunds and resets, refusals and
    other families' commands on its key. A family's walk gives
    new_params(), limit(params), bad_inputs() (parameters refused before
    the key is read) and state_marks() (instants its state names)."""

    # Commands not sent to this walk's key (see BucketWalk).
    not_crossed = ()

    def __init__(self, pair, rng, name, family):
        self.pair, self.rng, self.name, self.family = pair, rng, name, family
        self.key = "k:" + name
        self.clock = Clock(rng)
        self.state = None  # the key's FG.INSPECT fields after the last step

    def run(self, steps=STEPS):
        p, rng, key = self.pair, self.rng, self.key
        self.params = self.new_params()
        self.sweep()
        marks = []
        for _ in range(steps):
            p.wait_out(key)
            t = self.clock.move(marks + self.state_marks())
            params, limit, r = self.params, self.limit(self.params), rng.random()
            if r < 0.5:
                reply = p.command(self.name, key, *params, "COST", pick_cost(rng, limit), "AT", t)
                marks = answer_marks(t, reply)
            elif r < 0.6:
                cost = pick_cost(rng, limit)
                reply = p.command("FG.PEEK", self.family, key, *params, "COST", cost, "AT", t)
                marks = answer_marks(t, reply)
            elif r < 0.68:
                p.command("FG.REFUND", self.family, key, *params, "COST", pick_cost(rng, limit),
                          "AT", t)
            elif r < 0.7:
                p.reset(key, self.state)
            elif r < 0.8:
                self.params = self.new_params()
            elif r < 0.9:
                self.refused(params, t)
            else:
                self.cross(params, t)
            p.settle(key)
            self.state = p.inspect(key)

    def refusals(self, params, t):
        """Every command this walk sends that the module refuses before
        it reads the key: bad parameters and options, too few arguments,
        families FG.PEEK and FG.REFUND do not take."""
        key, name, family, short = self.key, self.name, self.family, range(len(params))
        return [(name, key, *bad, "AT", t) for bad in self.bad_inputs()] + \
            [(name, key, *params, *bad) for bad in BAD_OPTIONS] + \
            [(name, key, *params[:n]) for n in short] + \
            [("FG.PEEK", f, key, *params[:n])
             for f in (family, "THROTTLE", "NOPE") for n in short] + \
            [("FG.PEEK", f, key, *params) for f in ("THROTTLE", "NOPE")] + \
            [("FG.REFUND", f, key, *params[:n])
             for f in (family, "SLIDING", "NOPE") for n in short] + \
            [("FG.REFUND", f, key, *params, "AT", t)
             for f in ("SLIDING", "SLIDELOG", "THROTTLE")] + \
            [("FG.RESET", key, "extra"), ("FG.INSPECT", key, "extra")]

    def sweep(self):
        """Each refusal once, so that none is left to chance."""
        for command in self.refusals(self.params, T0):
            if not isinstance(self.pair.command(*command), RespError):
                self.pair.fail("not refused", command, None)

    def refused(self, params, t):
        self.pair.command(*self.rng.choice(self.refusals(params, t)))

    def cross(self, params, t):
        """Another family's command on this key, while it holds a state:
        WRONGTYPE, as the module answers (or its answer, for a family of
        the same kind). Not on an empty key: GCRA and CL.THROTTLE would
        make one, the latter at the server's time."""
        rng, p, key = self.rng, self.pair, self.key
        if p.read("EXISTS", key) != (1, 1):
            return
        name, args = rng.choice([c for c in CROSS if c[0] not in self.not_crossed])
        if name in ("FG.PEEK", "FG.REFUND"):
            p.command(name, args[0], key, *args[1:], "AT", t)
        elif name == "CL.THROTTLE":
            p.command(name, key, *args)
        else:
            p.command(name, key, *args, "AT", t)
        if p.read("TYPE", key) == (b"string", b"string"):
            # GCRA took a key that had expired by AT: its string would
            # outlive the walk
            p.read("DEL", key)


CROSS = (
    ("FG.TOKEN", ["10", "1"]), ("FG.LEAKY", ["10", "1"]), ("FG.GCRA", ["10", "1", "1000"]),
    ("FG.FIXED", ["10", "1000"]), ("FG.SLIDING", ["10", "1000"]),
    ("FG.SLIDELOG", ["10", "1000"]), ("CL.THROTTLE", ["10", "1", "1"]),
    ("GCRA", ["10", "1", "1"]), ("FG.PEEK", ["FIXED", "10", "1000"]),
    ("FG.REFUND", ["FIXED", "10", "1000"]), ("FG.PEEK", ["SLIDELOG", "10", "1000"]),
)


# ------------------------------------------------------------ windows

WINDOW_MS = ("0.001", "0.0005", "0.0015", "0.0025", "1", "1.2345", "10", "1000", "60000",
             "3600000", "86400000", "1e12", "999999999999.9999", "0.5", "2.5e-3", "7", "+5e-4")
BAD_WINDOW_MS = ("0", "-1", "0.0004", "0.00049999", "1.0000000001e12", "abc", "", "inf",
                 "nan", "0x10", "1e400", " 1", "1 ", "1..0", "1e", "+4e-4")
BAD_LIMITS = ("0", "-1", "1.5", "abc", "", str(I64 + 1), "01", "+1", "-0")
WINDOWS_US = [window_us(ms) for ms in WINDOW_MS]


class WindowWalk(Walk):
    LIMITS = (1, 2, 3, 5, 10, 1000, 2 ** 31, EXACT - 1, EXACT, EXACT + 1, 2 ** 62, I64)
    MAX_LIMIT = I64

    def new_params(self):
        rng = self.rng
        limit = rng.choice(self.LIMITS) if rng.random() < 0.8 else rng.randrange(1, 50)
        return [str(limit), rng.choice(WINDOW_MS)]

    def limit(self, params):
        return int(params[0])

    def bad_inputs(self):
        return [[l, "1000"] for l in BAD_LIMITS + (str(self.MAX_LIMIT + 1),)] + \
               [["10", w] for w in BAD_WINDOW_MS] + [["abc", "abc"], ["0", "0"]]

    def state_marks(self):
        """The window ends of the state and of the walk's windows, where
        counts roll over, and for the sliding window the first instants
        at which a denied request would fit."""
        t, marks = self.clock.t, []
        for w in [window_us(self.params[1])] + self.rng.sample(WINDOWS_US, 2):
            marks += [t - t % w + w, t - t % w + 2 * w]
        st = self.state
        if st and b"window_start_us" in st:
            start = as_int(st[b"window_start_us"])
            marks += [start + w for w in self.rng.sample(WINDOWS_US, 3)]
            if b"prev_count" in st:
                marks += sliding_fits_at(start, as_int(st[b"count"]), as_int(st[b"prev_count"]),
                                         self.limit(self.params), window_us(self.params[1]), t)
        return marks


def sliding_fits_at(start, count, prev, limit, w, t):
    """sliding_window.c's sliding_wait_us for costs 1, 2 and the limit: when
    a request would fit, later in the current window or in the next."""
    aligned = t - t % w
    stored = start - start % w if start > 0 else start
    if stored < aligned - w:
        return []
    if stored < aligned:
        count, prev = 0, count
    marks, begin = [], max(stored, aligned)
    for cost in (1, 2, limit):
        free = limit - count - cost
        if free >= 0 and prev > 0 and free * w // prev < w:
            marks.append(begin + w - free * w // prev)
        if count > 0 and limit >= cost:
            marks.append(begin + w + max(w - (limit - cost) * w // count, 0))
    return marks


class SlidelogWalk(WindowWalk):
    LIMITS = (1, 2, 3, 5, 10, 100, 1000, 99999, 100000)
    MAX_LIMIT = 100000

    def new_params(self):
        params = super().new_params()
        if int(params[0]) >= 1000 and self.rng.random() < 0.7:
            params[0] = str(self.rng.randrange(1, 20))  # big logs, but not always
        return params

    def state_marks(self):
        """Where the log's entries leave the window."""
        marks = super().state_marks()
        st = self.state
        if st and b"entries" in st:
            stamps = [as_int(v) for v in st[b"entries"][0::2]]
            for ts in self.rng.sample(stamps, min(3, len(stamps))):
                marks += [ts + w for w in [window_us(self.params[1])] +
                          self.rng.sample(WINDOWS_US, 2)]
        return marks


# ------------------------------------------------------------ buckets

CAPACITIES = (1, 2, 3, 10, 100, 10 ** 6)
HUGE_CAPACITIES = (EXACT - 1, EXACT + 1, 2 ** 62, I64)  # mostly overflow with T


def capacity(rng):
    return str(rng.choice(HUGE_CAPACITIES if rng.random() < 0.2 else CAPACITIES))


RATES = ("1", "2", "0.5", "3.7", "1000", "1e6", "1e9", "999999999.9", "0.001",
         "2.1684043449710089e-10", "2.17e-10", "1e-9", "7")
BAD_RATES = ("0", "-1", "1e9.5", "1000000001", "2.1684e-10", "1e-10", "abc", "inf", "nan",
             "0x10", "")


class BucketWalk(Walk):
    # CL.THROTTLE reads a bucket at the server's time; a bucket's TAT and
    # GCRA's are not told apart by the checks (the top of this file).
    not_crossed = ("CL.THROTTLE", "GCRA")

    def new_params(self):
        rng = self.rng
        return [capacity(rng), rng.choice(RATES)]

    def limit(self, params):
        return int(params[0])

    def bad_inputs(self):
        return [[c, "1"] for c in BAD_LIMITS] + [["10", r] for r in BAD_RATES]

    def emission_ns(self):
        """params.c's fg_param_bucket: 1e9 / rate, to the nearest ns."""
        ns = 1e9 / float(self.params[1])
        return 1 if ns < 1 else int(ns + 0.5)

    def state_marks(self):
        """The TAT, and the first instants at which 1 or 2 units fit."""
        st = self.state
        if not st or b"tat_ns" not in st:
            return []
        tat, interval, cap = as_int(st[b"tat_ns"]), self.emission_ns(), int(self.params[0])
        return [tat // 1000, -(-tat // 1000)] + \
            [-(-(tat + interval * (cost - cap)) // 1000) for cost in (1, 2)]


class GcraWalk(BucketWalk):
    COUNTS = ("1", "10", "0.5", "3", "1e18", "1e9", "7.5", "1e12")
    PERIODS = ("1", "1000", "0.001", "1e12", "60000", "1e-6", "0.0000005", "3.3")

    def new_params(self):
        rng = self.rng
        if rng.random() < 0.7:
            return [capacity(rng), rng.choice(("1", "10", "3", "7.5")),
                    rng.choice(("1", "1000", "60000", "3.3"))]
        return [capacity(rng), rng.choice(self.COUNTS), rng.choice(self.PERIODS)]

    def emission_ns(self):
        """params.c's fg_param_gcra: period_ms * 1e6 / count, the nearest."""
        return int(float(self.params[2]) * 1e6 / float(self.params[1]) + 0.5)

    def bad_inputs(self):
        return [[c, "1", "1000"] for c in BAD_LIMITS] + \
               [["10", c, "1000"] for c in ("0", "-1", "1e19", "abc", "inf")] + \
               [["10", "1", m] for m in ("0", "-1", "1e13", "abc", "nan")] + \
               [["10", "1e18", "1e-6"], ["10", "1e-9", "1e12"], ["10", "3e17", "0.1"]]


# ------------------------------------------------------------ the tests

def test_fixed(fresh):
    WindowWalk(fresh, random.Random("FG.FIXED"), "FG.FIXED", "FIXED").run()


def test_sliding(fresh):
    WindowWalk(fresh, random.Random("FG.SLIDING"), "FG.SLIDING", "SLIDING").run()


def test_slidelog(fresh):
    SlidelogWalk(fresh, random.Random("FG.SLIDELOG"), "FG.SLIDELOG", "SLIDELOG").run()


def test_token(fresh):
    BucketWalk(fresh, random.Random("FG.TOKEN"), "FG.TOKEN", "TOKEN").run()


def test_leaky(fresh):
    BucketWalk(fresh, random.Random("FG.LEAKY"), "FG.LEAKY", "LEAKY").run()


def test_fg_gcra(fresh):
    GcraWalk(fresh, random.Random("FG.GCRA"), "FG.GCRA", "GCRA").run()


# ------------------------------------------------------------ GCRA

GCRA_BURSTS = (0, 1, 5, 100, EXACT, I64 - 1, I64)
GCRA_PER_PERIOD = (1, 2, 3, 10, 1000, 10 ** 6, 10 ** 7, I64)
GCRA_PERIODS = ("1", "2", "0.5", "60", "3.3", "0.000001", "999999999999", "1e11",
                "0.0000001", "0x10", "1e-320", "3600", "+2", "1.5e1")
# Refused before the key is read, or (the last two, "T" the walk's time)
# by the arithmetic.
GCRA_BAD = (
    ["-1", "10", "1"], ["abc", "10", "1"], ["1.5", "10", "1"], [str(I64 + 1), "10", "1"],
    ["1", "0", "1"], ["1", "-1", "1"], ["1", "x", "1"], ["1", "10", "0"], ["1", "10", "-1"],
    ["1", "10", "1e12"], ["1", "10", "abc"], ["1", "10", "nan"], ["1", "10", "-inf"],
    ["1", "10", " 1"], ["1", "10", "1 "], ["1", "10", "1e400"], ["1", "10", "1e-400"],
    ["1", "10", ""], ["1", "10", "0x"], ["1", "10", "1", "TOKENS"],
    ["1", "10", "1", "TOKEN", "1"], ["1", "10", "1", "TOKENS", "0"],
    ["1", "10", "1", "TOKENS", "x"], ["1", "10", "1", "TOKENS", "1", "x"], ["1", "10"], [],
    ["1", "10", "1", "AT", "-1"], ["1", "10", "1", "AT", "x"],
    ["1", "10", "1", "AT", str(MAX_AT + 1)], ["1", "10", "1", "TOKENS", "AT", "5"],
    ["1", "10", "1", "TOKENS", "2", "AT", "1", "AT", "2"], ["1", "10", "1", "at", "5", "at", "5"],
    [str(I64), "1", "1", "AT", "T"], ["1", "1", "999999999999", "TOKENS", str(I64), "AT", "T"],
)


def bucket_like(value):
    """Whether FG.INSPECT and FG.RESET take a string for a bucket's TAT on
    the script backend (18 or 19 digits, within int64); the module refuses
    every string."""
    return isinstance(value, bytes) and len(value) >= 18 and value.isdigit() \
        and value[:1] != b"0" and int(value) <= I64


# What else a client may leave in the key (each with an expiry).
FOREIGN = (b"abc", b"0", b"-5", b"12abc", b"00123", b" 123", b"f1:5:1", b"1", b"1e3")


class GcraCommandWalk:
    """GCRA's walk: its decisions at explicit times (the clock truncated to
    the millisecond, keys expired by AT absent), its state compared as it
    is, a string and its PXAT."""

    def __init__(self, pair, rng):
        self.pair, self.rng, self.key = pair, rng, "k:GCRA"
        self.clock = Clock(rng, GCRA_T0)
        self.clock.bases = (GCRA_T0, 0, T0, MAX_AT - 5_000_000, MAX_AT)

    def new_params(self):
        rng = self.rng
        burst = rng.choice(GCRA_BURSTS) if rng.random() < 0.3 else rng.randrange(10)
        return [str(burst), str(rng.choice(GCRA_PER_PERIOD)), rng.choice(GCRA_PERIODS)]

    def marks(self, t, reply, params):
        """The reply's retry and reset instants; the state's TAT, the
        instant one token fits, and its expiry, a millisecond either side."""
        marks = []
        if isinstance(reply, list):
            marks += [t + s * 1_000_000 for s in reply[3:5] if 0 <= s < 10 ** 10]
        m, _ = self.pair.read("GET", self.key)
        if isinstance(m, bytes) and m.isdigit():
            tat = int(m)
            expiry_us = -(-tat // 1000) * 1000
            marks += [tat, tat - 1000, expiry_us, expiry_us + 1000]
            # gcra_compat.c's T; the first instant a token fits is then
            # tat + T - T * capacity
            period = float.fromhex(params[2]) if "x" in params[2] else float(params[2])
            interval = max(int(period * 1e6 / float(params[1]) + 0.5), 1)
            fits = tat + interval * (1 - min(int(params[0]) + 1, I64))
            marks += [fits, fits + 1000]
        return marks

    def run(self, steps=STEPS):
        p, rng, key = self.pair, self.rng, self.key
        params, marks = self.new_params(), []
        for bad in GCRA_BAD:  # each once, then at random
            command = ["GCRA", key, *[str(GCRA_T0) if a == "T" else a for a in bad]]
            if not isinstance(p.command(*command), RespError):
                p.fail("not refused", command, None)
        for value in FOREIGN + (None,):
            self.foreign(["1", "10", "1"], GCRA_T0, value)
        for _ in range(steps):
            p.wait_out(key)
            t = self.clock.move(marks)
            r = rng.random()
            if r < 0.55:
                capacity = min(int(params[0]) + 1, I64)
                tokens = rng.choice((None, 1, 1, 2, 5, capacity, capacity + 1, I64,
                                     rng.randrange(1, 20)))
                extra = [] if tokens is None else ["TOKENS", tokens]
                marks = self.marks(t, p.command("GCRA", key, *params, *extra, "AT", t), params)
            elif r < 0.65:
                params = self.new_params()
            elif r < 0.8:
                bad = [str(t) if a == "T" else a for a in rng.choice(GCRA_BAD)]
                p.command("GCRA", key, *bad)
            elif r < 0.9:
                self.inspect_or_reset(rng.choice(("FG.INSPECT", "FG.RESET")))
            elif r < 0.95:
                if p.read("EXISTS", key) == (1, 1):
                    name, args = rng.choice([c for c in CROSS if c[0] in (
                        "FG.FIXED", "FG.SLIDING", "FG.SLIDELOG", "FG.PEEK")])
                    if name == "FG.PEEK":
                        p.command(name, args[0], key, *args[1:], "AT", t)
                    else:
                        p.command(name, key, *args, "AT", t)
            else:
                self.foreign(params, t, rng.choice(FOREIGN + (None,)))
            p.settle(key, exact=True)
            m, s = p.read("GET", key)
            if not same(m, s):
                p.fail("GCRA's states differ", m, s)

    def foreign(self, params, t, value):
        """Another client's value (None: a hash), with an expiry no AT
        reaches, as GCRA reads it; then the walk goes on from an empty key."""
        p, key = self.pair, self.key
        expire = str(MAX_AT // 1000 + 1)
        p.read("DEL", key)
        if value is None:
            p.read("HSET", key, "f", "v")
            p.read("PEXPIREAT", key, expire)
        else:
            p.read("SET", key, value, "PXAT", expire)
        args = ["GCRA", key, *params, "AT", t]
        if value is not None and value[:3] == b"f1:":
            # the script's fixed window state: WRONGTYPE, as the module's
            m, s, _ = p.raw(args, p.script_args(args))
            if str(m) != "ERR Invalid GCRA key" or str(s) != WRONGTYPE:
                p.fail("GCRA on an f1: string", m, s)
        else:
            p.command(*args)
        p.settle(key, exact=True)
        p.read("DEL", key)

    def inspect_or_reset(self, command):
        """The documented answers: a GCRA string is WRONGTYPE to the
        module; to the script, one of 18 or 19 digits is a bucket's."""
        p, key = self.pair, self.key
        value, _ = p.read("GET", key)
        if isinstance(value, bytes) and value[:3] in (b"f1:", b"s1:"):
            return  # the script's own window states
        p.log.append(command + " " + key)
        m, s, _ = p.raw([command, key], p.script_args([command, key]))
        if not bucket_like(value):
            if not same(m, s):
                p.fail(command + " differs", m, s)
        elif not (str(m) == WRONGTYPE and (s == 1 if command == "FG.RESET" else
                                           isinstance(s, list) and s[1] == b"bucket")):
            p.fail(command + ": an 18-digit GCRA TAT is a bucket's to the script", m, s)
        elif command == "FG.RESET":
            p.m.execute("DEL", key)


# Typical arguments of each check, and a cost that some calls exceed.
FAST_CASES = [("FG.TOKEN", 10, 2), ("FG.LEAKY", 10, 2), ("FG.GCRA", 10, 5, 1000),
              ("FG.FIXED", 10, 1000), ("FG.SLIDING", 10, 1000), ("FG.SLIDELOG", 10, 1000)]


@pytest.mark.parametrize("case", FAST_CASES, ids=[c[0] for c in FAST_CASES])
def test_the_fast_path_answers_what_it_is_for(fresh, case):
    """Calls in the fast range (src/scripts/fast/) are answered by the fast
    path itself, admissions and denials alike, and as the module answers
    them: the script cut after its fast path (nil where it would leave the
    call to the exact code) against the module, 40 calls of costs 0 to 4,
    40 ms apart at explicit instants."""
    sha = fresh.s.execute("SCRIPT", "LOAD", harness.fast_path_alone("ratelimit")).decode()
    rng = random.Random(case[0])
    at = T0
    for step in range(40):
        cost = rng.choice([0, 1, 1, 1, 4])
        args = [case[0], "fk"] + list(case[1:]) + ["COST", cost, "AT", at]
        m = fresh.m.execute(*map(str, args))
        s = fresh.s.execute("EVALSHA", sha, 1, "fk", case[0], *map(str, args[2:]))
        assert s is not None, ("the fast path left it to the exact code", step, args)
        assert same(m, s), (step, args, m, s)
        at += 40_000


def test_gcra_command(fresh):
    GcraCommandWalk(fresh, random.Random("GCRA")).run()


# ------------------------------------------------------------ CL.THROTTLE

THROTTLE_BURSTS = (0, 1, 4, 99, EXACT, I64 - 1)
THROTTLE_COUNTS = (1, 2, 3, 10, 10 ** 9, I64)
THROTTLE_PERIODS = (1, 2, 60, 3600, I64 // 10 ** 9)
THROTTLE_BAD = (
    ["-1", "1", "1"], [str(I64), "1", "1"], ["abc", "1", "1"], ["1", "0", "1"],
    ["1", "x", "1"], ["1", "1", "0"], ["1", "1", str(I64 // 10 ** 9 + 1)], ["1", "1", "1.5"],
    ["1", str(I64), "1"], ["1", "1", "1", "-1"], ["1", "1", "1", "x"], ["1", "1", "1", "1.5"],
    ["1", "1", "1", "1", "extra"], ["1", "1", "1", "AT"], ["1", "1"],
    [str(I64 - 1), "1", str(I64 // 10 ** 9)], [str(EXACT), "1", "3600"],
)
# redis-cell's states a key may hold: TATs (ns) in the past, which the
# clock does not change, and strings that are not one.
LEGACY = (b"1000", str(T0 * 1000).encode(), b"1796000000000000", b"0123", b"abc", b"0",
          b"", b"99999999999999999999")


def throttle_interval_ns(count, period):
    """t_ratelimit.c's parse_throttle: (double)(period * 1e9) / count,
    truncated."""
    return int(float(period * 10 ** 9) / float(count))


def test_throttle(fresh):
    """CL.THROTTLE decides at the server's time. What its replies say is
    the same on both while the time between calls stays under a second:
    the first decision of a key (it does not depend on now), and the next
    few when the emission interval is whole seconds (remaining moves by
    whole intervals, the seconds of retry and reset only after a second)."""
    p, rng, key = fresh, random.Random("CL.THROTTLE"), "k:CL.THROTTLE"
    for bad in THROTTLE_BAD:  # each once, then at random
        if not isinstance(p.command("CL.THROTTLE", key, *bad), RespError):
            p.fail("not refused", bad, None)
    for value in LEGACY:
        p.read("SET", key, value, "PXAT", now_ms() + 60000)
        p.command("CL.THROTTLE", key, 1, 1, 1, rng.choice((0, 1, 3)))
        p.read("DEL", key)
    for _ in range(300):
        p.read("DEL", key)
        p.expiry.pop(key, None)
        if rng.random() < 0.15:
            p.read("SET", key, rng.choice(LEGACY), "PXAT", now_ms() + 60000)
        if rng.random() < 0.15:
            p.command("CL.THROTTLE", key, *rng.choice(THROTTLE_BAD))
            p.settle(key)
            continue
        if rng.random() < 0.7:
            burst, count, period = rng.randrange(10), rng.choice((1, 2, 3, 10)), \
                rng.choice((1, 2, 60, 3600))
        else:
            burst, count = rng.choice(THROTTLE_BURSTS), rng.choice(THROTTLE_COUNTS)
            period = rng.choice(THROTTLE_PERIODS)
        interval = throttle_interval_ns(count, period)
        calls = 1 + rng.randrange(4) if interval % 10 ** 9 == 0 and interval > 0 else 1
        start, took = time.monotonic(), 0
        for _ in range(calls):
            if time.monotonic() - start > 0.5:
                break
            limit = burst + 1
            q = rng.choice((None, 0, 1, 2, limit, limit + 1, I64, rng.randrange(limit + 2)))
            p.command("CL.THROTTLE", key, burst, count, period, *([] if q is None else [q]))
            took = max(took, p.took)
        p.took = took  # the TATs differ by the first write's time between the servers
        p.settle(key)
        m, s, _ = p.raw(["FG.INSPECT", key], p.script_args(["FG.INSPECT", key]))
        value, _ = p.read("GET", key)
        if bucket_like(value):
            # redis-cell's string, left as it was: the script's bucket state
            if not (str(m) == WRONGTYPE and isinstance(s, list) and s[3] == value):
                p.fail("FG.INSPECT of redis-cell's string", m, s)
        elif isinstance(m, list) and m[1] == b"bucket":
            if not (isinstance(s, list) and s[:3] == m[:3] and
                    abs(as_int(s[3]) - m[3]) <= took * 10 ** 6):
                p.fail("CL.THROTTLE's TATs differ by more than %d ms" % took, m, s)
        elif not same(m, s):
            p.fail("FG.INSPECT differs", m, s)


# ------------------------------------------------------------ edges

# A decimal that strtod takes below the smallest double: ERANGE, which the
# server's reader refuses, so "must be a number"; the prelude's
# decimal_arg reads 0 ("greater than 0").
UNDERFLOWS = (
    ("FG.FIXED", "10", "1e-400"), ("FG.SLIDING", "10", "1e-400"),
    ("FG.SLIDELOG", "10", "0.1e-399"), ("FG.TOKEN", "10", "1e-400"),
    ("FG.LEAKY", "10", "1e-400"), ("FG.GCRA", "10", "1e-400", "1000"),
    ("FG.GCRA", "10", "1", "1e-400"),
)


# Regression: decimal_arg read strtod's underflow as 0, so '1e-400' was
# "out of range" where the module says "must be a number".
def test_underflow(fresh):
    for command in UNDERFLOWS:
        fresh.command(command[0], "k", *command[1:], "AT", T0)

# Sequences the walks reach only by chance, each from an empty key.
EDGES = (
    # fixed: a window start off the new window's grid (T0 is not on a
    # minute's) is moved down to it
    [("FG.FIXED", 10, 1000, "COST", 3, "AT", T0 + 1_234_567),
     ("FG.FIXED", 10, 60000, "COST", 1, "AT", T0 + 1_234_600),
     ("FG.REFUND", "FIXED", 10, 60000, "COST", 3, "AT", T0 + 1_500_000),
     ("FG.REFUND", "FIXED", 10, 60000, "COST", 2, "AT", T0 + 1_500_000)],
    # fixed: the clock stepped back behind the stored window, which stays
    [("FG.FIXED", 2, 1000, "COST", 2, "AT", T0 + 5_000_000),
     ("FG.FIXED", 2, 1000, "AT", T0 + 1_000_000),
     ("FG.REFUND", "FIXED", 2, 1000, "AT", T0 + 1_000_000)],
    # sliding: 128-bit products whose doubles would round to the same
    # value (2^62 - 1 and 2^62 + 1)
    [("FG.SLIDING", I64, 1000, "COST", 2 ** 62 + 1, "AT", T0),
     ("FG.SLIDING", I64, 1000, "COST", 2 ** 62, "AT", T0 + 10 ** 6),
     ("FG.PEEK", "SLIDING", I64, 1000, "COST", 2 ** 62 - 4611686018427, "AT", T0 + 10 ** 6 + 1),
     ("FG.SLIDING", I64, 1000, "COST", 2 ** 62, "AT", T0 + 10 ** 6 + 1),
     ("FG.PEEK", "SLIDING", I64, 1000, "COST", 0, "AT", T0 + 10 ** 6 + 333_333)],
    # sliding: waits of whole milliseconds, and a microsecond before them
    [("FG.SLIDING", 2, 1000, "COST", 2, "AT", T0),
     ("FG.SLIDING", 2, 1000, "AT", T0 + 1_250_000),
     ("FG.SLIDING", 2, 1000, "AT", T0 + 1_499_999),
     ("FG.SLIDING", 2, 1000, "AT", T0 + 1_500_000),
     ("FG.SLIDING", 2, 1000, "COST", 2, "AT", T0 + 1_500_000),
     ("FG.SLIDING", 2, 1000, "AT", T0 + 500_000)],
    # sliding: the previous window's units, stale after two windows
    [("FG.SLIDING", 3, 1, "COST", 3, "AT", EXACT - 1),
     ("FG.SLIDING", 3, 1, "AT", EXACT),
     ("FG.SLIDING", 3, 1, "COST", 3, "AT", EXACT + 1)],
    # slidelog: times on both sides of 2^53, where a score would round
    [("FG.SLIDELOG", 3, 0.002, "COST", 2, "AT", EXACT - 1),
     ("FG.SLIDELOG", 3, 0.002, "AT", EXACT),
     ("FG.SLIDELOG", 3, 0.002, "AT", EXACT + 1),
     ("FG.SLIDELOG", 3, 0.002, "AT", EXACT + 1),
     ("FG.SLIDELOG", 3, 0.002, "COST", 2, "AT", EXACT + 2)],
    # slidelog: at the last AT, then a step back: new units take the
    # newest time, numbered on
    [("FG.SLIDELOG", 5, 1e12, "COST", 2, "AT", MAX_AT),
     ("FG.SLIDELOG", 5, 1e12, "COST", 2, "AT", 0),
     ("FG.SLIDELOG", 5, 1e12, "COST", 2, "AT", 10 ** 15)],
    # buckets: a TAT at 2^63 - 1 ns
    [("FG.GCRA", 1, 1, 1e12, "AT", MAX_AT - 10 ** 15),
     ("FG.GCRA", 1, 1, 1e12, "AT", MAX_AT - 10 ** 15),
     ("FG.TOKEN", 2, 1e-9, "AT", 10 ** 9),
     ("FG.REFUND", "TOKEN", 2, 1e-9, "COST", 5, "AT", 10 ** 9)],
    # slidelog: logs of thousands of units (ZADD in batches), a retry
    # inside the oldest run, the run leaving, the whole limit at once
    [("FG.SLIDELOG", 100000, 60000, "COST", 2500, "AT", T0),
     ("FG.SLIDELOG", 100000, 60000, "COST", 97000, "AT", T0 + 10),
     ("FG.SLIDELOG", 100000, 60000, "COST", 600, "AT", T0 + 20),
     ("FG.SLIDELOG", 100000, 60000, "COST", 500, "AT", T0 + 60_000_000),
     ("FG.SLIDELOG", 100000, 60000, "COST", 2600, "AT", T0 + 60_000_001),
     ("FG.PEEK", "SLIDELOG", 100000, 60000, "COST", 2600, "AT", T0 + 60_000_010)],
    [("FG.SLIDELOG", 100000, 1000, "COST", 100000, "AT", T0),
     ("FG.SLIDELOG", 100000, 1000, "AT", T0 + 999_999),
     ("FG.SLIDELOG", 99999, 1000, "COST", 0, "AT", T0 + 1)],
    # slidelog: a unit at time 0 leaves the window exactly at its end
    [("FG.SLIDELOG", 2, 1000, "COST", 2, "AT", 0),
     ("FG.SLIDELOG", 2, 1000, "AT", 999_999),
     ("FG.SLIDELOG", 2, 1000, "AT", 10 ** 6),
     ("FG.SLIDELOG", 2, 1000, "COST", 2, "AT", 10 ** 6)],
    # GCRA: the largest max_burst at one token per microsecond
    [("GCRA", I64, 10 ** 7, 1, "AT", GCRA_T0),
     ("GCRA", I64, 10 ** 7, 1, "TOKENS", I64, "AT", GCRA_T0)],
    # GCRA: a TAT a few hundred us into a millisecond, read at that
    # millisecond's end (stored, TAT in the past) and after (expired)
    [("GCRA", 0, 1, "0.0003", "AT", GCRA_T0),
     ("GCRA", 0, 1, "0.0003", "TOKENS", 2, "AT", GCRA_T0 + 1000),
     ("GCRA", 0, 1, "0.0003", "TOKENS", 2, "AT", GCRA_T0 + 1999),
     ("GCRA", 0, 1, "0.0003", "TOKENS", 2, "AT", GCRA_T0 + 2000)],
)


def test_edges(fresh):
    p = fresh
    for n, edge in enumerate(EDGES):
        key = "edge:%d" % n
        for command in edge:
            at_key = 2 if command[0] in ("FG.PEEK", "FG.REFUND") else 1
            p.command(*command[:at_key], key, *command[at_key:])
            p.settle(key, exact=command[0] == "GCRA")
            if command[0] != "GCRA":
                p.inspect(key)

"""Named policies as server scripts (src/scripts/policy.lua) answer what the
module answers: the same FG.CHECK replies and FG.POLICY GET definitions at
explicit instants, over random policies, costs, times, changes of numbers
(carried over) and list entries, and the same refusals of bad rules.

The module decides with floodgate.explicit-time (AT); the script on a
stock server is given the same AT. Each sequence is seeded, so a failure
names the seed that reproduces it."""

import random
import time

import pytest
import redis

import harness

T0 = 1_767_225_600_000_000  # 2026-01-01, us
# Longer than a step takes on a loaded machine, many times over.
SETTLE_MS = 2000


@pytest.fixture(scope="module")
def pair(request):
    module = harness.Server(["--floodgate.explicit-time", "yes"])
    stock = harness.Server(module=False)
    for s in (module, stock):
        request.addfinalizer(s.cleanup)
        s.start()
    m, k = module.client(), stock.client()
    sha = k.script_load(harness.built_script("policy"))
    return m, k, sha


def policy_keys(name):
    d = "fg:policy:{%s}" % name
    return [d, d + ":allow", d + ":deny"]


def answer(fn):
    try:
        return fn()
    except redis.ResponseError as e:
        return ("error", str(e))


class Pair:
    def __init__(self, m, k, sha):
        self.m, self.k, self.sha = m, k, sha

    def script(self, keys, *args):
        return answer(lambda: self.k.evalsha(self.sha, len(keys), *keys, *args))

    def module(self, *args):
        return answer(lambda: self.m.execute_command(*args))

    def settle_expiry(self, key):
        """A state's TTL runs on the server's clock (AT only moves the
        decision), so a key about to expire may be gone on one server and
        not yet on the other: such a key goes on both. A key missing on one
        side only while the other has long to live is a real difference."""
        pm, pk = self.m.pttl(key), self.k.pttl(key)
        if min(pm, pk) >= SETTLE_MS or pm == pk == -2:
            return
        assert pm < SETTLE_MS * 2 and pk < SETTLE_MS * 2 or -2 not in (pm, pk), (key, pm, pk)
        self.m.delete(key)
        self.k.delete(key)

    def set(self, name, words):
        a = self.module("FG.POLICY", "SET", name, *words)
        b = self.script(policy_keys(name), "FG.POLICY", "SET", name, *words)
        return a, b

    def check(self, name, key, *opts):
        start = time.monotonic_ns()
        a = self.module("FG.CHECK", name, key, *opts)
        b = self.script([key] + policy_keys(name), "FG.CHECK", name, *opts)
        self.took_ms = (time.monotonic_ns() - start) // 1_000_000 + 1
        return a, b

    def expiries(self, key):
        """The key's absolute expiry (ms) on both: they count from each
        server's clock, read once per call, so they differ by at most the
        time between the two calls of the check that wrote them."""
        return self.m.pexpiretime(key), self.k.pexpiretime(key)

    def get(self, name):
        a = self.module("FG.POLICY", "GET", name)
        b = self.script(policy_keys(name), "FG.POLICY", "GET", name)
        return a, b


def normalise(reply):
    """Replies compare as values: a script answers an integer past 2^53 as
    its decimal string."""
    if isinstance(reply, list):
        return [normalise(x) for x in reply]
    if isinstance(reply, bytes) and reply.lstrip(b"-").isdigit():
        return int(reply)
    return reply


def get_without_counters(reply):
    if isinstance(reply, tuple):
        return reply
    fields = dict(zip(reply[0::2], reply[1::2]))
    for counter in (b"allowed", b"denied", b"banned", b"shadow_denied", b"waited"):
        fields.pop(counter)
    return {k: normalise(v) for k, v in fields.items()}


def random_limit(rng):
    kind = rng.choice(["TOKEN", "LEAKY", "GCRA", "FIXED", "SLIDING"])
    cap = str(rng.choice([1, 2, 3, 10, 100, rng.randint(1, 10**6), 2**62, 2**63 - 1]))
    if kind in ("TOKEN", "LEAKY"):
        rate = rng.choice(["1", "0.5", "10", "1000", "1e9", "0.001", str(rng.uniform(0.01, 100))])
        return [kind, cap, rate]
    if kind == "GCRA":
        return [kind, cap, rng.choice(["1", "10", "3.5", "1e6"]),
                rng.choice(["1000", "1", "60000", "0.25"])]
    limit = str(rng.choice([1, 2, 5, 100, rng.randint(1, 10**9)]))
    window = rng.choice(["1000", "1", "0.001", "60000", "86400000", str(rng.uniform(1, 5000))])
    return [kind, limit, window]


def random_policy(rng):
    words = []
    for _ in range(rng.randint(1, 3)):
        words += ["LIMIT"] + random_limit(rng)
    if rng.random() < 0.5:
        words += ["PENALTY", rng.choice(["1000", "50", "0.5"])]
        if rng.random() < 0.7:
            words += ["AFTER", str(rng.randint(1, 4))]
        if rng.random() < 0.5:
            words += ["WITHIN", rng.choice(["2000", "10", "100000"])]
    if rng.random() < 0.2:
        words.append("SHADOW")
    return words


@pytest.mark.parametrize("seed", range(12))
def test_checks_equal_the_module(pair, seed):
    m, k, sha = pair
    m.flushall()
    k.flushall()
    p = Pair(m, k, sha)
    rng = random.Random(seed)
    name = "p%d" % seed
    a, b = p.set(name, random_policy(rng))
    assert a == b, (seed, a, b)
    now = T0 + rng.randint(0, 10**9)
    keys = ["u:1", "u:2", "u:3"]
    tolerance = {}  # key -> ms its two expiries may differ by, since their last write
    for step in range(250):
        roll = rng.random()
        if roll < 0.05:
            a, b = p.set(name, random_policy(rng))  # carried over at the next check
            assert a == b, (seed, step, a, b)
            continue
        if roll < 0.08:
            which = rng.choice(["ALLOW", "DENY"])
            item = rng.choice(keys + ["id:x"])
            a = p.module("FG.POLICY", which, name, item)
            b = p.script(policy_keys(name), "FG.POLICY", which, name, item)
            assert a == b, (seed, step, a, b)
            continue
        now += rng.choice([0, 1, 999, 1000, 1001, rng.randint(0, 3_000_000), -rng.randint(0, 5000)])
        now = max(now, 0)
        opts = ["AT", str(now)]
        if rng.random() < 0.7:
            opts += ["COST", str(rng.choice([0, 1, 1, 1, 2, 5, 10**6, 2**63 - 1]))]
        if rng.random() < 0.1:
            opts += ["ID", "id:x"]
        key = rng.choice(keys)
        p.settle_expiry(key)
        before = p.expiries(key)
        a, b = p.check(name, key, *opts)
        assert normalise(a) == normalise(b), (seed, step, opts, a, b)
        em, ek = p.expiries(key)
        if (em, ek) != before:
            tolerance[key] = p.took_ms
        if (em < 0) != (ek < 0):
            # gone on one side: it expired there, and is about to on the other
            assert max(em, ek) < time.time() * 1000 + SETTLE_MS * 2, (seed, step, opts, key, em, ek)
        else:
            assert abs(em - ek) <= tolerance.get(key, 0), (seed, step, opts, key, em, ek)
        for kk in k.keys("*"):
            if not kk.startswith(b"fg:policy:"):
                assert k.pttl(kk) != -1, (seed, step, kk, "has no expiry")
    a, b = p.get(name)
    assert get_without_counters(a) == get_without_counters(b), (seed, a, b)


BAD_RULES = [
    [],
    ["LIMIT"],
    ["LIMIT", "NOPE", "1", "2"],
    ["LIMIT", "TOKEN", "10"],
    ["LIMIT", "TOKEN", "0", "1"],
    ["LIMIT", "TOKEN", "x", "1"],
    ["LIMIT", "TOKEN", "10", "inf"],
    ["LIMIT", "TOKEN", "10", "0x10"],
    ["LIMIT", "TOKEN", "10", "2e9"],
    ["LIMIT", "GCRA", "10", "1", "0"],
    ["LIMIT", "FIXED", "10", "0.0001"],
    ["LIMIT", "SLIDING", "-1", "10"],
    ["LIMIT", "TOKEN", "9223372036854775807", "0.000000001"],
    ["LIMIT", "FIXED", "1", "1"] * 9,
    ["LIMIT", "FIXED", "1", "1", "PENALTY"],
    ["LIMIT", "FIXED", "1", "1", "PENALTY", "10", "AFTER", "0"],
    ["LIMIT", "FIXED", "1", "1", "PENALTY", "10", "AFTER", "2", "AFTER", "3"],
    ["LIMIT", "FIXED", "1", "1", "PENALTY", "10", "WITHIN"],
    ["LIMIT", "FIXED", "1", "1", "SHADOW", "SHADOW"],
    ["LIMIT", "FIXED", "1", "1", "ALLOWLIST", "MAYBE"],
    ["LIMIT", "FIXED", "1", "1", "BOGUS"],
]


@pytest.mark.parametrize("words", BAD_RULES, ids=lambda w: " ".join(w)[:40] or "none")
def test_bad_rules_are_refused_alike(pair, words):
    m, k, sha = pair
    p = Pair(m, k, sha)
    a, b = p.set("bad", words)
    assert a == b
    assert isinstance(a, tuple)
    assert k.exists(*policy_keys("bad")) == 0


def test_bloom_lists_need_the_module(pair):
    m, k, sha = pair
    p = Pair(m, k, sha)
    _, b = p.set("bl", ["LIMIT", "FIXED", "1", "1000", "DENYLIST", "BLOOM", "0.01", "1000"])
    assert b[0] == "error" and "module" in b[1]


# Policies as users write them: a bucket and a window, two windows, a
# sliding one with a penalty, shadow mode.
FAST_POLICIES = [["LIMIT", "TOKEN", "10", "5", "LIMIT", "FIXED", "50", "86400000"],
                 ["LIMIT", "FIXED", "5", "1000", "LIMIT", "FIXED", "20", "60000"],
                 ["LIMIT", "SLIDING", "8", "1000", "LIMIT", "GCRA", "5", "10", "1000",
                  "PENALTY", "5000", "AFTER", "3", "WITHIN", "10000"],
                 ["LIMIT", "LEAKY", "4", "2", "SHADOW"]]


@pytest.mark.parametrize("words", FAST_POLICIES, ids=["bucket+day", "two windows", "penalty",
                                                      "shadow"])
def test_the_fast_path_answers_what_it_is_for(pair, words):
    """FG.CHECK of a policy without lists, at instants in the fast range, is
    answered by the fast path itself (src/scripts/fast/policy.lua), through
    admissions, denials and a penalty, as the module answers: the script
    cut after its fast path (nil where it would leave the check to the
    exact code) against the module, 40 checks of costs 0 to 3, 100 ms
    apart."""
    m, k, sha = pair
    m.flushall()
    k.flushall()
    p = Pair(m, k, sha)
    a, b = p.set("fast", words)
    assert a == b and not isinstance(a, tuple), (a, b)  # set, not refused alike
    fast = k.script_load(harness.fast_path_alone("policy"))
    rng = random.Random(" ".join(words))
    at, seen = T0, set()
    for step in range(40):
        opts = ["COST", str(rng.choice([0, 1, 1, 1, 3])), "AT", str(at)]
        want = p.module("FG.CHECK", "fast", "u", *opts)
        got = answer(lambda: k.evalsha(fast, 4, "u", *policy_keys("fast"), "FG.CHECK", "fast", *opts))
        assert got is not None, ("the fast path left it to the exact code", step, opts)
        assert got == want and not isinstance(got, tuple), (step, opts, got, want)
        seen.add((got[0] and not got[6], got[5]))
        at += 100_000
    # admissions and denials (in shadow mode, allowed as denied) both, and
    # the penalty's where there is one
    assert {True, False} <= {allowed for allowed, _ in seen}, seen
    assert ("PENALTY" not in words) or (False, b"penalty") in seen, seen


def test_check_errors_alike(pair):
    m, k, sha = pair
    m.flushall()
    k.flushall()
    p = Pair(m, k, sha)
    a, b = p.check("nope", "u")
    assert a == b and "no such policy 'nope'" in a[1]
    a, b = p.check("bad name!", "u")
    assert a == b
    p.set("one", ["LIMIT", "FIXED", "5", "1000"])
    p.set("two", ["LIMIT", "FIXED", "5", "1000"])
    p.check("one", "shared", "AT", str(T0))
    a, b = p.check("two", "shared", "AT", str(T0))
    assert a == b and "state of policy 'one'" in a[1]
    for opts in (["COST", "-1"], ["COST"], ["WAIT", "0"], ["WAIT", "10", "AT", "5"], ["NOPE", "1"]):
        a, b = p.check("one", "u", *opts)
        assert a == b, opts


# Regression: the script's FG.RESET answered WRONGTYPE for a policy's
# state, which the module's deletes.
def test_reset_and_inspect_of_a_policy_state(pair):
    m, k, sha = pair
    m.flushall()
    k.flushall()
    p = Pair(m, k, sha)
    rl = k.script_load(harness.built_script("ratelimit"))
    p.set("rs", ["LIMIT", "FIXED", "5", "60000"])
    p.check("rs", "held", "AT", str(T0))
    assert k.exists("held") and m.exists("held")
    a = p.module("FG.INSPECT", "held")
    b = answer(lambda: k.evalsha(rl, 1, "held", "FG.INSPECT"))
    assert a == b and "WRONGTYPE" in a[1]
    assert p.module("FG.RESET", "held") == answer(lambda: k.evalsha(rl, 1, "held", "FG.RESET")) == 1
    assert not k.exists("held") and not m.exists("held")

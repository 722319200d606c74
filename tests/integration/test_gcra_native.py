"""GCRA, Redis 8.8's command, as floodgate provides it on servers without it
(docs/commands.md, "GCRA").

Answers are compared with a model of 8.8's GCRA written here from its
rules (microseconds, the clock in whole milliseconds, the emission interval
rounded half up, seconds rounded up through doubles), at explicit times
(`AT`, floodgate.explicit-time) a day ahead of the server's clock, so no key
expires by the server's clock during a test; a key that has expired by the
chosen time counts as absent, as the model expects. Also: every error text,
and that an error changes nothing; the stored value; replication, AOF,
DUMP/RESTORE and MIGRATE (also through a server without the module);
keyspace events; MULTI/EXEC and WATCH; COMMAND DOCS; a server whose GCRA
name is taken keeps its own command.
"""

import math
import random
import time

import pytest

from harness import RawClient, Server, digest, s, wait_for, wait_replica_synced
from topology import aof_files, read_aof_commands, read_log, stream_position

LLONG_MAX = 2 ** 63 - 1
ARITY = "ERR wrong number of arguments for 'gcra' command"
NOT_INTEGER = "ERR value is not an integer or out of range"
NOT_POSITIVE = "ERR value is out of range, must be positive"
COUNT_RANGE = "ERR value is out of range, value must between 1 and 9223372036854775807"
NOT_FLOAT = "ERR value is not a valid float"
PERIOD = "ERR period must be > 0 and < 1e12"
SYNTAX = "ERR syntax error"
NO_TOKENS = "ERR Missing TOKENS value"
OVERFLOW = ("ERR GCRA limiting uses microsecond accuracy. Combination of period, "
            "tokens_per_period and %s would cause an overflow")
INVALID_KEY = "ERR Invalid GCRA key"
NEGATIVE_TAT = "ERR Negative time is invalid value for GCRA"
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


# --------------------------------------------------------------------------
# the model: Redis 8.8's GCRA from its rules

class ModelError(Exception):
    pass


def c_div(a, b):
    """C's integer division (towards zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def emission_us(period, per_period):
    t = int(period * 1e6 / float(per_period) + 0.5)
    return max(t, 1)


def model_decide(max_burst, per_period, period, tokens, tat, now):
    """8.8's answer at `now` (whole ms, in us) for a stored TAT (None: no
    key): (reply, TAT to store or None). Raises ModelError(text)."""
    capacity = max_burst if max_burst == LLONG_MAX else max_burst + 1
    t = emission_us(period, per_period)
    if t > LLONG_MAX // tokens:
        raise ModelError(OVERFLOW % "TOKENS")
    if t > LLONG_MAX // capacity:
        raise ModelError(OVERFLOW % "max_burst")
    variance, increment = t * capacity, t * tokens
    tat = now if tat is None else tat
    base = max(now, tat)
    if LLONG_MAX - base < increment:
        raise ModelError(OVERFLOW % "TOKENS")
    new_tat = base + increment
    diff = now - (new_tat - variance)
    if diff < 0:
        limited, ttl, store = 1, tat - now, None
        retry = math.ceil(float(-diff) / 1e6) if increment <= variance else -1
    else:
        limited, ttl, store, retry = 0, new_tat - now, new_tat, -1
    nxt = variance - ttl
    remaining = c_div(nxt, t) if nxt > -t else 0
    return [limited, capacity, remaining, retry, math.ceil(float(ttl) / 1e6)], store


class ModelKey:
    """One key as 8.8 would hold it: (TAT, expiry in ms) or absent."""

    def __init__(self):
        self.tat = None
        self.expire_ms = None

    def call(self, args, at_us):
        now = at_us // 1000 * 1000
        if self.tat is not None and self.expire_ms < now // 1000:
            self.tat = self.expire_ms = None  # expired by then
        reply, store = model_decide(*args, self.tat, now)
        if store is not None:
            self.tat, self.expire_ms = store, -(-store // 1000)  # rounded up
        return reply


# --------------------------------------------------------------------------
# helpers

def gcra_argv(key, max_burst, per_period, period, tokens=None, at=None):
    argv = ["GCRA", key, max_burst, per_period, repr(float(period)) if isinstance(period, float)
            else period]
    if tokens is not None:
        argv += ["TOKENS", tokens]
    if at is not None:
        argv += ["AT", at]
    return argv


def gcra(c, key, *args, **kw):
    return [int(x) for x in c.execute_command(*gcra_argv(key, *args, **kw))]


def future_ms(c, days=1):
    """A whole millisecond `days` ahead of the server's clock, in us."""
    sec, usec = (int(x) for x in c.execute_command("TIME"))
    return (sec + days * 86400) * 1_000_000 + usec // 1000 * 1000


def key_state(c, key):
    return s(c.get(key)), c.execute_command("PEXPIRETIME", key)


@pytest.fixture
def raw(timed, t):
    with RawClient(timed.port) as rc:
        yield rc


# --------------------------------------------------------------------------
# answers at explicit times

def test_a_burst_then_the_rate(t):
    """max_burst 4, 5 per 10 s: five at once, then one every 2 s."""
    t0 = future_ms(t)
    for i in range(1, 6):
        assert gcra(t, "k", 4, 5, 10, at=t0) == [0, 5, 5 - i, -1, 2 * i]
    assert gcra(t, "k", 4, 5, 10, at=t0) == [1, 5, 0, 2, 10]
    assert key_state(t, "k") == (str(t0 + 10_000_000), (t0 + 10_000_000) // 1000)
    # one millisecond before the token is back; the microseconds of AT
    # are dropped, as 8.8's clock has none
    assert gcra(t, "k", 4, 5, 10, at=t0 + 1_999_999) == [1, 5, 0, 1, 9]
    assert gcra(t, "k", 4, 5, 10, at=t0 + 2_000_000) == [0, 5, 0, -1, 10]
    # three at once fit exactly when the TAT is 10 s ahead
    assert gcra(t, "k", 4, 5, 10, tokens=3, at=t0 + 8_000_000) == [0, 5, 0, -1, 10]


def test_sub_second_rounding(t):
    """One token per 1.5 s: retry_after and reset_after round up to whole
    seconds at every boundary."""
    t0 = future_ms(t)
    assert gcra(t, "k", 0, 1, 1.5, at=t0) == [0, 1, 0, -1, 2]
    cases = [  # (offset us, expected reply)
        (1_000, [1, 1, 0, 2, 2]),        # 1.499 s to go
        (499_999, [1, 1, 0, 2, 2]),      # truncated to 499 ms: 1.001 s
        (500_000, [1, 1, 0, 1, 1]),      # exactly 1 s
        (501_000, [1, 1, 0, 1, 1]),      # 0.999 s
        (1_499_000, [1, 1, 0, 1, 1]),    # 1 ms
        (1_499_999, [1, 1, 0, 1, 1]),    # still 1 ms: now is whole ms
        (1_500_000, [0, 1, 0, -1, 2]),   # at the TAT
    ]
    for offset, expected in cases:
        assert gcra(t, "k", 0, 1, 1.5, at=t0 + offset) == expected, offset
    assert key_state(t, "k") == (str(t0 + 3_000_000), (t0 + 3_000_000) // 1000)
    # a TAT one microsecond after a millisecond: 1 us to go rounds to 1 s
    t.set("k", t0 + 1, pxat=(t0 + 1) // 1000)
    assert gcra(t, "k", 0, 1, 1.5, at=t0) == [1, 1, 0, 1, 1]


def test_emission_interval_rounds_half_up(t):
    """The interval is round(period_us / tokens_per_period), at least 1 us:
    read back from the stored TAT after one token."""
    t0 = future_ms(t)
    cases = [(1, 3, 333_333), (2, 3, 666_667), (5, 2_000_000, 3), (3, 2_000_000, 2),
             (1, 2_000_000, 1), (1, 4_000_000, 1), ("1e-9", 1, 1), (0.0015, 1, 1_500),
             (1, LLONG_MAX, 1)]
    for i, (period, per_period, interval) in enumerate(cases):
        key = "e%d" % i
        gcra(t, key, 0, per_period, period, at=t0)
        assert int(t.get(key)) == t0 + interval, (period, per_period)


def test_count_above_capacity(t):
    """TOKENS above the capacity: refused, retry_after -1, nothing written."""
    t0 = future_ms(t)
    assert gcra(t, "k", 2, 1, 1, tokens=4, at=t0) == [1, 3, 3, -1, 0]
    assert t.exists("k") == 0
    assert gcra(t, "k", 2, 1, 1, tokens=3, at=t0) == [0, 3, 0, -1, 3]
    assert gcra(t, "k", 2, 1, 1, tokens=4, at=t0 + 1_500_000) == [1, 3, 1, -1, 2]
    # a TAT in the past, stored without expiry: 8.8 counts from it
    t.set("old", t0 - 2_500_000)
    assert gcra(t, "old", 2, 1, 1, tokens=4, at=t0) == [1, 3, 5, -1, -2]
    assert s(t.get("old")) == str(t0 - 2_500_000)


def test_expired_by_the_explicit_time_is_absent(t):
    """A key whose expiry is before AT's millisecond counts as absent (the
    server's clock has not deleted it yet)."""
    t0 = future_ms(t)
    t.set("k", t0 - 2_500_000, pxat=(t0 - 2_500_000) // 1000)
    assert gcra(t, "k", 2, 1, 1, tokens=4, at=t0) == [1, 3, 3, -1, 0]
    # alive through its expiry's millisecond (500 us of TAT left), gone after
    t.set("k", t0 - 500, pxat=(t0 - 500) // 1000)
    assert gcra(t, "k", 2, 1, 1, tokens=4, at=t0 - 1000) == [1, 3, 2, -1, 1]
    assert gcra(t, "k", 2, 1, 1, tokens=4, at=t0) == [1, 3, 3, -1, 0]
    # another type that has expired by then is absent too, and replaced
    t.delete("k")
    t.rpush("k", "x")
    t.pexpireat("k", t0 // 1000 - 1)
    assert gcra(t, "k", 2, 1, 1, at=t0) == [0, 3, 2, -1, 1]
    assert t.type("k") == b"string"


def random_params(rng):
    max_burst = rng.choice([0, 1, 2, 5, 9, 30, rng.randrange(0, 1000)])
    per_period = rng.choice([1, 2, 3, 7, 10, 100, 1000, 1_000_000, 3_000_000])
    period = rng.choice([0.001, 0.0015, 0.1, 0.333, 0.5, 1, 1.5, 2.5, 10, 60, 3600, 86400,
                         1e-7, rng.uniform(0.001, 100)])
    return max_burst, per_period, period


def test_random_traffic_matches_the_model(t):
    """Hundreds of parameter sets, each a sequence of calls at times picked
    around the boundaries that matter (a millisecond before a token is
    back, at it, sub-millisecond AT, idle past the TAT), against the model:
    every reply, and the stored value and expiry after every call."""
    rng = random.Random(8808)
    t0 = future_ms(t)
    checked = {"admitted": 0, "limited": 0, "never": 0}
    for n in range(150):
        max_burst, per_period, period = random_params(rng)
        key, model = "r%d" % n, ModelKey()
        at = t0 + rng.randrange(0, 10 ** 9)
        for _ in range(30):
            capacity = max_burst + 1
            tokens = rng.choice([None, None, 1, 2, rng.randrange(1, capacity + 3)])
            args = (max_burst, per_period, period, tokens or 1)
            t_us = emission_us(period, per_period)
            pick = rng.randrange(8)
            if pick == 0 and model.tat is not None:
                # the millisecond before / at / after the request would fit
                fit = max(model.tat, at) + t_us * (tokens or 1) - t_us * capacity
                at = max(at, fit // 1000 * 1000 + rng.choice([-1000, 0, 1000, 999]))
            elif pick == 1 and model.tat is not None:
                at = max(at, model.tat + rng.choice([-1000, 0, 1, 1000]))
            elif pick < 6:
                at += rng.randrange(0, 3 * t_us + 2)
            argv = gcra_argv(key, max_burst, per_period, period, tokens, at)
            expected = model.call(args, at)
            assert [int(x) for x in t.execute_command(*argv)] == expected, (argv, model.tat)
            if model.tat is not None:
                assert key_state(t, key) == (str(model.tat), model.expire_ms), argv
            checked["limited" if expected[0] and expected[3] >= 0 else
                    "never" if expected[0] else "admitted"] += 1
    assert min(checked.values()) > 100, checked


def test_overflow_errors(t):
    t0 = future_ms(t)
    assert t.execute_command("GCRA", "k", 91, 1, "1e11", "TOKENS", 92, "AT", t0)[0] == 0
    cases = [((0, 1, "1e11", 93), OVERFLOW % "TOKENS"),
             ((92, 1, "1e11", 93), OVERFLOW % "TOKENS"),   # both: TOKENS first
             ((92, 1, "1e11", 1), OVERFLOW % "max_burst"),
             ((9, 1, "922330000000", 10), OVERFLOW % "TOKENS")]   # now + increment
    for (mb, pp, period, tokens), text in cases:
        with pytest.raises(Exception) as e:
            t.execute_command("GCRA", "o", mb, pp, period, "TOKENS", tokens, "AT", t0)
        assert "ERR " + str(e.value) == text
    # from a stored TAT near the end of time
    t.set("o", LLONG_MAX - 99)
    with pytest.raises(Exception) as e:
        t.execute_command("GCRA", "o", 5, 1, "0.0001", "AT", t0)
    assert "ERR " + str(e.value) == OVERFLOW % "TOKENS"
    assert s(t.get("o")) == str(LLONG_MAX - 99)


# --------------------------------------------------------------------------
# errors: 8.8's texts, and nothing changes

ERRORS = [
    (["GCRA", "k", 1, 1], ARITY),
    (["GCRA", "k", 1, 1, 1, "TOKENS", 1, "x"], ARITY),
    (["GCRA", "k", "x", 1, 1], NOT_INTEGER),
    (["GCRA", "k", "1.5", 1, 1], NOT_INTEGER),
    (["GCRA", "k", " 1", 1, 1], NOT_INTEGER),
    (["GCRA", "k", "9223372036854775808", 1, 1], NOT_INTEGER),
    (["GCRA", "k", -1, 1, 1], NOT_POSITIVE),
    (["GCRA", "k", -1, "x", 1], NOT_POSITIVE),          # max_burst is checked first
    (["GCRA", "k", 1, "x", 1], NOT_INTEGER),
    (["GCRA", "k", 1, 0, 1], COUNT_RANGE),
    (["GCRA", "k", 1, -3, "x"], COUNT_RANGE),
    (["GCRA", "k", 1, 1, "x"], NOT_FLOAT),
    (["GCRA", "k", 1, 1, ""], NOT_FLOAT),
    (["GCRA", "k", 1, 1, "nan"], NOT_FLOAT),
    (["GCRA", "k", 1, 1, "1e400"], NOT_FLOAT),
    (["GCRA", "k", 1, 1, "1 "], NOT_FLOAT),
    (["GCRA", "k", 1, 1, 0], PERIOD),
    (["GCRA", "k", 1, 1, "-0"], PERIOD),
    (["GCRA", "k", 1, 1, -1], PERIOD),
    (["GCRA", "k", 1, 1, "1e12"], PERIOD),
    (["GCRA", "k", 1, 1, "inf"], PERIOD),
    (["GCRA", "k", 1, 1, 1, "FOO", 1], SYNTAX),
    (["GCRA", "k", 1, 1, 1, "TOKENS"], NO_TOKENS),
    (["GCRA", "k", 1, 1, 1, "FOO"], SYNTAX),
    (["GCRA", "k", 1, 1, 1, "TOKENS", 0], COUNT_RANGE),
    (["GCRA", "k", 1, 1, 1, "TOKENS", "x"], NOT_INTEGER),
    (["GCRA", "k", 1, 1, 1, "TOKENS", -1], COUNT_RANGE),
    (["GCRA", "k", 1, 1, "1e11", "TOKENS", 93], OVERFLOW % "TOKENS"),
    (["GCRA", "k", 92, 1, "1e11"], OVERFLOW % "max_burst"),
    (["GCRA", "k", 1, 1, 1, "AT", 5], SYNTAX),          # no AT without the config
    (["GCRA", "k", 1, 1, 1, "TOKENS", 1, "AT", 5], ARITY),
]


@pytest.mark.parametrize("argv,text", ERRORS, ids=[" ".join(map(str, a[2:])) or "arity"
                                                   for a, _ in ERRORS])
def test_errors_change_nothing(r, server, argv, text):
    r.set("k", 1_900_000_000_000_000, px=3_600_000)
    before, state = digest(r), key_state(r, "k")
    with RawClient(server.port) as rc:
        assert rc.error_of(*argv) == text
    assert digest(r) == before
    assert key_state(r, "k") == state


@pytest.mark.parametrize("value,text", [
    ("abc", INVALID_KEY), ("", INVALID_KEY), ("12.5", INVALID_KEY), (" 12", INVALID_KEY),
    ("012", INVALID_KEY), ("+12", INVALID_KEY), ("9223372036854775808", INVALID_KEY),
    ("0", NEGATIVE_TAT), ("-5", NEGATIVE_TAT), ("-9223372036854775808", NEGATIVE_TAT)])
def test_values_that_are_not_a_tat(r, server, value, text):
    r.set("k", value, px=3_600_000)
    before, state = digest(r), key_state(r, "k")
    with RawClient(server.port) as rc:
        assert rc.error_of("GCRA", "k", 1, 1, 1) == text
        # arguments are read before the key
        assert rc.error_of("GCRA", "k", 1, 1, 0) == PERIOD
    assert digest(r) == before
    assert key_state(r, "k") == state


def test_wrong_types(r, server):
    r.rpush("list", "x")
    r.execute_command("FG.TOKEN", "bucket", 5, 1)
    before = digest(r)
    with RawClient(server.port) as rc:
        assert rc.error_of("GCRA", "list", 1, 1, 1) == WRONGTYPE
        assert rc.error_of("GCRA", "bucket", 1, 1, 1) == WRONGTYPE
        assert rc.error_of("GCRA", "list", 1, 1, "x") == NOT_FLOAT
    assert digest(r) == before


def test_explicit_time_errors(raw, t):
    """With the config, a last AT takes floodgate's rules for AT."""
    assert raw.error_of("GCRA", "k", 1, 1, 1, "AT", "x").startswith("ERR AT ")
    assert raw.error_of("GCRA", "k", 1, 1, 1, "AT", -1).startswith("ERR AT ")
    assert raw.error_of("GCRA", "k", 1, 1, 1, "TOKENS", 1, "AT", 1, "AT", 2) == ARITY
    assert raw.error_of("GCRA", "k", 1, 1, 1, "TOKENS", "AT", 5) == NO_TOKENS
    assert t.dbsize() == 0


# --------------------------------------------------------------------------
# the stored state

def test_the_key_lives_until_its_tat_rounded_up(t):
    """A TAT less than a millisecond ahead (one token of 100 us) expires at
    the next millisecond, not at this one: rounded down, the key had a PTTL
    of 0, or was gone, while the bucket was not full again."""
    sec, usec = (int(x) for x in t.execute_command("TIME"))
    t0 = (sec + 3600) * 1_000_000 + usec // 1000 * 1000  # whole ms, an hour ahead
    for at, tat in [(t0, t0 + 100), (t0 + 999, t0 + 100), (t0 + 1000, t0 + 1100)]:
        t.delete("k")
        assert gcra(t, "k", 1, 10000, 1, at=at) == [0, 2, 1, -1, 1]
        assert int(t.get("k")) == tat
        assert t.execute_command("PEXPIRETIME", "k") == tat // 1000 + 1
        assert t.pttl("k") > 0
    # at the server's clock: the same, whatever the microsecond (in one
    # MULTI, where the server's expiry reads the time EXEC began)
    for _ in range(10):
        t.delete("k")
        pipe = t.pipeline(transaction=True)
        pipe.execute_command("GCRA", "k", 1, 10000, 1)
        pipe.get("k")
        pipe.execute_command("PEXPIRETIME", "k")
        reply, tat, expire_ms = pipe.execute()
        assert reply[0] == 0 and expire_ms == -(-int(tat) // 1000)
    # a TAT on a millisecond is not rounded
    t.delete("k")
    gcra(t, "k", 0, 1, 1, at=t0)
    assert t.execute_command("PEXPIRETIME", "k") == (t0 + 1_000_000) // 1000


def test_the_other_buckets_round_up_too(t):
    """FG.GCRA, FG.TOKEN, FG.LEAKY and CL.THROTTLE keep the same rule: after
    one unit of 100 us, the key expires at its TAT (ns) rounded up to the
    ms. All at the server's clock, each in one MULTI with what reads it."""
    for key, argv in [("g", ["FG.GCRA", "g", 2, 10000, 1000]), ("k", ["FG.TOKEN", "k", 2, 10000]),
                      ("l", ["FG.LEAKY", "l", 2, 10000]), ("c", ["CL.THROTTLE", "c", 1, 10000, 1])]:
        pipe = t.pipeline(transaction=True)
        pipe.execute_command(*argv)
        pipe.execute_command("FG.INSPECT", key)
        pipe.execute_command("PEXPIRETIME", key)
        _, fields, expire_ms = pipe.execute()
        state = dict(zip(map(s, fields[0::2]), fields[1::2]))
        assert expire_ms == -(-int(state["tat_ns"]) // 1_000_000), argv


def test_the_state_is_a_plain_string(r):
    """The TAT in decimal microseconds, expiring at the TAT in ms (rounded
    up); any TTL the key had is replaced; TOKENS in any case."""
    r.set("k", 1000, px=100_000)   # a TAT long past, with a TTL of its own
    t_before = int(r.execute_command("TIME")[0]) * 10 ** 6
    assert gcra(r, "k", 9, 1, 3600, tokens=3) == [0, 10, 7, -1, 10800]
    t_after = int(r.execute_command("TIME")[0]) * 10 ** 6 + 10 ** 6
    tat = int(r.get("k"))
    assert t_before + 3 * 3600 * 10 ** 6 <= tat <= t_after + 3 * 3600 * 10 ** 6
    assert tat % 1000 == 0  # now is whole milliseconds, T whole seconds
    assert r.type("k") == b"string"
    assert r.execute_command("PEXPIRETIME", "k") == tat // 1000
    assert s(r.object("encoding", "k")) == "raw"
    assert [int(x) for x in r.execute_command("GCRA", "k", 9, 1, 3600, "tokens", 2)][:3] == \
        [0, 10, 5]
    assert int(r.get("k")) == tat + 2 * 3600 * 10 ** 6


def test_a_value_written_by_set_is_read(t):
    """An integer-encoded string (what SET, RESTORE and replicas make) is
    read, and written over."""
    t0 = future_ms(t)
    t.set("k", t0 + 1_000_000)
    assert s(t.object("encoding", "k")) == "int"
    assert gcra(t, "k", 4, 1, 1, at=t0) == [0, 5, 3, -1, 2]
    assert key_state(t, "k") == (str(t0 + 2_000_000), (t0 + 2_000_000) // 1000)
    # a refusal leaves the value, its TTL and the digest as they were
    t.set("k", t0 + 9_000_000, pxat=t0 // 1000 + 9_000)
    before, state = digest(t), key_state(t, "k")
    assert gcra(t, "k", 4, 1, 1, at=t0) == [1, 5, 0, 5, 9]
    assert digest(t) == before and key_state(t, "k") == state
    # a shorter value is replaced by one of the TAT's length
    t.set("k", 7)
    assert gcra(t, "k", 4, 1, 1, at=t0) == [0, 5, 4, -1, 1]
    assert s(t.get("k")) == str(t0 + 1_000_000)


def test_keyspace_events(r):
    r.config_set("notify-keyspace-events", "KA")
    try:
        p = r.pubsub()
        p.subscribe("__keyspace@0__:k")
        wait_for(lambda: p.get_message(timeout=1)["type"] == "subscribe")
        assert gcra(r, "k", 0, 1, 3600)[0] == 0
        assert gcra(r, "k", 0, 1, 3600)[0] == 1   # refused: no event
        r.set("marker", 1)
        r.delete("k")
        events = []
        while True:
            m = p.get_message(timeout=2)
            if m is None:
                break
            events.append(s(m["data"]))
            if events[-1] == "del":
                break
        assert events == ["set", "expire", "del"]
        p.close()
    finally:
        r.config_set("notify-keyspace-events", "")


def test_multi_exec_and_watch(t, timed):
    t0 = future_ms(t)
    pipe = t.pipeline(transaction=True)
    for _ in range(3):
        pipe.execute_command(*gcra_argv("k", 1, 1, 10, at=t0))
    replies = [[int(x) for x in rep] for rep in pipe.execute()]
    assert replies == [[0, 2, 1, -1, 10], [0, 2, 0, -1, 20], [1, 2, 0, 10, 20]]
    # only an admitted request touches a WATCHed key
    other = timed.client()
    with t.pipeline(transaction=True) as w:
        w.watch("k")
        other.execute_command(*gcra_argv("k", 1, 1, 10, at=t0))   # refused
        w.multi()
        w.get("k")
        assert w.execute() == [str(t0 + 20_000_000).encode()]
    with t.pipeline(transaction=True) as w:
        w.watch("k")
        other.execute_command(*gcra_argv("k", 1, 1, 10, at=t0 + 10_000_000))  # admitted
        w.multi()
        w.get("k")
        with pytest.raises(Exception):
            w.execute()
    other.close()


def test_command_docs_and_info(raw):
    info = raw.execute("COMMAND", "INFO", "GCRA")[0]
    assert info[0] == b"gcra" and info[1] == -5
    assert set(info[2]) >= {b"write", b"denyoom", b"fast"}
    assert info[3:6] == [1, 1, 1]
    spec = dict(zip(info[8][0][0::2], info[8][0][1::2]))
    assert set(spec[b"flags"]) == {b"RW", b"access", b"update"}
    docs = raw.execute("COMMAND", "DOCS", "GCRA")
    body = dict(zip(docs[1][0::2], docs[1][1::2]))
    names = [dict(zip(a[0::2], a[1::2]))[b"name"] for a in body[b"arguments"]]
    assert names == [b"key", b"max_burst", b"tokens_per_period", b"period", b"count"]
    assert dict(zip(body[b"arguments"][4][0::2], body[b"arguments"][4][1::2]))[b"token"] == \
        b"TOKENS"
    assert raw.execute("COMMAND", "GETKEYS", "GCRA", "mykey", 1, 1, 1) == [b"mykey"]


# --------------------------------------------------------------------------
# replication, AOF, DUMP/RESTORE, MIGRATE

def test_replicas_and_the_aof_get_set_pxat():
    """The master writes `SET key tat PXAT ms` to its AOF and its replica;
    the replica holds what the master holds; a refusal sends nothing; the
    AOF loads back into the same state. (A replica without the module cannot
    load a floodgate master's RDB, which carries the module's aux data: the
    move through a server without the module is MIGRATE's, below.)"""
    master = Server(["--appendonly", "yes"])
    master.start()
    replicas = [Server(["--replicaof", "127.0.0.1", master.port])]
    try:
        for rep in replicas:
            rep.start()
        m = master.client()
        rcs = [rep.client() for rep in replicas]
        for rc in rcs:
            wait_for(lambda rc=rc: rc.info("replication")["master_link_status"] == "up",
                     timeout=20)
        keys = ["a", "b", "c"]
        for i, key in enumerate(keys):
            for _ in range(i + 1):
                assert gcra(m, key, 2, 1, 3600)[0] == 0
        # one token of 100 us: the TAT is less than a ms ahead, and the
        # expiry sent is rounded up (the key may be gone before it is read)
        assert gcra(m, "sub", 1, 10000, 1)[0] == 0
        m.delete("sub")
        # (the AOF's size: the replication offset also counts the master's
        # periodic PINGs)
        aof_size = stream_position(m)[1]
        assert gcra(m, "a", 0, 1, 3600)[0] == 1      # refused
        assert gcra(m, "z", 0, 1, 3600, tokens=2)[0] == 1  # never fits
        assert stream_position(m)[1] == aof_size
        states = {k: key_state(m, k) for k in keys}
        for rc in rcs:
            wait_replica_synced(m, rc)
            assert {k: key_state(rc, k) for k in keys} == states
            assert rc.exists("z") == 0
        sets = [[s(x) for x in cmd] for f in aof_files(master) if f.endswith(".aof")
                for cmd in read_aof_commands(f) or [] if cmd[0].upper() == b"SET"]
        last = {cmd[1]: cmd for cmd in sets}
        for k in keys:
            tat, ms = states[k]
            assert last[k] == ["SET", k, tat, "PXAT", str(ms)]
        tat = int(last["sub"][2])
        assert tat % 1000 != 0 and last["sub"][3:] == ["PXAT", str(tat // 1000 + 1)]
        assert len(sets) == 7
        before = digest(m)
        master.restart()
        m = master.client()
        assert digest(m) == before
        assert {k: key_state(m, k) for k in keys} == states
        assert gcra(m, "c", 2, 1, 3600)[0] == 1       # c is full: 3 of 3 used
    finally:
        for rep in replicas:
            rep.cleanup()
        master.cleanup()


@pytest.fixture
def timed_pair(timed):
    """A second explicit-time server, and a server without the module."""
    other = Server(["--floodgate.explicit-time", "yes"])
    plain = Server(module=False)
    other.start()
    plain.start()
    yield other, plain
    other.cleanup()
    plain.cleanup()


def test_dump_restore_and_migrate_continue_the_limit(t, timed, timed_pair):
    """A key moved by DUMP/RESTORE or MIGRATE, also through a server that
    has no module at all, answers on arrival as it would have where it was."""
    other, plain = timed_pair
    o, p = other.client(), plain.client()
    t0 = future_ms(t)
    args = (4, 10, 60)   # capacity 5, one token per 6 s
    model, at = ModelKey(), t0
    rng = random.Random(12)
    drift_ms = 0  # how far the MIGRATEs since the last write may have moved the expiry

    def step(c):
        nonlocal at, drift_ms
        at += rng.randrange(0, 4_000_000)
        expected = model.call(args + (1,), at)
        assert gcra(c, "k", *args, at=at) == expected
        assert s(c.get("k")) == str(model.tat)
        if expected[0] == 0:
            assert c.execute_command("PEXPIRETIME", "k") == model.expire_ms
            drift_ms = 0

    def migrate(source, target):
        # MIGRATE sends the TTL relative: the expiry may move by the time
        # the transfer took, plus a millisecond for each server's clock,
        # which both read in whole milliseconds. Two MIGRATEs with no
        # write between add up (it was checked against the last one's
        # time alone: 3 ms after two hops, with 0.89 ms for the second)
        nonlocal drift_ms
        start = time.monotonic()
        source.execute_command("MIGRATE", "127.0.0.1", target.port, "k", 0, 5000)
        drift_ms += (time.monotonic() - start) * 1000 + 2
        c = target.client()
        assert source.exists("k") == 0 and s(c.get("k")) == str(model.tat)
        assert 0 <= c.execute_command("PEXPIRETIME", "k") - model.expire_ms <= drift_ms
        c.close()

    for _ in range(4):
        step(t)
    payload = t.dump("k")
    o.restore("k", model.expire_ms, payload, absttl=True)
    for _ in range(3):
        step(o)
    # MIGRATE from the second server to the plain one, and on to the first
    migrate(o, plain)
    t.delete("k")
    migrate(p, timed)
    for _ in range(5):
        step(t)
    o.close()
    p.close()


# --------------------------------------------------------------------------
# a server that has its own GCRA

def test_a_taken_name_leaves_the_server_command():
    """Where GCRA is the server's (here ECHO renamed, as on 8.8 it is the
    server's own), floodgate loads, logs it, and the server's command
    stays."""
    with Server(["--rename-command", "ECHO", "GCRA"]) as srv, RawClient(srv.port) as c:
        assert b"floodgate" in str(c.execute("MODULE", "LIST")).encode()
        assert c.execute("GCRA", "hello") == b"hello"
        assert c.execute("COMMAND", "INFO", "GCRA")[0][0] == b"echo"
        assert c.execute("FG.TOKEN", "k", 5, 1)[:3] == [1, 5, 4]
        assert "floodgate: the gcra commands are left out: gcra is already a command" \
            in read_log(srv)
        info = c.execute("INFO", "floodgate_command_families").decode()
        assert "floodgate_gcra:status=left_out,reason=name_taken,command=gcra" in info, info

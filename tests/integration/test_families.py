"""FG.FIXED, FG.SLIDING, FG.SLIDELOG, FG.TOKEN, FG.LEAKY, FG.GCRA, FG.PEEK,
FG.RESET, FG.INSPECT (docs/commands.md)."""

import time

import pytest
import redis

from harness import T0, digest, digest_value, s, slidelog_stamps, state

FAMILIES = ["FIXED", "SLIDING", "SLIDELOG", "TOKEN", "LEAKY", "GCRA"]
BUCKET = {"TOKEN", "LEAKY", "GCRA"}
WINDOWED = {"FIXED", "SLIDING"}  # aligned to the epoch

# limit 5, slow: a 60 s window, or one unit back every 10 s
SLOW = {
    "FIXED": (5, 60000),
    "SLIDING": (5, 60000),
    "SLIDELOG": (5, 60000),
    "TOKEN": (5, 0.1),
    "LEAKY": (5, 0.1),
    "GCRA": (5, 5, 50000),
}
SLOW_W = 60000   # window of the windowed families
SLOW_T = 10000   # emission interval of the bucket families (ms)

# limit 2, fast: a 200 ms window, or one unit back every 100 ms
FAST = {
    "FIXED": (2, 200),
    "SLIDING": (2, 200),
    "SLIDELOG": (2, 200),
    "TOKEN": (2, 10),
    "LEAKY": (2, 10),
    "GCRA": (2, 2, 200),
}

# the longest a denied request of cost <= limit may wait, per family (ms)
RETRY_BOUND = {
    "FIXED": SLOW_W,
    "SLIDING": 2 * SLOW_W,
    "SLIDELOG": SLOW_W,
    "TOKEN": 5 * SLOW_T,
    "LEAKY": 5 * SLOW_T,
    "GCRA": 5 * SLOW_T,
}


def fg(c, fam, key, args, *extra):
    return [int(x) for x in c.execute_command("FG." + fam, key, *args, *extra)]


def peek(c, fam, key, args, *extra):
    return [int(x) for x in c.execute_command("FG.PEEK", fam, key, *args, *extra)]


def slow(c, fam, key="k", *extra):
    return fg(c, fam, key, SLOW[fam], *extra)


# Decisions whose answers depend on the time are made at chosen times: `AT`
# on the explicit-time server (the `t` fixture). T0 is 20 s into a 60 s
# window and on a whole second; MS is a millisecond in microseconds.
MS = 1000
SLOW_END = 40000  # ms from T0 to the end of its SLOW_W window


def slow_at(c, fam, at_us, *extra):
    return slow(c, fam, "k", *extra, "AT", at_us)


def elapsed_ms(start_ns):
    """Milliseconds since time.time_ns() was start_ns, as a bound on what
    the server's clock (the same clock) moved meanwhile."""
    return (time.time_ns() - start_ns) / 1e6


fam_param = pytest.mark.parametrize("fam", FAMILIES)


# --------------------------------------------------------------------------
# exhausting the limit

@fam_param
def test_exhaust_and_count_down(t, fam):
    # five admissions 1 ms apart, then a denial 5 ms after the first
    reset = {"FIXED": lambda i: SLOW_END - i,
             "SLIDING": lambda i: SLOW_END + SLOW_W - i,   # the next window empties it
             "SLIDELOG": lambda i: SLOW_W}                 # the newest entry leaves last
    for i in range(5):
        rep = slow_at(t, fam, T0 + i * MS)
        want = (i + 1) * SLOW_T - i if fam in BUCKET else reset[fam](i)
        assert rep == [1, 5, 4 - i, -1, want], (i, rep)
    denied = {
        "FIXED": [0, 5, 0, SLOW_END - 5, SLOW_END - 5],
        # the next window, plus the time for prev (5) to weigh <= 4: W/5
        "SLIDING": [0, 5, 0, SLOW_END - 5 + SLOW_W // 5, SLOW_END + SLOW_W - 5],
        # the first entry leaves one window after it came
        "SLIDELOG": [0, 5, 0, SLOW_W - 5, SLOW_W - 1],
    }
    # buckets: one unit comes back T after the first request
    want = denied.get(fam, [0, 5, 0, SLOW_T - 5, 5 * SLOW_T - 5])
    assert slow_at(t, fam, T0 + 5 * MS) == want
    assert want[3] <= RETRY_BOUND[fam]


@fam_param
def test_denied_leaves_state_unchanged(t, fam):
    for _ in range(5):
        assert slow_at(t, fam, T0)[0] == 1
    st = state(t, "k")
    dv = digest_value(t, "k")
    d = digest(t)
    pttl = t.pttl("k")
    dirty = t.info("persistence")["rdb_changes_since_last_save"]
    for _ in range(3):
        rep = slow_at(t, fam, T0 + MS)
        assert rep[0] == 0
        rep = slow_at(t, fam, T0 + MS, "COST", 2)
        assert rep[0] == 0
    assert state(t, "k") == st
    assert digest_value(t, "k") == dv
    assert digest(t) == d
    assert t.pttl("k") <= pttl
    assert t.info("persistence")["rdb_changes_since_last_save"] == dirty


@fam_param
def test_allowed_changes_state(t, fam):
    slow_at(t, fam, T0)
    st = state(t, "k")
    dv = digest_value(t, "k")
    d = digest(t)
    dirty = t.info("persistence")["rdb_changes_since_last_save"]
    slow_at(t, fam, T0)
    assert t.info("persistence")["rdb_changes_since_last_save"] > dirty
    assert state(t, "k") != st
    assert digest_value(t, "k") != dv
    assert digest(t) != d


@fam_param
def test_reset_after_matches_pttl(r, fam):
    # the server's clock: the TTL is reset_after_ms from the decision, less
    # what passed until PTTL (rounded up to the ms either way)
    for _ in range(3):
        start = time.time_ns()
        rep = slow(r, fam)
        pttl = r.pttl("k")
        assert rep[0] == 1
        assert rep[4] - elapsed_ms(start) - 1 <= pttl <= rep[4] + 1, (rep, pttl)


@fam_param
def test_cost(t, fam):
    rep = slow_at(t, fam, T0, "COST", 3)
    assert rep[:4] == [1, 5, 2, -1], rep
    if fam in BUCKET:
        assert rep[4] == 3 * SLOW_T
    st = state(t, "k")
    rep = slow_at(t, fam, T0 + MS, "COST", 3)
    assert rep[:3] == [0, 5, 2], rep
    assert 0 < rep[3] <= RETRY_BOUND[fam]
    if fam in BUCKET:
        # one more unit must come back: T after the first request
        assert rep[3] == SLOW_T - 1, rep
    assert state(t, "k") == st
    rep = slow_at(t, fam, T0 + MS, "cost", 2)  # keyword is case-insensitive
    assert rep[:4] == [1, 5, 0, -1], rep
    # more than the limit can never fit
    rep = slow_at(t, fam, T0 + MS, "COST", 6)
    assert rep[:4] == [0, 5, 0, -1], rep


@fam_param
def test_cost_above_limit_on_fresh_key(r, fam):
    d = digest(r)
    rep = slow(r, fam, "k", "COST", 6)
    assert rep[:4] == [0, 5, 5, -1], rep
    assert r.exists("k") == 0
    assert digest(r) == d


@fam_param
def test_cost_equal_to_limit(t, fam):
    rep = slow_at(t, fam, T0, "COST", 5)
    assert rep[:4] == [1, 5, 0, -1], rep
    rep = slow_at(t, fam, T0, "COST", 1)
    assert rep[:3] == [0, 5, 0] and rep[3] > 0, rep


@fam_param
def test_cost_zero_fresh_key_writes_nothing(r, fam):
    d = digest(r)
    rep = slow(r, fam, "k", "COST", 0)
    assert rep == [1, 5, 5, -1, 0], rep
    assert r.exists("k") == 0
    assert digest(r) == d


@fam_param
def test_cost_zero_existing_key_writes_nothing(t, fam):
    slow_at(t, fam, T0, "COST", 2)
    st = state(t, "k")
    pttl = t.pttl("k")
    dirty = t.info("persistence")["rdb_changes_since_last_save"]
    time.sleep(0.05)  # the TTL runs on the server's clock, at least 50 ms
    rep = slow_at(t, fam, T0 + MS, "COST", 0)
    assert rep[:4] == [1, 5, 3, -1], rep
    assert rep[4] > 0
    assert state(t, "k") == st
    assert t.pttl("k") <= pttl - 40
    assert t.info("persistence")["rdb_changes_since_last_save"] == dirty


@fam_param
def test_cost_zero_on_exhausted_key(t, fam):
    slow_at(t, fam, T0, "COST", 5)
    st = state(t, "k")
    rep = slow_at(t, fam, T0, "COST", 0)
    # nothing requested, so nothing to deny; nothing left either
    assert rep[1:3] == [5, 0], rep
    assert state(t, "k") == st


@fam_param
def test_peek_fresh_key(t, fam):
    d = digest(t)
    p = peek(t, fam, "k", SLOW[fam], "AT", T0)
    assert t.exists("k") == 0
    assert digest(t) == d
    real = slow_at(t, fam, T0)
    assert p == real and p[:4] == [1, 5, 4, -1], (p, real)


@fam_param
def test_peek_matches_real_call(t, fam):
    for i, cost in enumerate((2, 1, 3, 2, 5, 0, 1)):
        at = T0 + i * 7 * MS
        st = state(t, "k")
        dv = digest_value(t, "k") if st is not None else None
        dirty = t.info("persistence")["rdb_changes_since_last_save"]
        p = peek(t, fam, "k", SLOW[fam], "COST", cost, "AT", at)
        assert state(t, "k") == st
        if st is not None:
            assert digest_value(t, "k") == dv
        assert t.info("persistence")["rdb_changes_since_last_save"] == dirty
        real = slow_at(t, fam, at, "COST", cost)
        assert p == real, (cost, p, real)


@fam_param
def test_peek_on_exhausted_key(t, fam):
    slow_at(t, fam, T0, "COST", 5)
    p = peek(t, fam, "k", SLOW[fam], "AT", T0 + MS)
    real = slow_at(t, fam, T0 + MS)
    assert p == real and p[:3] == [0, 5, 0] and p[3] > 0, (p, real)


@fam_param
def test_peek_family_keyword_case_insensitive(r, fam):
    rep = [int(x) for x in r.execute_command("FG.PEEK", fam.lower(), "k", *SLOW[fam])]
    assert rep[:4] == [1, 5, 4, -1]
    assert r.exists("k") == 0


@fam_param
def test_reset(t, fam):
    slow_at(t, fam, T0, "COST", 5)
    assert slow_at(t, fam, T0)[0] == 0
    assert t.execute_command("FG.RESET", "k") == 1
    assert t.exists("k") == 0
    assert t.execute_command("FG.RESET", "k") == 0
    assert slow_at(t, fam, T0)[:3] == [1, 5, 4]


def test_reset_absent_key(r):
    assert r.execute_command("FG.RESET", "nope") == 0


def test_reset_refuses_other_types(r):
    r.rpush("l", "x")
    with pytest.raises(redis.ResponseError) as ei:
        r.execute_command("FG.RESET", "l")
    assert str(ei.value).startswith("WRONGTYPE")
    assert r.llen("l") == 1


def test_inspect_absent_is_nil(r):
    assert r.execute_command("FG.INSPECT", "nope") is None


FIELDS = {
    "FIXED": {"window_start_us", "count"},
    "SLIDING": {"window_start_us", "count", "prev_count"},
    "TOKEN": {"tat_ns"},
    "LEAKY": {"tat_ns"},
    "GCRA": {"tat_ns"},
}


@fam_param
def test_inspect_fields(r, fam):
    t0 = time.time_ns()
    slow(r, fam, "k", "COST", 3)
    t1 = time.time_ns()
    st = state(r, "k")
    assert isinstance(st, dict) and st, st
    if fam in FIELDS:
        assert FIELDS[fam] <= set(st), st
    if fam in WINDOWED:
        # the window of the server's clock, somewhere between t0 and t1
        assert int(st["count"]) == 3
        if fam == "SLIDING":
            assert int(st["prev_count"]) == 0
        start_us = int(st["window_start_us"])
        assert start_us % (SLOW_W * 1000) == 0
        assert start_us <= t1 // 1000 and t0 // 1000 < start_us + SLOW_W * 1000
    elif fam in BUCKET:
        tat = int(st["tat_ns"])
        T = SLOW_T * 1_000_000
        assert t0 // 1000 * 1000 + 3 * T <= tat <= t1 + 3 * T + 1000
    else:
        # the log: three timestamps within the call
        stamps = slidelog_stamps(st)
        assert len(stamps) == 3, st
        for x in stamps:
            assert t0 // 1000 <= x <= t1 // 1000 + 1, (st, t0, t1)


def test_slidelog_inspect_lists_entries_oldest_first(r):
    for cost in (1, 2, 1):
        fg(r, "SLIDELOG", "k", (10, 60000), "COST", cost)
        time.sleep(0.002)
    stamps = slidelog_stamps(state(r, "k"))
    assert len(stamps) == 4, stamps
    assert stamps == sorted(stamps)
    assert stamps[1] == stamps[2]  # COST 2: two entries at the same time
    assert stamps[0] < stamps[1] < stamps[3]


# --------------------------------------------------------------------------
# real time: refill and expiry

@fam_param
def test_waiting_retry_after_is_enough(t, fam):
    # enough, and rounded up by less than a millisecond: 1 ms earlier is
    # still too early
    args = FAST[fam]
    reps = [fg(t, fam, "f", args, "AT", T0) for _ in range(3)]
    assert [x[0] for x in reps] == [1, 1, 0], reps
    retry = reps[2][3]
    assert 0 < retry <= 400, reps
    assert peek(t, fam, "f", args, "AT", T0 + (retry - 1) * MS)[0] == 0
    rep = fg(t, fam, "f", args, "AT", T0 + retry * MS)
    assert rep[0] == 1, (reps, rep)


@fam_param
def test_refill_over_time(r, fam):
    # the server's clock: denied while no unit can have come back (the
    # buckets and the log give one back after 100 and 200 ms; a window may
    # roll at any time), and the full capacity is back after more than two
    # windows or refill times
    args = FAST[fam]
    start = time.time_ns()
    fg(r, fam, "f", args, "COST", 2)
    rep = fg(r, fam, "f", args)
    unit_back_ms = 200 if fam == "SLIDELOG" else 100
    if fam not in WINDOWED and elapsed_ms(start) < unit_back_ms:
        assert rep[0] == 0, rep
    time.sleep(0.45)
    rep = peek(r, fam, "f", args, "COST", 2)
    assert rep[:4] == [1, 2, 0, -1], rep


@fam_param
def test_key_expires_when_empty(t, fam):
    # the state is empty 150 ms after T0 + 50 ms for FIXED (its window
    # ends), 200 ms for the log and the buckets, 350 ms for SLIDING (the next
    # window still weighs the count); the key lives that long on the
    # server's clock
    args = FAST[fam]
    start = time.time_ns()
    rep = fg(t, fam, "f", args, "COST", 2, "AT", T0 + 50 * MS)
    pttl = t.pttl("f")
    elapsed = elapsed_ms(start)
    assert rep[:2] == [1, 2]
    assert rep[4] == {"FIXED": 150, "SLIDING": 350, "SLIDELOG": 200}.get(fam, 200), rep
    if elapsed < rep[4]:
        assert rep[4] - elapsed - 1 <= pttl <= rep[4] + 1, (pttl, rep, elapsed)
    time.sleep(rep[4] / 1000.0 + 0.02)
    assert t.exists("f") == 0


@pytest.mark.parametrize("fam", sorted(BUCKET))
def test_bucket_partial_refill(t, fam):
    args = FAST[fam]  # T = 100 ms, capacity 2
    fg(t, fam, "f", args, "COST", 2, "AT", T0)
    rep = fg(t, fam, "f", args, "AT", T0 + 120 * MS)
    assert rep[0] == 1, rep
    rep = fg(t, fam, "f", args, "AT", T0 + 120 * MS)
    assert rep[:4] == [0, 2, 0, 80], rep


def test_sliding_weights_previous_window(t):
    # limit 10 per 1 s window: fill the window, then in the next one the
    # previous count still weighs 10 * (1 - elapsed/W), remaining is
    # floor(10 - that)
    W = 1000
    assert fg(t, "SLIDING", "s", (10, W), "COST", 10, "AT", T0)[0] == 1
    for elapsed_ms_, remaining in ((0, 0), (1, 0), (99, 0), (100, 1), (250, 2), (299, 2),
                                   (300, 3), (350, 3), (999, 9)):
        rep = peek(t, "SLIDING", "s", (10, W), "COST", 0, "AT", T0 + (W + elapsed_ms_) * MS)
        assert rep[2] == remaining, (elapsed_ms_, rep)
    # two windows on, nothing of it is left
    assert peek(t, "SLIDING", "s", (10, W), "COST", 0, "AT", T0 + 2 * W * MS)[2] == 10


def test_slidelog_is_exact(t):
    # entries leave the log one by one, exactly one window after admission
    # (decided at chosen times: AT on the explicit-time server)
    W = 300
    assert fg(t, "SLIDELOG", "l", (3, W), "AT", T0) == [1, 3, 2, -1, 300]
    assert fg(t, "SLIDELOG", "l", (3, W), "COST", 2, "AT", T0 + 100_000) == [1, 3, 0, -1, 300]
    assert fg(t, "SLIDELOG", "l", (3, W), "AT", T0 + 100_000) == [0, 3, 0, 200, 300]
    # 1 us before the first entry leaves: still full, the wait rounded up
    assert fg(t, "SLIDELOG", "l", (3, W), "AT", T0 + 299_999) == [0, 3, 0, 1, 101]
    assert fg(t, "SLIDELOG", "l", (3, W), "AT", T0 + 300_000) == [1, 3, 0, -1, 300]
    # the next two leave together, 400 ms after the start
    assert fg(t, "SLIDELOG", "l", (3, W), "AT", T0 + 300_000) == [0, 3, 0, 100, 300]
    assert fg(t, "SLIDELOG", "l", (3, W), "COST", 2, "AT", T0 + 400_000) == [1, 3, 0, -1, 300]


def test_fixed_window_is_epoch_aligned(t):
    # windows of 250 ms start at multiples of 250 ms since the epoch (T0 is
    # one): 1.234567 s after T0 is 15.433 ms before the end of the window
    # that began at T0 + 1 s
    W = 250
    at = T0 + 1_234_567
    rep = fg(t, "FIXED", "w", (1, W), "AT", at)
    assert rep == [1, 1, 0, -1, 16], rep
    rep = fg(t, "FIXED", "w", (1, W), "AT", at)
    assert rep == [0, 1, 0, 16, 16], rep
    assert fg(t, "FIXED", "w", (1, W), "AT", T0 + 1_249_999)[0] == 0
    assert fg(t, "FIXED", "w", (1, W), "AT", T0 + 1_250_000) == [1, 1, 0, -1, 250]


# --------------------------------------------------------------------------
# shared bucket state, family mismatch

def test_bucket_families_share_state(r):
    # all four with T = 10 s and capacity 5, on the server's clock
    # (CL.THROTTLE takes no AT): the first unit comes back T after the
    # first call, less what passed since
    start = time.time_ns()
    assert fg(r, "TOKEN", "b", (5, 0.1))[:3] == [1, 5, 4]
    assert fg(r, "TOKEN", "b", (5, 0.1))[:3] == [1, 5, 3]
    assert fg(r, "GCRA", "b", (5, 5, 50000))[:3] == [1, 5, 2]
    assert fg(r, "LEAKY", "b", (5, 0.1))[:3] == [1, 5, 1]
    rep = [int(x) for x in r.execute_command("CL.THROTTLE", "b", 4, 5, 50)]
    assert rep[:3] == [0, 5, 0], rep
    assert rep[4] == 50
    rep = fg(r, "GCRA", "b", (5, 5, 50000))
    assert rep[:3] == [0, 5, 0]
    assert SLOW_T - elapsed_ms(start) - 1 <= rep[3] <= SLOW_T, rep
    assert peek(r, "TOKEN", "b", (5, 0.1))[:3] == [0, 5, 0]


def test_bucket_family_change_of_parameters(r):
    # the TAT is kept: the same state read with a larger capacity has room
    fg(r, "TOKEN", "b", (2, 0.1), "COST", 2)
    assert fg(r, "TOKEN", "b", (2, 0.1))[0] == 0
    rep = fg(r, "LEAKY", "b", (4, 0.1))
    assert rep[:3] == [1, 4, 1], rep


PAIRS = [(a, b) for a in FAMILIES + ["CL"] for b in FAMILIES + ["CL"]
         if a != b and not ({a, b} <= BUCKET | {"CL"})]


def _call(c, fam, key):
    if fam == "CL":
        return c.execute_command("CL.THROTTLE", key, 4, 5, 50)
    return c.execute_command("FG." + fam, key, *SLOW[fam])


@pytest.mark.parametrize("a,b", PAIRS, ids=["%s-then-%s" % p for p in PAIRS])
def test_family_mismatch_is_wrongtype(r, a, b):
    _call(r, a, "k")
    d = digest(r)
    st = state(r, "k")
    with pytest.raises(redis.ResponseError) as ei:
        _call(r, b, "k")
    assert str(ei.value).startswith("WRONGTYPE"), str(ei.value)
    if b != "CL":
        with pytest.raises(redis.ResponseError) as ei:
            r.execute_command("FG.PEEK", b, "k", *SLOW[b])
        assert str(ei.value).startswith("WRONGTYPE"), str(ei.value)
    assert digest(r) == d
    assert state(r, "k") == st


@fam_param
@pytest.mark.parametrize("kind", ["string", "list", "hash", "zset"])
def test_other_type_is_wrongtype(r, fam, kind):
    if kind == "string":
        r.set("k", "hello")
    elif kind == "list":
        r.rpush("k", "a")
    elif kind == "hash":
        r.hset("k", "a", "b")
    else:
        r.zadd("k", {"a": 1})
    d = digest(r)
    for cmd in (["FG." + fam, "k", *SLOW[fam]], ["FG.PEEK", fam, "k", *SLOW[fam]]):
        with pytest.raises(redis.ResponseError) as ei:
            r.execute_command(*cmd)
        msg = str(ei.value)
        if kind == "string" and fam in BUCKET:
            # a string may be a redis-cell state; "hello" is not one
            assert msg.startswith("WRONGTYPE") or msg.startswith("ERR"), msg
        else:
            assert msg.startswith("WRONGTYPE"), msg
    assert digest(r) == d
    assert r.ping()


# --------------------------------------------------------------------------
# fractional and fast rates

def test_token_fractional_refill(t):
    assert fg(t, "TOKEN", "t", (1, 0.5), "AT", T0) == [1, 1, 0, -1, 2000]
    assert fg(t, "TOKEN", "t", (1, 0.5), "AT", T0 + 30 * MS) == [0, 1, 0, 1970, 1970]


def test_leaky_fractional_leak(t):
    # 2.5 per second: one unit every 400 ms
    assert fg(t, "LEAKY", "t", (3, 2.5), "COST", 3, "AT", T0) == [1, 3, 0, -1, 1200]
    assert fg(t, "LEAKY", "t", (3, 2.5), "AT", T0 + 30 * MS) == [0, 3, 0, 370, 1170]


def test_gcra_fractional_count(t):
    # 0.5 per 1000 ms: one unit every 2 s
    assert fg(t, "GCRA", "g", (2, 0.5, 1000), "COST", 2, "AT", T0) == [1, 2, 0, -1, 4000]
    assert fg(t, "GCRA", "g", (2, 0.5, 1000), "AT", T0 + 30 * MS) == [0, 2, 0, 1970, 3970]


def test_gcra_fractional_period(t):
    # 4 per 2.5 ms: T = 625 us
    assert fg(t, "GCRA", "g", (1000, 4, 2.5), "COST", 1000, "AT", T0) == [1, 1000, 0, -1, 625]
    assert int(state(t, "g")["tat_ns"]) == (T0 + 625 * MS) * 1000
    # 1 ms later, one unit (and a 375 us start on the next) is back
    assert peek(t, "GCRA", "g", (1000, 4, 2.5), "COST", 0, "AT", T0 + MS)[2] == 1


def test_gcra_sub_millisecond_period(r):
    # one unit per 10 us: 100000 per second; a client is slower than that
    n = 300
    allowed = 0
    for _ in range(n):
        rep = fg(r, "GCRA", "g", (1, 1, 0.01))
        allowed += rep[0]
        assert rep[1] == 1
        if rep[0] == 1:
            assert rep[4] == 1, rep  # 10 us, rounded up to 1 ms
        else:
            assert rep[3] == 1, rep
    assert allowed >= 0.95 * n, allowed
    assert r.pttl("g") in (-2, 0, 1)  # ~10 us left: probably gone already


def test_gcra_sub_millisecond_period_rate_is_exact(r):
    # capacity 100000 at 100000/s: draining it takes 1 s, and 0.1 s later
    # exactly the units of 0.1 s have come back
    T_ns = 10_000
    rep = fg(r, "GCRA", "g", (100000, 1, 0.01), "COST", 100000)
    assert rep[:4] == [1, 100000, 0, -1], rep
    assert 990 <= rep[4] <= 1000, rep
    tat = int(state(r, "g")["tat_ns"])
    time.sleep(0.1)
    before = time.time_ns() // 1000 * 1000
    rep = peek(r, "GCRA", "g", (100000, 1, 0.01), "COST", 0)
    after = time.time_ns() // 1000 * 1000 + 1000
    dvt = T_ns * 100000
    lo = (dvt - (tat - before)) // T_ns
    hi = (dvt - (tat - after)) // T_ns
    assert lo <= rep[2] <= hi, (rep, lo, hi)
    assert rep[2] >= 9000, rep  # the 0.1 s slept, at least


def test_token_fast_refill_rate(r):
    # 50000 tokens per second, capacity 10: a 0.2 s loop cannot take more
    # than 10 + 50000 * elapsed
    t0 = time.monotonic()
    allowed = 0
    p = r.pipeline(transaction=False)
    for _ in range(2000):
        p.execute_command("FG.TOKEN", "t", 10, 50000, "COST", 5)
    reps = p.execute()
    elapsed = time.monotonic() - t0
    allowed = sum(int(x[0]) * 5 for x in reps)
    assert allowed <= 10 + 50000 * elapsed + 5, (allowed, elapsed)
    assert allowed >= 10


# --------------------------------------------------------------------------
# a clock that stepped back (docs "Time"): states from the future, set with
# the replication commands, never grant extra capacity

def _ok(reply):
    return reply in (b"OK", "OK")


@pytest.mark.usefixtures("effect_commands")  # a state from a repair tool
def test_future_fixed_window_keeps_its_count(r):
    W = 60000
    start = time.time_ns()
    now_us = start // 1000
    future_start = (now_us // (W * 1000) + 10) * W * 1000  # 10 windows ahead
    assert _ok(r.execute_command("FG.SETSTATE", "k", "fixed", future_start, 5,
                                 "PXAT", future_start // 1000 + W))
    rep = fg(r, "FIXED", "k", (5, W))
    assert rep[:3] == [0, 5, 0], rep
    # retry at the end of the stored window, which is in the future
    exp = (future_start + W * 1000 - now_us) / 1000
    assert exp - elapsed_ms(start) <= rep[3] <= exp + 1, (rep, exp)


@pytest.mark.usefixtures("effect_commands")  # a state from a repair tool
def test_future_sliding_window_counts_prev_fully(r):
    W = 60000
    now_us = time.time_ns() // 1000
    future_start = (now_us // (W * 1000) + 10) * W * 1000
    assert _ok(r.execute_command("FG.SETSTATE", "k", "sliding", future_start, 2, 3,
                                 "PXAT", future_start // 1000 + 2 * W))
    # treated as the very start of that window: estimate 3 + 2 = 5
    rep = peek(r, "SLIDING", "k", (6, W), "COST", 0)
    assert rep[2] == 1, rep
    rep = fg(r, "SLIDING", "k", (5, W))
    assert rep[:3] == [0, 5, 0], rep


@pytest.mark.usefixtures("effect_commands")  # a state from a repair tool
def test_future_bucket_keeps_its_arrival_time(r):
    # TAT 100 s ahead; T = 10 s, capacity 5: more than the whole bucket
    start = time.time_ns()
    tat = start + 100 * 10 ** 9
    assert _ok(r.execute_command("FG.SETSTATE", "k", "bucket", tat,
                                 "PXAT", tat // 10 ** 6 + 1))
    rep = fg(r, "TOKEN", "k", (5, 0.1))
    assert rep[:3] == [0, 5, 0], rep
    # one unit fits when the TAT is back within DVT - T = 40 s: in 60 s,
    # less what passed since
    passed = elapsed_ms(start)
    assert 60000 - passed <= rep[3] <= 60000 and 100000 - passed <= rep[4] <= 100000, rep
    assert state(r, "k")["tat_ns"] in (tat, str(tat), str(tat).encode())


@pytest.mark.usefixtures("effect_commands")  # a state from a repair tool
def test_future_slidelog_entries_still_count(r):
    W = 60000
    start = time.time_ns()
    future_us = start // 1000 + 600 * 10 ** 6  # 10 minutes ahead
    assert _ok(r.execute_command("FG.LOGAPPEND", "k", 0, future_us, 3,
                                 "PXAT", future_us // 1000 + W))
    rep = fg(r, "SLIDELOG", "k", (3, W))
    assert rep[:3] == [0, 3, 0], rep
    assert 600000 + W - elapsed_ms(start) <= rep[3] <= 600000 + W, rep
    rep = fg(r, "SLIDELOG", "k", (5, W), "COST", 2)
    assert rep[:3] == [1, 5, 0], rep
    # the new entries go after the future ones, the log stays ordered
    stamps = slidelog_stamps(state(r, "k"))
    assert stamps == sorted(stamps) and len(stamps) == 5, stamps


# --------------------------------------------------------------------------
# atomicity inside MULTI and scripts, odd keys, the largest log

@fam_param
def test_inside_multi(t, fam):
    p = t.pipeline(transaction=True)
    for _ in range(7):
        p.execute_command("FG." + fam, "k", *SLOW[fam], "AT", T0)
    reps = [[int(x) for x in rep] for rep in p.execute()]
    assert [x[0] for x in reps] == [1, 1, 1, 1, 1, 0, 0], reps
    assert [x[2] for x in reps] == [4, 3, 2, 1, 0, 0, 0], reps


@fam_param
def test_inside_lua(t, fam):
    script = "local out = {} for i = 1, 6 do out[i] = redis.call(ARGV[1], KEYS[1], " \
             "unpack(ARGV, 2)) end return out"
    reps = t.eval(script, 1, "k", "FG." + fam, *SLOW[fam], "AT", T0)
    reps = [[int(x) for x in rep] for rep in reps]
    assert [x[0] for x in reps] == [1, 1, 1, 1, 1, 0], reps
    peeked = t.eval("return redis.call('FG.PEEK', ARGV[1], KEYS[1], unpack(ARGV, 2))",
                    1, "k", fam, *SLOW[fam], "AT", T0)
    assert [int(x) for x in peeked][:3] == [0, 5, 0]


def test_readonly_script_may_peek(r, server):
    if tuple(int(x) for x in r.info("server")["redis_version"].split(".")[:2]) < (7, 0):
        pytest.skip("EVAL_RO needs Redis 7")
    fg(r, "TOKEN", "k", (5, 0.1), "COST", 2)
    rep = r.execute_command("EVAL_RO", "return redis.call('FG.PEEK', 'TOKEN', KEYS[1], 5, 0.1)",
                            1, "k")
    assert [int(x) for x in rep][:3] == [1, 5, 2]
    with pytest.raises(redis.ResponseError):
        r.execute_command("EVAL_RO", "return redis.call('FG.TOKEN', KEYS[1], 5, 0.1)", 1, "k")


@pytest.mark.parametrize("key", [b"", b"\x00\xff\r\n", "ключ".encode(), b"k" * 5000])
def test_odd_key_names(r, key):
    for fam in ("TOKEN", "FIXED", "SLIDELOG"):
        k = key + fam.encode()
        rep = fg(r, fam, k, SLOW[fam])
        assert rep[:3] == [1, 5, 4]
        assert state(r, k) is not None
        assert r.execute_command("FG.RESET", k) == 1


def test_slidelog_at_the_largest_limit(r):
    rep = fg(r, "SLIDELOG", "big", (100000, 60000), "COST", 100000)
    assert rep[:4] == [1, 100000, 0, -1]
    rep = fg(r, "SLIDELOG", "big", (100000, 60000))
    assert rep[:3] == [0, 100000, 0] and rep[3] > 0
    assert r.execute_command("MEMORY", "USAGE", "big") >= 8 * 100000
    assert r.execute_command("FG.RESET", "big") == 1


def test_slidelog_many_small_requests(r):
    p = r.pipeline(transaction=False)
    for _ in range(1500):
        p.execute_command("FG.SLIDELOG", "l", 1000, 60000)
    reps = p.execute()
    assert sum(int(x[0]) for x in reps) == 1000
    assert len(slidelog_stamps(state(r, "l"))) == 1000


def test_slidelog_cost_waits_for_enough_entries(t):
    W = 300
    fg(t, "SLIDELOG", "l", (5, W), "COST", 2, "AT", T0)
    fg(t, "SLIDELOG", "l", (5, W), "COST", 3, "AT", T0 + 100 * MS)
    # COST 3 needs the two old entries and one of the newer ones to leave
    rep = fg(t, "SLIDELOG", "l", (5, W), "COST", 3, "AT", T0 + 110 * MS)
    assert rep == [0, 5, 0, 290, 290], rep
    # COST 2 only needs the two old ones: 100 ms earlier
    rep = fg(t, "SLIDELOG", "l", (5, W), "COST", 2, "AT", T0 + 110 * MS)
    assert rep == [0, 5, 0, 190, 290], rep
    assert fg(t, "SLIDELOG", "l", (5, W), "COST", 3, "AT", T0 + W * MS)[0] == 0
    assert fg(t, "SLIDELOG", "l", (5, W), "COST", 2, "AT", T0 + W * MS)[:3] == [1, 5, 0]


# --------------------------------------------------------------------------
# random sequences against a model of each family

import random


def ms_up(us):
    """Microseconds as the replies give them: whole ms, rounded up."""
    return us if us < 0 else -(-us // MS)


class Model:
    """The documented algorithms, decided at the times given with AT (us).
    Windows and the log take one SLOW_W window, in which prev stays 0 and
    no entry leaves."""

    def __init__(self, fam, limit, W=None, T=None):
        self.fam, self.L = fam, limit
        self.W = W * MS if W else None
        self.T = T * MS if T else None
        self.count = 0
        self.log = []
        self.tat = None

    def decide(self, now, cost):
        L = self.L
        if self.fam in ("FIXED", "SLIDING"):
            W = self.W
            end = now - now % W + W
            fits = self.count + cost <= L
            after = self.count + cost if fits else self.count
            if fits or cost > L:
                retry = -1
            elif self.fam == "FIXED":
                retry = end - now
            else:
                # next window: prev = count weighs count * (W - e) / W
                slack = (L - cost) * W // self.count
                retry = end + (0 if slack >= W else W - slack) - now
            if self.fam == "FIXED":
                reset = end - now if after > 0 else 0
            else:
                reset = end + W - now if after > 0 else 0
            if fits and cost > 0:
                self.count = after
            return [int(fits), L, L - after, ms_up(retry), ms_up(reset)]
        if self.fam == "SLIDELOG":
            n = len(self.log)
            fits = n + cost <= L
            if fits or cost > L:
                retry = -1
            else:
                retry = self.log[n + cost - L - 1] + self.W - now
            if fits and cost > 0:
                self.log.extend([now] * cost)
            reset = self.log[-1] + self.W - now if self.log else 0
            return [int(fits), L, L - len(self.log), ms_up(retry), ms_up(reset)]
        # bucket
        T, dvt = self.T, self.T * L
        tat = max(self.tat or now, now)
        new_tat = tat + T * cost
        fits = new_tat - dvt <= now
        if fits:
            retry, ttl = -1, new_tat - now
            if cost > 0:
                self.tat = new_tat
        else:
            retry = new_tat - dvt - now if T * cost <= dvt else -1
            ttl = tat - now
        remaining = 0 if ttl >= dvt else (dvt - ttl) // T
        return [int(fits), L, remaining, ms_up(retry), ms_up(ttl)]


MODEL_PARAMS = {
    "FIXED": ((7, 60000), dict(W=60000)),
    "SLIDING": ((7, 60000), dict(W=60000)),
    "SLIDELOG": ((7, 60000), dict()),
    "TOKEN": ((7, 0.25), dict(T=4000)),
    "LEAKY": ((7, 0.25), dict(T=4000)),
    "GCRA": ((7, 3, 12000), dict(T=4000)),
}


@fam_param
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_sequence_matches_model(t, fam, seed):
    """30 requests at random times within 39 s after T0 (20 s into a
    window): the exact answers of the model."""
    args, kw = MODEL_PARAMS[fam]
    if fam == "SLIDELOG":
        kw = dict(W=60000)
    model = Model(fam, 7, **kw)
    rng = random.Random(seed * 100 + FAMILIES.index(fam))
    now = T0
    for i in range(30):
        cost = rng.choice([0, 1, 1, 1, 2, 2, 3, 5, 7, 8])
        now += rng.choice([0, 0, 1, 7, 250, 1300]) * MS + rng.randrange(MS)
        rep = fg(t, fam, "m", args, "COST", cost, "AT", now)
        exp = model.decide(now, cost)
        assert rep == exp, (i, cost, now - T0, rep, exp)


def decided_and_inspected(c, key, args, at_us):
    """FG.GCRA at at_us and FG.INSPECT of its key in one transaction: a key
    whose TTL is a few microseconds (1 ms, rounded up) is read before it
    can expire. Returns the stored TAT (ns)."""
    p = c.pipeline(transaction=True)
    p.execute_command("FG.GCRA", key, *args, "AT", at_us)
    p.execute_command("FG.INSPECT", key)
    decision, fields = p.execute()
    assert int(decision[0]) == 1, decision
    fields = s(fields)
    st = fields if isinstance(fields, dict) else dict(zip(fields[0::2], fields[1::2]))
    return int(st["tat_ns"])


def test_gcra_emission_interval_in_whole_nanoseconds(t):
    """docs: FG.GCRA's emission interval period_ms / count is kept in whole
    nanoseconds (rounded to the nearest): a fresh key's TAT is now + T."""
    assert decided_and_inspected(t, "a", (1, 1, 0.0104), T0) == T0 * 1000 + 10400
    assert decided_and_inspected(t, "b", (1, 3, 0.0104), T0) == T0 * 1000 + 3467  # 3466.67


def test_gcra_sub_microsecond_interval(t):
    """0.0004 ms per unit is a 400 ns interval: 2.5 million per second."""
    assert decided_and_inspected(t, "c", (1, 1, 0.0004), T0) == T0 * 1000 + 400


def test_gcra_interval_below_one_nanosecond_refused(r):
    with pytest.raises(redis.ResponseError, match="rate too high"):
        fg(r, "GCRA", "d", (1, 1000, 0.0001))
    assert r.exists("d") == 0


@fam_param
def test_watch_sees_writes_only(t, timed, fam):
    """Only an admitted request modifies the key: a WATCH survives denials,
    peeks and COST 0, and is broken by an admitted request."""
    other = timed.client()
    try:
        slow_at(t, fam, T0, "COST", 5)
        with t.pipeline(transaction=True) as p:
            p.watch("k")
            slow_at(other, fam, T0)                            # denied
            slow_at(other, fam, T0, "COST", 0)                 # cost 0
            peek(other, fam, "k", SLOW[fam], "AT", T0)         # peek
            other.execute_command("FG.INSPECT", "k")
            p.multi()
            p.set("marker", "1")
            assert p.execute() == [True]
        t.execute_command("FG.RESET", "k")
        with t.pipeline(transaction=True) as p:
            p.watch("k")
            assert slow_at(other, fam, T0)[0] == 1             # admitted
            p.multi()
            p.set("marker", "2")
            with pytest.raises(redis.WatchError):
                p.execute()
        assert t.get("marker") == b"1"
    finally:
        other.close()

"""CL.THROTTLE: drop-in for redis-cell 0.5 (docs/commands.md, last section)."""

import time

import pytest
import redis

from harness import state, digest, s

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


def throttle(c, key, *args):
    return [int(x) for x in c.execute_command("CL.THROTTLE", key, *args)]


def cell_secs(ns):
    """redis-cell rounding: seconds rounded up at millisecond granularity
    (1.0004 s -> 1, 1.001 s -> 2); -1 stays -1."""
    if ns == -1:
        return -1
    ms = ns // NS_PER_MS
    return -(-ms // 1000)


class CellModel:
    """The GCRA of docs/commands.md with redis-cell's parameters:
    T = trunc(period * 1e9 / count) ns, DVT = T * (max_burst + 1)."""

    def __init__(self, max_burst, count, period_s):
        self.T = (period_s * NS_PER_S) // count
        self.limit = max_burst + 1
        self.dvt = self.T * self.limit

    def decide(self, tat, now_ns, q):
        """-> (reply, next_tat). tat None means no state."""
        t = max(tat or 0, now_ns)
        inc = self.T * q
        new_tat = t + inc
        diff = now_ns - (new_tat - self.dvt)
        if diff >= 0:
            limited, retry, ttl = 0, -1, new_tat - now_ns
            nxt = new_tat if q > 0 else tat
        else:
            limited = 1
            retry = -diff if inc <= self.dvt else -1
            ttl = t - now_ns
            nxt = tat
        remaining = 0 if ttl >= self.dvt else (self.dvt - ttl) // self.T
        return [limited, self.limit, remaining, cell_secs(retry), cell_secs(ttl)], nxt


def server_now_ns():
    # the server reads its clock in microseconds
    return (time.time_ns() // 1000) * 1000


def elapsed_ms(start_ns):
    """Milliseconds since time.time_ns() was start_ns: a bound on what the
    server's clock (the same clock) moved meanwhile."""
    return (time.time_ns() - start_ns) / 1e6


def check_step(model, tat, q, rep, before, after, stored):
    """The server decided at a whole microsecond between before and after:
    some microsecond there must give the model's reply rep and leave the
    TAT the server stored (None: no key; a TAT already past is an empty
    bucket either way). Returns the stored TAT, which the next step starts
    from."""
    for now in range(before, after + 1001, 1000):
        got, nxt = model.decide(tat, now, q)
        if got != rep:
            continue
        if nxt == stored or ((nxt is None or nxt <= now) and (stored is None or stored <= now)):
            return stored
    raise AssertionError("no time in [before, after] gives %r and TAT %r (TAT before: %r, q %d)"
                         % (rep, stored, tat, q))


# ---------------------------------------------------------------------------

def test_readme_example(r):
    assert throttle(r, "user123", 15, 30, 60, 1) == [0, 16, 15, -1, 2]


def test_burst_then_limited(r):
    replies = [throttle(r, "user123", 15, 30, 60, 1) for _ in range(16)]
    for i, rep in enumerate(replies):
        # allowed, limit 16, remaining counts down to 0, retry -1, reset 2*(i+1) s
        assert rep == [0, 16, 15 - i, -1, 2 * (i + 1)], (i, rep)
    rep = throttle(r, "user123", 15, 30, 60, 1)
    assert rep[0] == 1
    assert rep[1] == 16
    assert rep[2] == 0
    assert rep[3] == 2  # just under 2 s, rounded up at ms granularity
    assert rep[4] == 32
    # still limited, nothing changed
    rep2 = throttle(r, "user123", 15, 30, 60, 1)
    assert rep2 == rep


def test_quantity_defaults_to_one(r):
    assert throttle(r, "k", 15, 30, 60) == [0, 16, 15, -1, 2]
    assert throttle(r, "k", 15, 30, 60) == [0, 16, 14, -1, 4]
    assert throttle(r, "k", 15, 30, 60, 1) == [0, 16, 13, -1, 6]


def test_quantity_n(r):
    assert throttle(r, "k", 15, 30, 60, 5) == [0, 16, 11, -1, 10]
    assert throttle(r, "k", 15, 30, 60, 11) == [0, 16, 0, -1, 32]
    rep = throttle(r, "k", 15, 30, 60, 3)
    assert rep[:3] == [1, 16, 0]
    assert rep[3] == 6  # three units come back in 6 s


def test_quantity_zero_fresh_key_creates_nothing(r):
    d = digest(r)
    assert throttle(r, "k", 15, 30, 60, 0) == [0, 16, 16, -1, 0]
    assert r.exists("k") == 0
    assert digest(r) == d


def test_quantity_zero_is_a_peek(r):
    start = time.monotonic()
    throttle(r, "k", 15, 30, 60, 3)
    st = state(r, "k")
    pttl1 = r.pttl("k")
    assert pttl1 > 0
    time.sleep(0.3)
    rep = throttle(r, "k", 15, 30, 60, 0)
    elapsed = time.monotonic() - start
    # A unit comes back every 2 s, and the server saw at most `elapsed`
    # between the two calls: a stall of 2 s (a loaded machine) gives one
    # back before the peek, which found 14 where 13 was asserted
    assert rep[0] == 0 and rep[1] == 16 and rep[3] == -1
    assert 13 <= rep[2] <= 13 + int(elapsed // 2), (rep, elapsed)
    assert max(0, int(6 - elapsed)) <= rep[4] <= 6, (rep, elapsed)
    assert state(r, "k") == st
    pttl2 = r.pttl("k")
    # the TTL was not refreshed: it kept going down
    assert pttl2 <= pttl1 - 250, (pttl1, pttl2)


def test_quantity_zero_peek_does_not_replicate_or_dirty(r):
    throttle(r, "k", 15, 30, 60, 3)
    info1 = r.info("persistence")["rdb_changes_since_last_save"]
    for _ in range(5):
        throttle(r, "k", 15, 30, 60, 0)
    info2 = r.info("persistence")["rdb_changes_since_last_save"]
    assert info2 == info1


def test_quantity_above_limit_never_fits(r):
    d = digest(r)
    rep = throttle(r, "k", 15, 30, 60, 17)
    assert rep == [1, 16, 16, -1, 0]
    assert r.exists("k") == 0
    assert digest(r) == d
    throttle(r, "k", 15, 30, 60, 4)
    rep = throttle(r, "k", 15, 30, 60, 100)
    assert rep[:4] == [1, 16, 12, -1]
    assert rep[4] == 8


def test_pttl_matches_reset_after(r):
    # T = 333333333 ns, limit 6: after i + 1 units the TAT is (i + 1) T after
    # the first call, and reset_after and PTTL are that less the time since
    start = time.time_ns()
    for i in range(4):
        rep = throttle(r, "k", 5, 3, 1, 1)
        pttl = r.pttl("k")
        since = elapsed_ms(start)
        assert rep[0] == 0
        ttl_ns = (i + 1) * 333333333
        # reset_after in seconds, rounded up
        assert cell_secs(ttl_ns - int(since * NS_PER_MS)) <= rep[4] <= cell_secs(ttl_ns), (i, rep)
        # PTTL at ms precision, rounded up
        assert ttl_ns / NS_PER_MS - since - 1 <= pttl <= -(-ttl_ns // NS_PER_MS) + 1, (i, pttl)


def test_pttl_tracks_state_at_ms_precision(r):
    # after N requests, PTTL ~ N*T ms (well below 1 s of precision)
    n = 7
    t_start = time.monotonic()
    for _ in range(n):
        throttle(r, "k", 99, 1000, 1, 1)  # T = 1 ms
    pttl = r.pttl("k")
    elapsed_ms = (time.monotonic() - t_start) * 1000
    assert n - elapsed_ms - 2 <= pttl <= n + 1, (pttl, elapsed_ms)


def test_inspect_tat_has_nanosecond_emission_interval(r):
    # count 3 per 1 s: T = trunc(1e9 / 3) = 333333333 ns; now is whole us, so
    # the stored TAT modulo 1000 shows T's sub-microsecond part exactly.
    t0 = server_now_ns()
    throttle(r, "k", 10, 3, 1, 1)
    t1 = server_now_ns()
    st = state(r, "k")
    assert st is not None and "tat_ns" in st, st
    tat = int(st["tat_ns"])
    assert t0 + 333333333 <= tat <= t1 + 333333333 + 1000
    assert tat % 1000 == 333
    throttle(r, "k", 10, 3, 1, 2)
    tat2 = int(state(r, "k")["tat_ns"])
    assert tat2 == tat + 2 * 333333333


def test_rate_above_1000_per_second_is_enforced(r):
    # max_burst 0, 2000 per second: T = 500 us, one at a time. The server and
    # the client share the wall clock, so each reply can be checked exactly:
    # - two admitted requests are at least T apart: the later reply arrives
    #   >= T after the earlier request was sent;
    # - a request sent >= T after the previous admitted reply is admitted.
    T = 0.0005
    allowed = 0
    sent = 0
    last_allowed_sent = last_allowed_recv = None
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.3:
        t_send = time.time()
        rep = throttle(r, "fast", 0, 2000, 1, 1)
        t_recv = time.time()
        sent += 1
        if rep[0] == 0:
            allowed += 1
            # at most 0.5 ms: 0 s at redis-cell's ms granularity
            assert rep[1:] == [1, 0, -1, 0], rep
            if last_allowed_sent is not None:
                assert t_recv - last_allowed_sent >= T - 2e-6, (t_recv - last_allowed_sent)
            last_allowed_sent, last_allowed_recv = t_send, t_recv
        else:
            assert rep[1:] == [1, 0, 0, 0], rep
            if last_allowed_recv is not None:
                assert t_send - last_allowed_recv < T + 2e-6, (t_send - last_allowed_recv)
    elapsed = time.monotonic() - t0
    assert allowed <= 2000 * elapsed + 1 + 5, (allowed, sent, elapsed)
    assert allowed >= 2


def test_rate_above_1000_per_second_pipelined(r):
    # 3000 requests arriving together: at 10000/s with burst 5 only a few
    # may pass, whatever the wall clock does between them
    t0 = time.monotonic()
    p = r.pipeline(transaction=False)
    for _ in range(3000):
        p.execute_command("CL.THROTTLE", "burst", 4, 10000, 1, 1)
    replies = p.execute()
    elapsed = time.monotonic() - t0
    allowed = sum(1 for rep in replies if int(rep[0]) == 0)
    assert allowed >= 5
    assert allowed <= 5 + 10000 * elapsed + 2, (allowed, elapsed)


def test_wrongtype_string_hello(r, server):
    r.set("k", "hello")
    with pytest.raises(redis.ResponseError) as ei:
        r.execute_command("CL.THROTTLE", "k", 15, 30, 60, 1)
    msg = str(ei.value)
    assert msg.startswith("WRONGTYPE") or msg.startswith("ERR"), msg
    assert r.ping()
    assert r.get("k") == b"hello"


@pytest.mark.parametrize("kind", ["list", "hash", "set", "zset"])
def test_wrongtype_other_types(r, kind):
    if kind == "list":
        r.rpush("k", "a")
    elif kind == "hash":
        r.hset("k", "a", "b")
    elif kind == "set":
        r.sadd("k", "a")
    else:
        r.zadd("k", {"a": 1})
    d = digest(r)
    with pytest.raises(redis.ResponseError) as ei:
        r.execute_command("CL.THROTTLE", "k", 15, 30, 60, 1)
    assert str(ei.value).startswith("WRONGTYPE"), str(ei.value)
    assert digest(r) == d
    assert r.ping()


def test_redis_cell_state_is_converted(r):
    # a redis-cell key: the decimal TAT in ns, 10 s ahead = 5 units of 2 s used
    start = time.time_ns()
    tat = start + 10 * NS_PER_S
    r.set("k", str(tat), px=10000)
    rep = throttle(r, "k", 15, 30, 60, 1)
    assert rep[:4] == [0, 16, 10, -1], rep
    assert rep[4] == 12
    pttl = r.pttl("k")
    assert 12000 - elapsed_ms(start) - 1 <= pttl <= 12001, pttl  # expiry rounded up to the ms
    # and it goes on coherently from there
    rep = throttle(r, "k", 15, 30, 60, 10)
    assert rep[:4] == [0, 16, 0, -1]
    assert rep[4] == 32
    rep = throttle(r, "k", 15, 30, 60, 1)
    assert rep[:3] == [1, 16, 0] and rep[3] == 2


def test_redis_cell_state_denied_is_left_alone(r):
    # 40 s ahead with DVT 32 s: limited; the string is not touched
    tat = time.time_ns() + 40 * NS_PER_S
    r.set("k", str(tat), px=40000)
    d = digest(r)
    rep = throttle(r, "k", 15, 30, 60, 1)
    assert rep[:3] == [1, 16, 0], rep
    assert rep[3] == 10  # new TAT 42 s ahead must come back within 32 s
    assert rep[4] == 40
    assert r.get("k") == str(tat).encode()
    assert digest(r) == d
    # quantity 0 reads it without converting it
    rep = throttle(r, "k", 15, 30, 60, 0)
    assert r.get("k") == str(tat).encode()
    assert digest(r) == d


def test_redis_cell_state_in_the_past_is_a_full_bucket(r):
    r.set("k", str(time.time_ns() - 5 * NS_PER_S))
    assert throttle(r, "k", 15, 30, 60, 1) == [0, 16, 15, -1, 2]


def test_redis_cell_state_peek(r):
    tat = time.time_ns() + 10 * NS_PER_S
    r.set("k", str(tat), px=10000)
    rep = throttle(r, "k", 15, 30, 60, 0)
    assert rep[:4] == [0, 16, 11, -1], rep
    assert rep[4] == 10


@pytest.mark.parametrize("value", ["hello", "12abc", "-5", "1.5", ""])
def test_string_not_a_cell_state(r, value):
    r.set("k", value)
    d = digest(r)
    with pytest.raises(redis.ResponseError) as ei:
        r.execute_command("CL.THROTTLE", "k", 15, 30, 60, 1)
    msg = str(ei.value)
    assert msg.startswith("WRONGTYPE") or msg.startswith("ERR"), msg
    assert digest(r) == d
    assert r.ping()


SEQUENCES = [
    ((15, 30, 60), [1, 3, 0, 5, 20, 2, 7, 1, 0, 16, 4, 1, 0]),
    ((4, 7, 10), [2, 2, 1, 1, 3, 0, 5, 6, 1]),
    ((0, 1, 60), [1, 1, 0, 2, 1]),
    ((99, 50, 3), [10, 40, 30, 25, 0, 1, 101, 100]),
]


@pytest.mark.parametrize("params,quantities", SEQUENCES,
                         ids=["15-30-60", "4-7-10", "0-1-60", "99-50-3"])
def test_matches_redis_cell_model(r, params, quantities):
    model = CellModel(*params)
    tat = None
    for i, q in enumerate(quantities):
        before = server_now_ns()
        rep = throttle(r, "m", *params, q)
        after = server_now_ns()
        st = state(r, "m")
        stored = int(st["tat_ns"]) if st is not None else None
        tat = check_step(model, tat, q, rep, before, after, stored)


def test_matches_model_after_partial_refill(r):
    # T = 100 ms: after a 0.35 s sleep, 3 units came back
    params = (4, 10, 1)
    model = CellModel(*params)
    for _ in range(5):
        throttle(r, "m", *params, 1)
    time.sleep(0.35)
    tat = int(state(r, "m")["tat_ns"])
    for q in (1, 1, 2, 1, 0):
        before = server_now_ns()
        rep = throttle(r, "m", *params, q)
        after = server_now_ns()
        st = state(r, "m")
        tat = check_step(model, tat, q, rep, before, after,
                         int(st["tat_ns"]) if st is not None else None)


def test_limited_then_allowed_after_retry_after(r):
    # T = 200 ms, burst 1 (limit 2): limited while the first unit cannot
    # have come back, and allowed once it has
    start = time.time_ns()
    assert throttle(r, "k", 1, 5, 1)[0] == 0
    assert throttle(r, "k", 1, 5, 1)[0] == 0
    rep = throttle(r, "k", 1, 5, 1)
    if elapsed_ms(start) < 200:
        assert rep[0] == 1 and rep[3] == 1, rep
    time.sleep(0.21)
    assert throttle(r, "k", 1, 5, 1)[0] == 0


def test_key_expires(r):
    start = time.time_ns()
    throttle(r, "k", 0, 10, 1, 1)  # T = 100 ms
    exists = r.exists("k")
    assert exists == 1 or elapsed_ms(start) >= 100
    time.sleep(0.25)
    assert r.exists("k") == 0


def test_allowed_write_is_in_dataset(r):
    d0 = digest(r)
    throttle(r, "k", 15, 30, 60, 1)
    assert digest(r) != d0
    assert s(r.type("k")) != "none"

"""`AT unix_us`: a check decided at a given time instead of the server's clock.

Off by default (floodgate.explicit-time no); with it on, the server's answers
are exact at chosen times, which the tests below use to check every family
against values worked out by hand.
"""
import pytest
import redis

import time

from harness import T0, Server, call, wait_for, wait_replica_synced


def test_off_by_default_and_refused_without_a_change(r):
    assert r.config_get("floodgate.explicit-time") == {"floodgate.explicit-time": "no"}
    with pytest.raises(redis.ResponseError, match="explicit-time"):
        r.execute_command("FG.TOKEN", "k", 10, 2, "AT", T0)
    assert r.exists("k") == 0


def test_config_set_turns_it_on_and_off(r):
    try:
        r.config_set("floodgate.explicit-time", "yes")
        assert call(r, "FG.TOKEN", "k", 10, 2, "AT", T0) == [1, 10, 9, -1, 500]
    finally:
        r.config_set("floodgate.explicit-time", "no")
    with pytest.raises(redis.ResponseError):
        r.execute_command("FG.TOKEN", "k", 10, 2, "AT", T0)


def test_token_bucket_exact(t):
    # 10 tokens, 2 per second: each token comes back in 500 ms.
    assert call(t, "FG.TOKEN", "k", 10, 2, "COST", 9, "AT", T0) == [1, 10, 1, -1, 4500]
    assert call(t, "FG.TOKEN", "k", 10, 2, "AT", T0) == [1, 10, 0, -1, 5000]
    assert call(t, "FG.TOKEN", "k", 10, 2, "AT", T0) == [0, 10, 0, 500, 5000]
    assert call(t, "FG.TOKEN", "k", 10, 2, "AT", T0 + 499_999) == [0, 10, 0, 1, 4501]
    assert call(t, "FG.TOKEN", "k", 10, 2, "AT", T0 + 500_000) == [1, 10, 0, -1, 5000]
    assert call(t, "FG.TOKEN", "k", 10, 2, "COST", 11, "AT", T0 + 500_000) == [0, 10, 0, -1, 5000]


def test_fixed_window_exact(t):
    # 3 per 1000 ms window, windows aligned to the epoch.
    assert call(t, "FG.FIXED", "k", 3, 1000, "COST", 3, "AT", T0 + 100_000) == [1, 3, 0, -1, 900]
    assert call(t, "FG.FIXED", "k", 3, 1000, "AT", T0 + 999_999) == [0, 3, 0, 1, 1]
    assert call(t, "FG.FIXED", "k", 3, 1000, "AT", T0 + 1_000_000) == [1, 3, 2, -1, 1000]


def test_sliding_window_exact(t):
    # 10 per 1000 ms: 10 in the previous window weigh 10 * (1 - elapsed/window).
    assert call(t, "FG.SLIDING", "k", 10, 1000, "COST", 10, "AT", T0) == [1, 10, 0, -1, 2000]
    # 250 ms into the next window: 7.5 of the previous count remain.
    assert call(t, "FG.SLIDING", "k", 10, 1000, "COST", 2, "AT", T0 + 1_250_000) == [1, 10, 0, -1, 1750]
    # One more needs 8.5 more weight gone... the previous window must weigh <= 7:
    # elapsed >= 300 ms, so 50 ms from now.
    assert call(t, "FG.SLIDING", "k", 10, 1000, "AT", T0 + 1_250_000) == [0, 10, 0, 50, 1750]


def test_sliding_log_exact(t):
    assert call(t, "FG.SLIDELOG", "k", 2, 1000, "AT", T0) == [1, 2, 1, -1, 1000]
    assert call(t, "FG.SLIDELOG", "k", 2, 1000, "AT", T0 + 400_000) == [1, 2, 0, -1, 1000]
    assert call(t, "FG.SLIDELOG", "k", 2, 1000, "AT", T0 + 999_000) == [0, 2, 0, 1, 401]
    assert call(t, "FG.SLIDELOG", "k", 2, 1000, "AT", T0 + 1_000_000) == [1, 2, 0, -1, 1000]


def test_gcra_and_leaky_share_the_bucket(t):
    # GCRA: 5 at once, 10 per 1000 ms (100 ms each).
    assert call(t, "FG.GCRA", "k", 5, 10, 1000, "COST", 5, "AT", T0) == [1, 5, 0, -1, 500]
    assert call(t, "FG.GCRA", "k", 5, 10, 1000, "AT", T0 + 50_000) == [0, 5, 0, 50, 450]
    # The same state seen as a funnel of 5 leaking 10 per second.
    assert call(t, "FG.LEAKY", "k", 5, 10, "AT", T0 + 100_000) == [1, 5, 0, -1, 500]


def test_peek_at_a_time_writes_nothing(t):
    assert call(t, "FG.PEEK", "TOKEN", "k", 10, 2, "AT", T0) == [1, 10, 9, -1, 500]
    assert t.exists("k") == 0


def test_ttl_counts_from_the_server_clock(t):
    """A state decided at a past time still lives as long as it matters."""
    start = time.time_ns()
    call(t, "FG.TOKEN", "k", 10, 2, "COST", 10, "AT", T0)  # empty again 5 s later
    pttl = t.pttl("k")
    # from the write on, less what passed since; expiries round up to the ms
    assert 5000 - (time.time_ns() - start) / 1e6 - 1 <= pttl <= 5001, pttl


def test_at_driven_writes_replicate_exactly(timed):
    with Server(["--replicaof", "127.0.0.1", str(timed.port),
                 "--floodgate.explicit-time", "yes"]) as replica:
        m, r = timed.client(), replica.client()
        m.flushall()
        wait_for(lambda: r.info("replication")["master_link_status"] == "up", timeout=20)
        for i in range(200):
            at = T0 + i * 7_000
            call(m, "FG.SLIDELOG", "log", 50, 1000, "AT", at)
            call(m, "FG.SLIDING", "sw", 50, 1000, "AT", at)
            call(m, "FG.GCRA", "g", 20, 100, 1000, "AT", at)
        # the states live about a second: the master must not delete one
        # between the sync and the two digests (the replica never does)
        m.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", 0)
        try:
            wait_replica_synced(m, r)
            assert m.execute_command("DEBUG", "DIGEST") == r.execute_command("DEBUG", "DIGEST")
        finally:
            m.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", 1)


@pytest.mark.parametrize("bad", ["-1", "x", "9223372036854776", "1.5"])
def test_bad_times_are_refused(t, bad):
    with pytest.raises(redis.ResponseError, match="AT"):
        t.execute_command("FG.TOKEN", "k", 10, 2, "AT", bad)
    assert t.exists("k") == 0

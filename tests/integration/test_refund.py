"""FG.REFUND: giving back units taken earlier and not used (a client's lease)."""
import pytest
import redis

from harness import T0, Server, call, wait_for, wait_replica_synced


def test_token_bucket_refund(t):
    # 10 tokens, 2/s: take all 10, give 4 back, and 4 are available again.
    assert call(t, "FG.TOKEN", "k", 10, 2, "COST", 10, "AT", T0) == [1, 10, 0, -1, 5000]
    assert call(t, "FG.REFUND", "TOKEN", "k", 10, 2, "COST", 4, "AT", T0) == 4
    assert call(t, "FG.PEEK", "TOKEN", "k", 10, 2, "COST", 0, "AT", T0) == [1, 10, 4, -1, 3000]
    # 2.5 s later 5 more have refilled; only the 1 still out (rounded up) comes
    # back, and the bucket is full again: the key goes.
    assert call(t, "FG.REFUND", "TOKEN", "k", 10, 2, "COST", 6, "AT", T0 + 2_500_000) == 1
    assert t.exists("k") == 0


def test_gcra_and_leaky_refund_the_shared_bucket(t):
    call(t, "FG.GCRA", "k", 5, 10, 1000, "COST", 5, "AT", T0)
    assert call(t, "FG.REFUND", "LEAKY", "k", 5, 10, "COST", 2, "AT", T0) == 2
    assert call(t, "FG.GCRA", "k", 5, 10, 1000, "COST", 2, "AT", T0)[0] == 1


def test_fixed_window_refund_only_in_its_window(t):
    assert call(t, "FG.FIXED", "k", 5, 1000, "COST", 5, "AT", T0 + 100_000)[2] == 0
    assert call(t, "FG.REFUND", "FIXED", "k", 5, 1000, "COST", 2, "AT", T0 + 200_000) == 2
    assert call(t, "FG.PEEK", "FIXED", "k", 5, 1000, "COST", 0, "AT", T0 + 200_000)[2] == 2
    # The next window has reset: nothing to give back, nothing changed.
    before = t.execute_command("DEBUG", "DIGEST-VALUE", "k")
    assert call(t, "FG.REFUND", "FIXED", "k", 5, 1000, "COST", 2, "AT", T0 + 1_000_000) == 0
    assert t.execute_command("DEBUG", "DIGEST-VALUE", "k") == before
    # Giving everything back empties the state.
    assert call(t, "FG.REFUND", "FIXED", "k", 5, 1000, "COST", 9, "AT", T0 + 300_000) == 3
    assert t.exists("k") == 0


def test_absent_key_gives_back_nothing(t):
    assert call(t, "FG.REFUND", "TOKEN", "none", 10, 2, "COST", 3) == 0
    assert t.exists("none") == 0


def test_refund_at_the_server_clock(r):
    r.execute_command("FG.TOKEN", "k", 10, 1, "COST", 10)
    assert r.execute_command("FG.REFUND", "TOKEN", "k", 10, 1, "COST", 3) == 3
    assert r.execute_command("FG.PEEK", "TOKEN", "k", 10, 1, "COST", 0)[2] >= 3


@pytest.mark.parametrize("argv,error", [
    (["FG.REFUND", "SLIDING", "k", 5, 1000, "COST", 1], "takes TOKEN"),
    (["FG.REFUND", "SLIDELOG", "k", 5, 1000, "COST", 1], "takes TOKEN"),
    (["FG.REFUND", "NOPE", "k", 5, 1000, "COST", 1], "takes TOKEN"),
    (["FG.REFUND", "TOKEN", "k", 10, 2, "COST", -1], "COST"),
    (["FG.REFUND", "TOKEN", "k", 10, 2, "COST", "x"], "COST"),
    (["FG.REFUND", "TOKEN", "k", 0, 2, "COST", 1], "capacity"),
    (["FG.REFUND", "TOKEN", "k", 10, "inf", "COST", 1], "refill_per_sec"),
    (["FG.REFUND", "TOKEN", "k", 10], "wrong number"),
    (["FG.REFUND", "TOKEN", "k", 10, 2, "COST", 1, "AT", 5], "explicit-time"),
])
def test_bad_input_changes_nothing(r, argv, error):
    r.execute_command("FG.TOKEN", "k", 10, 2, "COST", 5)
    before = r.execute_command("DEBUG", "DIGEST")
    with pytest.raises(redis.ResponseError, match=error):
        r.execute_command(*argv)
    assert r.execute_command("DEBUG", "DIGEST") == before


def test_wrong_family_is_wrongtype(r):
    r.execute_command("FG.FIXED", "f", 5, 1000)
    r.set("s", "x")
    for key in ("f", "s"):
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            r.execute_command("FG.REFUND", "TOKEN", key, 10, 2, "COST", 1)


def test_refunds_replicate_exactly(timed):
    with Server(["--replicaof", "127.0.0.1", str(timed.port),
                 "--floodgate.explicit-time", "yes"]) as replica:
        m, rep = timed.client(), replica.client()
        m.flushall()
        wait_for(lambda: rep.info("replication")["master_link_status"] == "up", timeout=20)
        for i in range(100):
            at = T0 + i * 50_000
            call(m, "FG.TOKEN", "b%d" % (i % 7), 10, 5, "COST", 5, "AT", at)
            call(m, "FG.REFUND", "TOKEN", "b%d" % (i % 7), 10, 5, "COST", 3, "AT", at)
            call(m, "FG.FIXED", "f%d" % (i % 5), 10, 1000, "COST", 4, "AT", at)
            call(m, "FG.REFUND", "FIXED", "f%d" % (i % 5), 10, 1000, "COST", 4, "AT", at)
        wait_replica_synced(m, rep)
        assert m.execute_command("DEBUG", "DIGEST") == rep.execute_command("DEBUG", "DIGEST")
        assert m.dbsize() == rep.dbsize()

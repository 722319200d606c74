"""Time inside MULTI/EXEC and scripts, as docs/time.md states it: on servers
with a cached command time (Redis 7.2+, Valkey) every floodgate command of a
transaction or script decides at the instant the outer command started, as
the server's own commands do; on 7.0 each reads the clock itself. The
server's version comes from the server under test."""

import time

import pytest

from harness import s

LEASE_MS = 1
PAUSE_S = 0.05   # 50 lease lengths: the lease has ended by any clock read after it


def cached_command_time(r):
    version = s(r.info("server")["redis_version"])
    return tuple(int(x) for x in version.split(".")[:2]) >= (7, 2)


def lock_granted(reply):
    return int(reply[0]) == 1


def test_a_transaction_decides_at_one_instant_on_servers_with_a_cached_time(r):
    pipe = r.pipeline(transaction=True)
    pipe.execute_command("FG.LOCK", "k", "a", LEASE_MS)
    pipe.execute_command("DEBUG", "SLEEP", PAUSE_S)
    pipe.execute_command("FG.LOCK", "k", "b", 1000)
    first, _, second = pipe.execute()
    assert lock_granted(first)
    # frozen clock: a's lease has not ended for b; 7.0: it has
    assert lock_granted(second) == (not cached_command_time(r)), second


LOCK_SPIN_LOCK = """
local first = redis.call('FG.LOCK', KEYS[1], 'a', ARGV[1])
local before = redis.call('TIME')
local x = 0
for i = 1, tonumber(ARGV[2]) do x = x + i end
local after = redis.call('TIME')
local second = redis.call('FG.LOCK', KEYS[1], 'b', 1000)
return {first[1], second[1], before[1] * 1000000 + before[2], after[1] * 1000000 + after[2]}
"""


def test_a_script_sees_no_time_pass_on_servers_with_a_cached_time(r):
    """floodgate's clock, TIME and key expiry all stand still inside a
    script on 7.2+ (until it runs past busy-reply-threshold): a script that
    waits for a lease to end by spinning on TIME spins until then
    (docs/time.md says what to do instead)."""
    spins = 200000
    while True:
        t0 = time.monotonic()
        first, second, before, after = r.eval(LOCK_SPIN_LOCK, 1, "k", LEASE_MS, spins)
        if time.monotonic() - t0 > 10 * LEASE_MS / 1000:
            break   # the script outlasted the lease many times over
        r.delete("k")
        spins *= 4
    assert first == 1
    frozen = cached_command_time(r)
    assert (second == 1) == (not frozen), second
    assert (after == before) == frozen, (before, after)


@pytest.mark.parametrize("command", [["FG.FIXED", "f", 1, 1], ["FG.TOKEN", "t", 1, 1000]])
def test_limits_in_a_transaction_see_no_time_pass_on_servers_with_a_cached_time(r, command):
    """A 1 ms window (or a bucket refilling one token a millisecond) allows
    the second call after a 50 ms pause only if the clock moved."""
    pipe = r.pipeline(transaction=True)
    pipe.execute_command(*command)
    pipe.execute_command("DEBUG", "SLEEP", PAUSE_S)
    pipe.execute_command(*command)
    first, _, second = pipe.execute()
    assert int(first[0]) == 1
    assert (int(second[0]) == 1) == (not cached_command_time(r)), second

"""Every lock command refuses bad input with an error that changes nothing
(docs/locks.md): an ERR (or WRONGTYPE) reply, the dataset digest, the held
locks and the fencing counter unchanged, no waiter left behind, and the server
still answering.

Each case runs twice: against a key that already holds state of the kind the
command serves (a held lock, a semaphore, a fenced value), so that a refusal
that wrote half of its effect shows, and against a fresh key, so that a
refusal that created the key shows. The digest alone would prove nothing if
the module's digest callback ignored a field, so one test first checks that
DEBUG DIGEST-VALUE sees every field of a holder and of a fenced value.

Bad values follow tests/integration/test_bad_input.py: non-numbers, empty,
out of range, 64-bit overflows, inf/nan, trailing garbage. FG.HOLD and
FG.UNHOLD are internal (the replication stream and the AOF send them) but a
repair tool can send them too (floodgate.enable-effect-commands, on for this
file), so they are validated like the others.
"""

import time

import pytest

from harness import RawClient, RespError, digest, s

pytestmark = pytest.mark.usefixtures("effect_commands")

# -- bad values ---------------------------------------------------------------

NOT_INTEGERS = [
    "abc", "", "1x", " 1", "1 ", "\t1", "inf", "-inf", "+inf", "nan", "NaN",
    "0x10", "1e400", "1e3", "1.5", "--1", "1,5", "+-1",
]
OVERFLOWS = [
    "9223372036854775808",          # 2^63
    "18446744073709551616",         # 2^64
    "-9223372036854775809",
    "99999999999999999999999",
]
POSITIVE = NOT_INTEGERS + OVERFLOWS + ["0", "-1"]
LEASE = POSITIVE + ["1000000000001"]                         # 1 .. 10^12
WAIT_TIMEOUT = NOT_INTEGERS + OVERFLOWS + ["-1", "1000000000001"]  # 0 .. 10^12
CAPACITY = POSITIVE + ["1000001"]                            # 1 .. 10^6
PERMITS = POSITIVE + ["6"]                                   # 1 .. capacity (5 here)
RELEASE_PERMITS = NOT_INTEGERS + OVERFLOWS + ["-1"]
NUMKEYS = POSITIVE + ["65"]                                  # 1 .. 64, and must match
TOKEN = POSITIVE                                             # 1 .. 2^63-1
OWNERS = ["", "x" * 257]                                     # 1 .. 256 bytes

NOW_US = time.time_ns() // 1000
HOUR_MS = 3_600_000
EXPIRES = str(NOW_US + HOUR_MS * 1000)  # a lease end an hour ahead, for FG.HOLD

# -- the state every case starts from -------------------------------------------

HELD_LOCK, READ_LOCK, SEMAPHORE, FENCED, MULTI = "lk", "rk", "sem", "f", "mk"


def populate(c):
    """Unrelated keys, and one key of each kind the lock commands serve, with
    leases far longer than a test."""
    c.set("other:str", "hello")
    c.rpush("other:list", "x", "y")
    c.execute_command("FG.TOKEN", "other:bucket", "5", "0.01", "COST", "2")
    c.set("str", "hello")
    c.rpush("list", "a", "b")
    assert int(c.execute_command("FG.LOCK", HELD_LOCK, "alice", HOUR_MS)[0]) == 1
    for owner in ("r1", "r2"):
        assert int(c.execute_command("FG.LOCK", READ_LOCK, owner, HOUR_MS, "SHARED")[0]) == 1
    assert int(c.execute_command("FG.ACQUIRE", SEMAPHORE, 5, "alice", 2, HOUR_MS)[0]) == 1
    assert int(c.execute_command("FG.MLOCK", 2, MULTI + "1", MULTI + "2", "malice",
                                 HOUR_MS)[0]) == 1
    assert int(c.execute_command("FG.FSET", FENCED, 100, "hello")) == 1


STATE_KEYS = [HELD_LOCK, READ_LOCK, SEMAPHORE, MULTI + "1", MULTI + "2"]

# -- the commands: a valid call, its numeric arguments, its owner ---------------

K, K2 = "{k}", "{k2}"  # placeholders: the target key, and a second key for FG.MLOCK

# name -> (valid argv, {position: (argument, bad values)}, owner positions,
#          held key for K, held key for K2)
COMMANDS = {
    "FG.LOCK": (["FG.LOCK", K, "bob", "1000"], {3: ("lease_ms", LEASE)}, [2],
                HELD_LOCK, None),
    "FG.UNLOCK": (["FG.UNLOCK", K, "alice"], {}, [2], HELD_LOCK, None),
    "FG.ACQUIRE": (["FG.ACQUIRE", K, "5", "bob", "1", "1000"],
                   {2: ("capacity", CAPACITY), 4: ("permits", PERMITS),
                    5: ("lease_ms", LEASE)}, [3], SEMAPHORE, None),
    "FG.RELEASE": (["FG.RELEASE", K, "alice", "1"], {3: ("permits", RELEASE_PERMITS)}, [2],
                   SEMAPHORE, None),
    "FG.MLOCK": (["FG.MLOCK", "2", K, K2, "bob", "1000"],
                 {1: ("numkeys", NUMKEYS), 5: ("lease_ms", LEASE)}, [4],
                 HELD_LOCK, MULTI + "1"),
    "FG.MUNLOCK": (["FG.MUNLOCK", "2", K, K2, "malice"], {1: ("numkeys", NUMKEYS)}, [4],
                   MULTI + "1", MULTI + "2"),
    "FG.EXTEND": (["FG.EXTEND", K, "alice", "1000"], {3: ("lease_ms", LEASE)}, [2],
                  HELD_LOCK, None),
    "FG.FORCEUNLOCK": (["FG.FORCEUNLOCK", K], {}, [], HELD_LOCK, None),
    "FG.LOCKINFO": (["FG.LOCKINFO", K], {}, [], HELD_LOCK, None),
    "FG.FENCE": (["FG.FENCE", K, "200"], {2: ("token", TOKEN)}, [], FENCED, None),
    "FG.FSET": (["FG.FSET", K, "200", "v"], {2: ("token", TOKEN)}, [], FENCED, None),
    "FG.FGET": (["FG.FGET", K, "200"], {2: ("token", TOKEN)}, [], FENCED, None),
    # alice re-puts her own hold: valid on the held key, so only the bad
    # argument can make it fail
    "FG.HOLD/lock": (["FG.HOLD", K, "lock", "0", "alice", "exclusive", "1", EXPIRES, "5"],
                     {2: ("kind", ["", "mutex", "locks", "0", "1"]),
                      3: ("capacity", NOT_INTEGERS + OVERFLOWS + ["1", "-1"]),
                      5: ("mode", ["", "read", "exclusivex", "0", "1"]),
                      6: ("count", POSITIVE + ["1000000001"]),
                      7: ("expires_us", NOT_INTEGERS + OVERFLOWS + ["0", "-1"]),
                      8: ("token", TOKEN)}, [4], HELD_LOCK, None),
    "FG.HOLD/semaphore": (["FG.HOLD", K, "semaphore", "5", "alice", "exclusive", "2",
                           EXPIRES, "5"],
                          {3: ("capacity", CAPACITY),
                           6: ("count", POSITIVE),
                           7: ("expires_us", NOT_INTEGERS + OVERFLOWS + ["0", "-1"]),
                           8: ("token", TOKEN)}, [4], SEMAPHORE, None),
    "FG.UNHOLD": (["FG.UNHOLD", K, "alice"], {}, [2], HELD_LOCK, None),
}

# the shortest valid call of each command, in arguments
MIN_ARGS = {"FG.LOCK": 4, "FG.UNLOCK": 3, "FG.ACQUIRE": 6, "FG.RELEASE": 3, "FG.MLOCK": 6,
            "FG.MUNLOCK": 5, "FG.EXTEND": 4, "FG.FORCEUNLOCK": 2, "FG.LOCKINFO": 2,
            "FG.FENCE": 3, "FG.FSET": 4, "FG.FGET": 2, "FG.HOLD/lock": 9,
            "FG.HOLD/semaphore": 9, "FG.UNHOLD": 3}
# options after the valid call that are not options of the command
BAD_OPTIONS = {
    "FG.LOCK": [["NX"], ["FOO", "1"], ["WAIT"], ["WAIT", "100", "extra"], ["SHARED", "FOO"],
                ["COST", "1"], ["SHARED", "WAIT"], ["REENTRANT", "1"],
                ["SHARED", "REENTRANT", "x"]],
    "FG.ACQUIRE": [["SHARED"], ["REENTRANT"], ["WAIT"], ["NX"], ["WAIT", "100", "extra"],
                   ["COST", "1"]],
    "FG.MLOCK": [["SHARED"], ["REENTRANT"], ["WAIT"], ["NX"], ["WAIT", "100", "extra"]],
}
WAIT_COMMANDS = ("FG.LOCK", "FG.ACQUIRE", "FG.MLOCK")

CASES = []  # pytest params: (argv, expected prefix, key for K, key for K2)


def add(case_id, argv, held, held2=None, expect="ERR", fresh=True):
    """A case on the key holding state, and (when the state is not what makes
    the call wrong) the same case on fresh keys."""
    CASES.append(pytest.param(argv, expect, held, held2 or "new2", id=case_id + "-held"))
    if fresh:
        CASES.append(pytest.param(argv, expect, "new", "new2", id=case_id + "-fresh"))


def printable(v):
    return repr(v)[1:-1][:24] if v else "EMPTY"


for name, (argv, numbers, owners, held, held2) in COMMANDS.items():
    for pos, (arg, values) in numbers.items():
        for v in values:
            bad = list(argv)
            bad[pos] = v
            add("%s-%s=%s" % (name, arg, printable(v)), bad, held, held2)
    for pos in owners:
        for v in OWNERS:
            bad = list(argv)
            bad[pos] = v
            add("%s-owner-of-%d-bytes" % (name, len(v)), bad, held, held2)
    for n in range(1, MIN_ARGS[name]):
        add("%s-arity-%d" % (name, n), argv[:n], held, held2)
    add("%s-extra-argument" % name, argv + ["extra"], held, held2)
    if name in WAIT_COMMANDS:
        for v in WAIT_TIMEOUT:
            add("%s-WAIT=%s" % (name, printable(v)), argv + ["WAIT", v], held, held2)
    for extra in BAD_OPTIONS.get(name, []):
        add("%s-option-%s" % (name, "-".join(extra)), argv + extra, held, held2)
add("FG.RELEASE-extra-arguments", ["FG.RELEASE", K, "alice", "1", "1", "1"], SEMAPHORE)
add("FG.LOCK-WAIT-after-SHARED-REENTRANT=-1",
    ["FG.LOCK", K, "bob", "1000", "SHARED", "REENTRANT", "WAIT", "-1"], HELD_LOCK)
add("FG.LOCK-SHARED-lease=0", ["FG.LOCK", K, "bob", "0", "SHARED"], HELD_LOCK)

# numkeys that do not match the arguments, duplicate keys, too many keys
MLOCK_SHAPES = {
    "numkeys-past-the-end": ["FG.MLOCK", "5", K, K2, "bob", "1000"],
    "numkeys-eats-the-lease": ["FG.MLOCK", "3", K, K2, "bob", "1000"],
    "numkeys-short": ["FG.MLOCK", "1", K, K2, "bob", "1000"],
    "no-owner": ["FG.MLOCK", "2", K, K2],
    "no-lease": ["FG.MLOCK", "2", K, K2, "bob"],
    "duplicate-key": ["FG.MLOCK", "2", K, K, "bob", "1000"],
    "duplicate-key-not-adjacent": ["FG.MLOCK", "3", K, K2, K, "bob", "1000"],
    "duplicate-key-with-WAIT": ["FG.MLOCK", "2", K2, K2, "bob", "1000", "WAIT", "100"],
    "65-keys": ["FG.MLOCK", "65"] + ["mkey:%d" % i for i in range(64)] + [K, "bob", "1000"],
    "numkeys-64-with-65-keys": ["FG.MLOCK", "64"] + ["mkey:%d" % i for i in range(64)] +
                               [K, "bob", "1000"],
}
for sid, argv in MLOCK_SHAPES.items():
    add("FG.MLOCK-" + sid, argv, HELD_LOCK, MULTI + "1")
MUNLOCK_SHAPES = {
    "numkeys-past-the-end": ["FG.MUNLOCK", "3", K, K2, "malice"],
    "numkeys-short": ["FG.MUNLOCK", "1", K, K2, "malice"],
    "no-owner": ["FG.MUNLOCK", "2", K, K2],
    "65-keys": ["FG.MUNLOCK", "65"] + ["mkey:%d" % i for i in range(64)] + [K, "malice"],
}
for sid, argv in MUNLOCK_SHAPES.items():
    add("FG.MUNLOCK-" + sid, argv, MULTI + "1", MULTI + "2")

# FG.HOLD: holders that cannot live next to the ones in place
HOLD_CONFLICTS = {
    "shared-next-to-exclusive": (["FG.HOLD", K, "lock", "0", "carol", "shared", "1", EXPIRES, "5"],
                                 HELD_LOCK),
    "exclusive-next-to-exclusive": (["FG.HOLD", K, "lock", "0", "carol", "exclusive", "1",
                                     EXPIRES, "5"], HELD_LOCK),
    "exclusive-next-to-shared": (["FG.HOLD", K, "lock", "0", "carol", "exclusive", "1",
                                  EXPIRES, "5"], READ_LOCK),
    "lock-on-a-semaphore": (["FG.HOLD", K, "lock", "0", "carol", "exclusive", "1", EXPIRES, "5"],
                            SEMAPHORE),
    "shared-lock-on-a-semaphore": (["FG.HOLD", K, "lock", "0", "carol", "shared", "1",
                                    EXPIRES, "5"], SEMAPHORE),
    "semaphore-on-a-lock": (["FG.HOLD", K, "semaphore", "5", "carol", "exclusive", "1",
                             EXPIRES, "5"], HELD_LOCK),
    "semaphore-on-a-read-lock": (["FG.HOLD", K, "semaphore", "5", "carol", "exclusive", "1",
                                  EXPIRES, "5"], READ_LOCK),
}
for sid, (argv, held) in HOLD_CONFLICTS.items():
    add("FG.HOLD-" + sid, argv, held, expect="ERR|WRONGTYPE", fresh=False)

# keys of another type: plain Redis types, and the other lock types
WRONG_KEY_CALLS = {
    "FG.LOCK": ["FG.LOCK", K, "bob", "1000"],
    "FG.LOCK/SHARED": ["FG.LOCK", K, "bob", "1000", "SHARED"],
    "FG.LOCK/WAIT": ["FG.LOCK", K, "bob", "1000", "WAIT", "100"],
    "FG.UNLOCK": ["FG.UNLOCK", K, "alice"],
    "FG.ACQUIRE": ["FG.ACQUIRE", K, "5", "bob", "1", "1000"],
    "FG.ACQUIRE/WAIT": ["FG.ACQUIRE", K, "5", "bob", "1", "1000", "WAIT", "100"],
    "FG.RELEASE": ["FG.RELEASE", K, "alice"],
    "FG.MLOCK": ["FG.MLOCK", "1", K, "bob", "1000"],
    "FG.MLOCK/second-key": ["FG.MLOCK", "2", "mnew", K, "bob", "1000"],
    "FG.MLOCK/WAIT": ["FG.MLOCK", "2", "mnew", K, "bob", "1000", "WAIT", "100"],
    "FG.MUNLOCK": ["FG.MUNLOCK", "1", K, "alice"],
    "FG.EXTEND": ["FG.EXTEND", K, "alice", "1000"],
    "FG.FORCEUNLOCK": ["FG.FORCEUNLOCK", K],
    "FG.LOCKINFO": ["FG.LOCKINFO", K],
    "FG.FENCE": ["FG.FENCE", K, "200"],
    "FG.FSET": ["FG.FSET", K, "200", "v"],
    "FG.FGET": ["FG.FGET", K],
    "FG.FGET/token": ["FG.FGET", K, "200"],
    "FG.HOLD/lock": ["FG.HOLD", K, "lock", "0", "bob", "exclusive", "1", EXPIRES, "5"],
    "FG.HOLD/semaphore": ["FG.HOLD", K, "semaphore", "5", "bob", "exclusive", "1", EXPIRES, "5"],
    "FG.UNHOLD": ["FG.UNHOLD", K, "alice"],
}
LOCK_SIDE = {n for n in WRONG_KEY_CALLS if not n.startswith(("FG.FENCE", "FG.FSET", "FG.FGET"))}
for name, argv in WRONG_KEY_CALLS.items():
    for other in ("str", "list"):
        add("%s-on-a-%s" % (name, other), argv, other, expect="WRONGTYPE", fresh=False)
    if name in LOCK_SIDE:
        add("%s-on-a-fenced-value" % name, argv, FENCED, expect="WRONGTYPE", fresh=False)
    else:
        add("%s-on-a-lock" % name, argv, HELD_LOCK, expect="WRONGTYPE", fresh=False)
        add("%s-on-a-semaphore" % name, argv, SEMAPHORE, expect="WRONGTYPE", fresh=False)
# a lock asked on a semaphore and the other way round: refused, either way
for name in ("FG.LOCK", "FG.LOCK/SHARED", "FG.LOCK/WAIT", "FG.MLOCK", "FG.MLOCK/second-key",
             "FG.MLOCK/WAIT"):
    add("%s-on-a-semaphore" % name, WRONG_KEY_CALLS[name], SEMAPHORE,
        expect="ERR|WRONGTYPE", fresh=False)
for name in ("FG.ACQUIRE", "FG.ACQUIRE/WAIT"):
    for held in (HELD_LOCK, READ_LOCK):
        add("%s-on-a-%s" % (name, "lock" if held == HELD_LOCK else "read-lock"),
            WRONG_KEY_CALLS[name], held, expect="ERR|WRONGTYPE", fresh=False)

# -- checks -----------------------------------------------------------------------


def substitute(argv, key, key2):
    return [key if a == K else key2 if a == K2 else a for a in argv]


def lockinfo(c, key):
    """FG.LOCKINFO as a dict, without what moves with the clock alone: the
    holders' ttl_ms, and next_token (floored by the clock); None when the key
    holds nothing."""
    raw = c.execute_command("FG.LOCKINFO", key)
    if raw is None:
        return None
    info = dict(zip(s(raw[0::2]), raw[1::2]))
    del info["next_token"]
    info["holders"] = [s(h[:3]) + [int(h[4])] for h in info["holders"]]
    return {k: s(v) for k, v in info.items()}


def snapshot(c):
    return (digest(c),
            {k: lockinfo(c, k) for k in STATE_KEYS},
            {k: c.execute_command("PEXPIRETIME", k) for k in STATE_KEYS + [FENCED]},
            c.execute_command("FG.FGET", FENCED),
            c.info("floodgate")["floodgate_lock_waiters"])


def next_token(c):
    """The token of a grant on a fresh key (then released): compares counters."""
    rep = c.execute_command("FG.LOCK", "probe", "probe", 1000)
    assert int(rep[0]) == 1, rep
    assert int(c.execute_command("FG.UNLOCK", "probe", "probe")) == 0
    return int(rep[1])


def assert_error_prefix(msg, expect):
    assert "unknown command" not in msg, msg  # a renamed command would pass every case
    prefixes = expect.split("|")
    assert any(msg.startswith(p + " ") for p in prefixes), msg


def check_refused(c, argv, expect):
    """Sends argv on a raw connection (redis-py strips "ERR "), expects an
    error starting with `expect` (or one of "A|B") and no change at all."""
    before = snapshot(c)
    port = c.connection_pool.connection_kwargs["port"]
    with RawClient(port, timeout=5) as raw:
        msg = raw.error_of(*argv)
    assert_error_prefix(msg, expect)
    assert snapshot(c) == before, "state changed by %r (%s)" % (argv, msg)
    assert c.ping()
    return msg


@pytest.mark.parametrize("argv,expect,key,key2", CASES)
def test_refused(r, argv, expect, key, key2):
    populate(r)
    check_refused(r, substitute(argv, key, key2), expect)
    assert r.exists("new", "new2", "mnew") == 0


def test_refusals_do_not_move_the_fencing_counter(r):
    """A refused FG.HOLD or FG.FENCE with a token far ahead of the counter
    must not raise it: the next grant stays below that token."""
    populate(r)
    far = str(2 ** 62 + 12345)
    start = next_token(r)
    assert start < 2 ** 62
    for argv in (["FG.HOLD", "n", "lock", "0", "bob", "bogus", "1", EXPIRES, far],
                 ["FG.HOLD", "n", "lock", "0", "", "exclusive", "1", EXPIRES, far],
                 ["FG.HOLD", "n", "lock", "0", "bob", "exclusive", "0", EXPIRES, far],
                 ["FG.HOLD", "n", "lock", "0", "bob", "exclusive", "1", "-1", far],
                 ["FG.HOLD", "n", "lock", "1", "bob", "exclusive", "1", EXPIRES, far],
                 ["FG.HOLD", HELD_LOCK, "lock", "0", "bob", "exclusive", "1", EXPIRES, far],
                 ["FG.HOLD", SEMAPHORE, "lock", "0", "bob", "exclusive", "1", EXPIRES, far],
                 ["FG.HOLD", "str", "lock", "0", "bob", "exclusive", "1", EXPIRES, far],
                 ["FG.HOLD", "n", "lock", "0", "bob", "exclusive", "1", EXPIRES, far, "x"],
                 ["FG.FENCE", "str", far],
                 ["FG.FSET", HELD_LOCK, far, "v"],
                 ["FG.FGET", SEMAPHORE, far]):
        check_refused(r, argv, "ERR|WRONGTYPE")
    after = next_token(r)
    assert start < after < 2 ** 62, (start, after)


def test_upgrade_is_refused_with_the_documented_message(r):
    """A reader asking for the write lock: refused, the read lock kept."""
    populate(r)
    want = "ERR owner holds a shared lock: release it before asking for the exclusive lock"
    for extra in ([], ["REENTRANT"], ["WAIT", "100"], ["REENTRANT", "WAIT", "0"]):
        assert check_refused(r, ["FG.LOCK", READ_LOCK, "r1", "1000"] + extra, "ERR") == want


def test_digest_sees_every_field(r):
    """DEBUG DIGEST-VALUE is what the other tests compare: it must change
    with each field of a holder and of a fenced value."""
    base = ["lock", "0", "alice", "exclusive", "1", EXPIRES, "77"]
    variants = {
        "same": base,
        "owner": ["lock", "0", "bob", "exclusive", "1", EXPIRES, "77"],
        "mode": ["lock", "0", "alice", "shared", "1", EXPIRES, "77"],
        "count": ["lock", "0", "alice", "exclusive", "2", EXPIRES, "77"],
        "expiry": ["lock", "0", "alice", "exclusive", "1", str(int(EXPIRES) + 1000), "77"],
        "token": ["lock", "0", "alice", "exclusive", "1", EXPIRES, "78"],
        "kind": ["semaphore", "1", "alice", "exclusive", "1", EXPIRES, "77"],
    }
    r.execute_command("FG.HOLD", "d:base", *base)
    for name, args in variants.items():
        r.execute_command("FG.HOLD", "d:" + name, *args)
    dv = {k: s(r.execute_command("DEBUG", "DIGEST-VALUE", "d:" + k)[0])
          for k in ["base"] + list(variants)}
    assert dv["same"] == dv["base"], dv
    for name in variants:
        if name != "same":
            assert dv[name] != dv["base"], "DIGEST-VALUE ignores the %s of a holder" % name
    r.execute_command("FG.FSET", "v:a", 5, "x")
    r.execute_command("FG.FSET", "v:b", 5, "y")
    r.execute_command("FG.FSET", "v:c", 6, "x")
    r.execute_command("FG.FENCE", "v:d", 5)
    fv = [s(r.execute_command("DEBUG", "DIGEST-VALUE", k)[0]) for k in ("v:a", "v:b", "v:c", "v:d")]
    assert len(set(fv)) == 4, fv


def test_edges_of_the_ranges_are_accepted(r):
    """The limits of each documented range are valid requests (so the cases
    above fail for the reason they name)."""
    owner256 = "o" * 256

    def granted(*argv):
        rep = [int(x) for x in r.execute_command(*argv)]
        assert rep[0] == 1 and rep[1] >= 1, (argv, rep)
        return rep

    granted("FG.LOCK", "e:1", "o", 1)
    assert granted("FG.LOCK", "e:2", owner256, 10 ** 12)[2] > 10 ** 12 - 60000
    assert int(r.execute_command("FG.UNLOCK", "e:2", owner256)) == 0
    granted("FG.LOCK", "e:3", "o", 1000, "WAIT", 0)
    granted("FG.LOCK", "e:4", "o", 1000, "SHARED", "REENTRANT", "WAIT", 10 ** 12)
    granted("FG.ACQUIRE", "e:5", 1, "o", 1, 1000)
    assert granted("FG.ACQUIRE", "e:6", 10 ** 6, "o", 10 ** 6, 1000)[3] == 10 ** 6
    assert int(r.execute_command("FG.RELEASE", "e:6", "o", 10 ** 6)) == 0
    keys = ["e:m%d" % i for i in range(64)]
    assert granted("FG.MLOCK", 64, *keys, owner256, 1000)[3] == 64
    assert int(r.execute_command("FG.MUNLOCK", 64, *keys, owner256)) == 64
    assert int(r.execute_command("FG.EXTEND", "e:1", "o", 10 ** 12)) in (0, 1)
    assert int(r.execute_command("FG.FENCE", "e:f1", 1)) == 1
    assert int(r.execute_command("FG.FENCE", "e:f2", 2 ** 63 - 1)) == 1
    assert int(r.execute_command("FG.FSET", "e:f3", 2 ** 63 - 1, "")) == 1
    assert [int(x) if i < 2 else x for i, x in
            enumerate(r.execute_command("FG.FGET", "e:f3", 2 ** 63 - 1))] == [1, 2 ** 63 - 1, b""]
    assert r.execute_command("FG.FGET", "e:none") == [1, 0, None]
    r.execute_command("FG.HOLD", "e:h", "lock", 0, owner256, "shared", 10 ** 9, EXPIRES, 9)
    info = lockinfo(r, "e:h")
    assert info["kind"] == "lock" and info["holders"] == [[owner256, "shared", 10 ** 9, 9]], info
    r.execute_command("FG.UNHOLD", "e:h", owner256)
    assert r.exists("e:h") == 0
    assert r.info("floodgate")["floodgate_lock_waiters"] == 0


def test_refused_wait_never_blocks(r):
    """A WAIT request refused for its arguments answers at once: no waiter is
    queued behind the held lock."""
    populate(r)
    port = r.connection_pool.connection_kwargs["port"]
    for argv in (["FG.LOCK", HELD_LOCK, "bob", "0", "WAIT", "0"],
                 ["FG.LOCK", HELD_LOCK, "", "1000", "WAIT", "0"],
                 ["FG.ACQUIRE", SEMAPHORE, "5", "bob", "6", "1000", "WAIT", "0"],
                 ["FG.MLOCK", "2", HELD_LOCK, HELD_LOCK, "bob", "1000", "WAIT", "0"]):
        with RawClient(port, timeout=5) as raw:
            try:
                rep = raw.execute(*argv)
            except RespError as e:
                rep = str(e)
        assert isinstance(rep, str) and rep.startswith("ERR "), (argv, rep)
        assert r.info("floodgate")["floodgate_lock_waiters"] == 0
    assert lockinfo(r, HELD_LOCK)["waiters"] == []

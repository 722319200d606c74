"""Persistence of locks, semaphores and fenced values (types fg-lockst and
fg-fenced) and of the server's fencing counter (module aux data).

Every holder field must survive DEBUG RELOAD, SAVE + restart, AOF (rewritten
with and without RDB preamble, or incremental only), DUMP/RESTORE and COPY.
The strongest comparison is DUMP itself: it serializes every field of the
value, so equal DUMP bytes before and after mean an identical value. Key TTLs
are compared with PEXPIRETIME, the whole dataset with DEBUG DIGEST.

The loaders also face bytes nobody wrote through floodgate: RESTORE payloads
built field by field (every rule a stored state obeys, broken one at a time)
and corrupted ones (truncations, flips, huge lengths, with the CRC
recomputed). Each is refused or loads as a valid state; the server stays up
and its memory does not grow.

FLOODGATE_FUZZ_SCALE multiplies the random corrupted payloads.
"""

import os
import time

import pytest
import redis

import rdbpayload
from harness import Server, rdb_file_magic, rdb_version, wait_for
from rdbpayload import OP_EOF, OP_STRING, OP_UINT, enc_len
from topology import (assert_no_crash, aof_files, digest, read_aof_commands, s,
                      wait_aof_rewrite_done)

FUZZ_SCALE = int(os.environ.get("FLOODGATE_FUZZ_SCALE", "1"))
LEASE_MS = 3_600_000  # nothing built here expires during a test

LOCK, SEMAPHORE = 1, 2
EXCLUSIVE, SHARED = 0, 1
OWNER_MAX = 256
MAX_HOLDERS = 100000
MAX_CAPACITY = 1000000
MAX_REENTRY = 10 ** 9
I64_MAX = (1 << 63) - 1
TOKEN_MAX = (1 << 53) - 1  # of lock holders (fenced values: I64_MAX)
MASK = (1 << 64) - 1


def now_us():
    return time.time_ns() // 1000


def ok(reply):
    return reply in (True, b"OK", "OK")


def plain_server(*extra):
    """A server whose DUMP writes strings raw (no LZF), so payloads built
    here compare byte for byte with the server's own."""
    return Server(["--rdbcompression", "no"] + list(extra))


# ---------------------------------------------------------------------------
# RESTORE payloads built field by field (the layout of lock_types.c)

_CHARSET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def type_id(name, encver=1):
    cid = 0
    for ch in name:
        cid = (cid << 6) | _CHARSET.index(ch)
    return (cid << 10) | encver


assert rdbpayload.module_type_name(type_id("fg-lockst")) == "fg-lockst"


def u(v):
    return bytes([OP_UINT]) + enc_len(v & MASK)


def i64(v):
    """RedisModule_SaveSigned writes the two's complement as an unsigned."""
    return u(v)


def buf(b):
    return bytes([OP_STRING]) + enc_len(len(b)) + b


def holder_fields(owner, mode, count, expires_us, token):
    return buf(owner) + u(mode) + i64(count) + i64(expires_us) + u(token)


def lock_body(kind, capacity, holders, declared=None, encver=1, tail=b""):
    """An fg-lockst value: holders are (owner, mode, count, expires_us, token)."""
    out = bytes([rdbpayload.RDB_TYPE_MODULE_2]) + enc_len(type_id("fg-lockst", encver))
    out += u(kind) + i64(capacity) + u(len(holders) if declared is None else declared)
    for h in holders:
        out += holder_fields(*h)
    return out + tail + enc_len(OP_EOF)


def fenced_body(token, value, has=None, encver=1, tail=b""):
    out = bytes([rdbpayload.RDB_TYPE_MODULE_2]) + enc_len(type_id("fg-fenced", encver))
    out += u(token) + u((value is not None) if has is None else has)
    if value is not None:
        out += buf(value)
    return out + tail + enc_len(OP_EOF)


def payload(body):
    """A DUMP payload of the server's RDB version (10 on Redis 7.0, 11 on
    7.2 and Valkey 8, 12 on 7.4 and 8.x): RESTORE refuses a newer one, and a
    DUMP compared with it carries the server's own."""
    return rdbpayload.make(body, rdb_version())


# ---------------------------------------------------------------------------
# Reading a value back (DUMP) into its fields, for exact checks


def _read_len(b, pos):
    v, pos, encoded = rdbpayload.dec_len(b, pos)
    assert not encoded
    return v, pos


def lzf_decompress(data, size):
    out = bytearray()
    pos = 0
    while pos < len(data):
        ctrl = data[pos]
        pos += 1
        if ctrl < 32:  # a literal run of ctrl + 1 bytes
            out += data[pos:pos + ctrl + 1]
            pos += ctrl + 1
            continue
        length = ctrl >> 5
        if length == 7:
            length += data[pos]
            pos += 1
        ref = len(out) - ((ctrl & 0x1F) << 8) - data[pos] - 1
        pos += 1
        for k in range(length + 2):  # a back reference, possibly overlapping
            out.append(out[ref + k])
    assert len(out) == size
    return bytes(out)


def _read_string(b, pos):
    first = b[pos]
    if first == 0xC3:  # LZF: compressed length, length, data
        clen, p = _read_len(b, pos + 1)
        size, p = _read_len(b, p)
        return lzf_decompress(b[p:p + clen], size), p + clen
    if first >> 6 == 3:  # an integer written as a string
        size = {0: 1, 1: 2, 2: 4}[first & 0x3F]
        v = int.from_bytes(b[pos + 1:pos + 1 + size], "little", signed=True)
        return str(v).encode(), pos + 1 + size
    n, pos = _read_len(b, pos)
    return b[pos:pos + n], pos + n


def signed(v):
    return v - (1 << 64) if v > I64_MAX else v


def decode(value_bytes):
    """('lock', kind, capacity, [holders]) or ('fenced', token, value) of a
    DUMP payload, holders as (owner, mode, count, expires_us, token); None
    for a value of another type."""
    body, version, _ = rdbpayload.split(value_bytes)
    if body[0] != rdbpayload.RDB_TYPE_MODULE_2:
        return None
    mid, pos = _read_len(body, 1)
    name = rdbpayload.module_type_name(mid)
    if name not in ("fg-lockst", "fg-fenced"):
        return None
    fields = []
    while True:
        op, pos = _read_len(body, pos)
        if op == OP_EOF:
            break
        if op == OP_UINT:
            v, pos = _read_len(body, pos)
            fields.append(v)
        else:
            assert op == OP_STRING, op
            v, pos = _read_string(body, pos)
            fields.append(v)
    assert pos == len(body)
    if name == "fg-fenced":
        return ("fenced", fields[0], fields[2] if fields[1] else None)
    kind, capacity, n = fields[0], signed(fields[1]), fields[2]
    assert len(fields) == 3 + 5 * n
    holders = []
    for k in range(n):
        owner, mode, count, expires_us, token = fields[3 + 5 * k:8 + 5 * k]
        holders.append((owner, mode, signed(count), signed(expires_us), token))
    return ("lock", kind, capacity, holders)


def valid_lock(kind, capacity, holders):
    """The rules a stored lock state obeys (docs/locks.md, core/lock.h)."""
    if not 1 <= len(holders) <= MAX_HOLDERS:
        return False
    owners = [h[0] for h in holders]
    if len(set(owners)) != len(owners) or any(not 1 <= len(o) <= OWNER_MAX for o in owners):
        return False
    if any(h[4] < 1 or h[4] > I64_MAX or h[3] < 1 or h[2] < 1 for h in holders):
        return False
    if kind == LOCK:
        modes = [h[1] for h in holders]
        if capacity != 0 or any(h[2] > MAX_REENTRY for h in holders):
            return False
        return modes == [EXCLUSIVE] or (modes and all(m == SHARED for m in modes))
    if kind == SEMAPHORE:
        return 1 <= capacity <= MAX_CAPACITY and all(h[1] == EXCLUSIVE and h[2] <= MAX_CAPACITY
                                                      for h in holders)
    return False


# ---------------------------------------------------------------------------
# Building states through the commands


def lockinfo(c, key):
    raw = c.execute_command("FG.LOCKINFO", key)
    if raw is None:
        return None
    if isinstance(raw, dict):
        return {s(k): v for k, v in raw.items()}
    return {s(raw[k]): raw[k + 1] for k in range(0, len(raw), 2)}


def lock(c, key, owner, *opts, lease_ms=LEASE_MS):
    reply = c.execute_command("FG.LOCK", key, owner, lease_ms, *opts)
    assert reply[0] == 1, (key, owner, opts, reply)
    return reply


def acquire(c, key, capacity, owner, permits, lease_ms=LEASE_MS):
    reply = c.execute_command("FG.ACQUIRE", key, capacity, owner, permits, lease_ms)
    assert reply[0] == 1, (key, owner, reply)
    return reply


BINARY_OWNER = b"\x00\xff\r\n*3\r\n$-1 owner\x00"
BINARY_VALUE = bytes(range(256)) * 3 + b"\r\n\x00"


def build_states(c):
    """Locks of every shape, semaphores (one with many holders), fenced
    values with and without a value, binary owners and values, and a few
    plain keys. Returns the list of lock and fenced keys."""
    lock(c, "l:excl", "alice")
    lock(c, "l:reent", "bob", "REENTRANT")
    lock(c, "l:reent", "bob", "REENTRANT")
    lock(c, "l:reent", "bob", "SHARED", "REENTRANT")  # a writer may read
    for owner in ("r1", "r2", BINARY_OWNER, "r" * OWNER_MAX):
        lock(c, "l:shared", owner, "SHARED")
    lock(c, "l:bin", BINARY_OWNER)
    lock(c, "l:short", "x", lease_ms=LEASE_MS // 2)
    acquire(c, "s:one", 5, "w1", 2)
    acquire(c, "s:one", 5, "w2", 3)
    p = c.pipeline(transaction=False)
    for k in range(1500):
        p.execute_command("FG.ACQUIRE", "s:many", MAX_CAPACITY, "owner-%d" % k, 1 + k % 7, LEASE_MS)
    assert all(r[0] == 1 for r in p.execute())
    acquire(c, "s:bin", 3, BINARY_OWNER, 3)
    assert c.execute_command("FG.FSET", "f:val", 7, "hello") == 1
    assert c.execute_command("FG.FSET", "f:bin", 9, BINARY_VALUE) == 1
    assert c.execute_command("FG.FSET", "f:empty", 3, b"") == 1
    assert c.execute_command("FG.FENCE", "f:none", 11) == 1
    assert c.execute_command("FG.FSET", "f:big", I64_MAX, b"v" * 100000) == 1
    c.pexpire("f:val", LEASE_MS)  # a fenced value with a TTL
    c.set("plain:str", "v")
    c.set("plain:ttl", "w", px=LEASE_MS)
    return ["l:excl", "l:reent", "l:shared", "l:bin", "l:short", "s:one", "s:many", "s:bin",
            "f:val", "f:bin", "f:empty", "f:none", "f:big"]


def holders_of(c, key):
    return decode(c.dump(key))[3]


def check_built_states(c):
    """The states build_states made, field by field."""
    kind, cap, holders = decode(c.dump("l:reent"))[1:]
    assert (kind, cap) == (LOCK, 0) and len(holders) == 1
    assert holders[0][:3] == (b"bob", EXCLUSIVE, 3), holders
    kind, cap, holders = decode(c.dump("l:shared"))[1:]
    assert [h[0] for h in holders] == [b"r1", b"r2", BINARY_OWNER, b"r" * OWNER_MAX]
    assert {h[1] for h in holders} == {SHARED} and {h[2] for h in holders} == {1}
    kind, cap, holders = decode(c.dump("s:many"))[1:]
    assert (kind, cap, len(holders)) == (SEMAPHORE, MAX_CAPACITY, 1500)
    assert [h[2] for h in holders] == [1 + k % 7 for k in range(1500)]
    assert decode(c.dump("s:one"))[1:3] == (SEMAPHORE, 5)
    assert decode(c.dump("l:bin"))[3][0][0] == BINARY_OWNER
    assert decode(c.dump("f:val")) == ("fenced", 7, b"hello")
    assert decode(c.dump("f:bin")) == ("fenced", 9, BINARY_VALUE)
    assert decode(c.dump("f:empty")) == ("fenced", 3, b"")
    assert decode(c.dump("f:none")) == ("fenced", 11, None)
    assert decode(c.dump("f:big")) == ("fenced", I64_MAX, b"v" * 100000)
    # and as the commands see them
    info = lockinfo(c, "l:shared")
    assert s(info["kind"]) == "lock" and info["capacity"] == 0 and info["used"] == 4
    assert [(h[0], s(h[1]), h[2]) for h in info["holders"]] == [
        (b"r1", "shared", 1), (b"r2", "shared", 1), (BINARY_OWNER, "shared", 1),
        (b"r" * OWNER_MAX, "shared", 1)]
    assert [h[4] for h in info["holders"]] == [h[4] for h in holders_of(c, "l:shared")]
    info = lockinfo(c, "s:one")
    assert (s(info["kind"]), info["capacity"], info["used"]) == ("semaphore", 5, 5)
    assert c.execute_command("FG.FGET", "f:none") == [1, 11, None]
    assert c.execute_command("FG.FGET", "f:empty") == [1, 3, b""]


def snapshot(c, keys):
    """Every value's DUMP, every key's PEXPIRETIME, and the dataset digest."""
    p = c.pipeline(transaction=False)
    for k in keys:
        p.dump(k)
        p.execute_command("PEXPIRETIME", k)
    res = p.execute()
    return {"digest": digest(c),
            "values": {k: (res[2 * n], res[2 * n + 1]) for n, k in enumerate(keys)}}


def assert_same(before, after, what, dataset=True):
    """Same values and expiry times of the keys, and (with `dataset`) the
    same dataset digest."""
    problems = []
    for k, (dump0, at0) in before["values"].items():
        dump1, at1 = after["values"][k]
        if dump1 != dump0:
            problems.append("%s: value changed: %r -> %r" % (k, decode(dump0) if dump0 else None,
                                                           decode(dump1) if dump1 else None))
        if at1 != at0:
            problems.append("%s: PEXPIRETIME %r -> %r" % (k, at0, at1))
    if dataset and before["digest"] != after["digest"]:
        problems.append("DEBUG DIGEST %s -> %s" % (before["digest"], after["digest"]))
    assert not problems, "%s changed the dataset:\n  %s" % (what, "\n  ".join(problems[:20]))


def check_lock_ttls(c, keys):
    """A lock key expires at its latest lease end, in ms rounded up."""
    for k in keys:
        v = decode(c.dump(k))
        if v and v[0] == "lock":
            latest = max(h[3] for h in v[3])
            assert c.execute_command("PEXPIRETIME", k) == -(-latest // 1000), k


# ---------------------------------------------------------------------------
# Payloads built here: exact layout, digest, valid and invalid states


def test_built_payloads_match_dump():
    """RESTORE of a payload built here, then DUMP, gives the same bytes: the
    layout this file assumes is the one the module writes."""
    exp = now_us() + LEASE_MS * 1000
    bodies = [
        lock_body(LOCK, 0, [(b"alice", EXCLUSIVE, 1, exp, 5)]),
        lock_body(LOCK, 0, [(b"a", SHARED, 3, exp, 9), (b"b" * OWNER_MAX, SHARED, 1, exp + 1, 10)]),
        lock_body(LOCK, 0, [(b"w", EXCLUSIVE, MAX_REENTRY, 1, TOKEN_MAX)]),
        lock_body(SEMAPHORE, MAX_CAPACITY, [(b"o%d" % k, EXCLUSIVE, 1 + k, exp + k, 100 + k)
                                            for k in range(50)]),
        lock_body(SEMAPHORE, 1, [(b"x", EXCLUSIVE, 5, exp, 1)]),  # over a lowered capacity
        fenced_body(1, None),
        fenced_body(I64_MAX, b""),
        fenced_body(42, BINARY_VALUE),
    ]
    with plain_server() as srv:
        c = srv.client()
        c.execute_command("FG.FENCE", "probe", 1)
        assert rdbpayload.split(c.dump("probe"))[1] == rdb_version()
        for n, body in enumerate(bodies):
            assert c.restore("k%d" % n, 0, payload(body))
            assert c.dump("k%d" % n) == payload(body), n
        assert c.execute_command("DEBUG", "RELOAD") in (b"OK", "OK")
        for n, body in enumerate(bodies):
            assert c.dump("k%d" % n) == payload(body), n
        assert_no_crash(srv)


def test_digest_covers_every_field():
    exp = now_us() + LEASE_MS * 1000
    base = [(b"a", SHARED, 1, exp, 5), (b"b", SHARED, 2, exp, 6)]
    variants = {
        "base": lock_body(LOCK, 0, base),
        "owner": lock_body(LOCK, 0, [(b"c",) + base[0][1:], base[1]]),
        "count": lock_body(LOCK, 0, [base[0][:2] + (3,) + base[0][3:], base[1]]),
        "expires": lock_body(LOCK, 0, [base[0][:3] + (exp + 1,) + base[0][4:], base[1]]),
        "token": lock_body(LOCK, 0, [base[0][:4] + (7,), base[1]]),
        "order": lock_body(LOCK, 0, [base[1], base[0]]),
        "one": lock_body(LOCK, 0, base[:1]),
        "mode": lock_body(LOCK, 0, [(b"a", EXCLUSIVE, 1, exp, 5)]),
        "kind": lock_body(SEMAPHORE, 10, [(b"a", EXCLUSIVE, 1, exp, 5)]),
        "capacity": lock_body(SEMAPHORE, 11, [(b"a", EXCLUSIVE, 1, exp, 5)]),
        "f:none": fenced_body(5, None),
        "f:empty": fenced_body(5, b""),
        "f:value": fenced_body(5, b"x"),
        "f:value2": fenced_body(5, b"y"),
        "f:token": fenced_body(6, b"x"),
    }
    with Server() as srv:
        c = srv.client()
        for name, body in variants.items():
            assert c.restore(name, 0, payload(body)), name
        digests = {name: s(c.execute_command("DEBUG", "DIGEST-VALUE", name)[0]) for name in variants}
        assert len(set(digests.values())) == len(digests), digests
        # equal values, equal digests
        assert c.restore("base2", 0, payload(variants["base"]))
        assert s(c.execute_command("DEBUG", "DIGEST-VALUE", "base2")[0]) == digests["base"]


def refused_cases():
    """(label, body) of payloads that must all be refused. (Truncations are
    left to the corruption test: RESTORE reads a cut value on into the
    payload's footer, which may complete it.)"""
    exp = now_us() + LEASE_MS * 1000
    one = (b"alice", EXCLUSIVE, 1, exp, 5)
    cases = []

    def add(label, body):
        cases.append((label, body))

    def with_holder(label, **changes):
        h = dict(zip(("owner", "mode", "count", "expires_us", "token"), one))
        h.update(changes)
        add(label, lock_body(LOCK, 0, [tuple(h.values())]))

    for encver in (0, 2, 1023):
        add("lock encver %d" % encver, lock_body(LOCK, 0, [one], encver=encver))
        add("fenced encver %d" % encver, fenced_body(1, b"v", encver=encver))
    for kind in (0, 3, 255, 256, 257, MASK):
        add("kind %d" % kind, lock_body(kind, 0, [one]))
        add("kind %d (as semaphore)" % kind, lock_body(kind, 3, [one]))
    for cap in (1, -1, MAX_CAPACITY):
        add("lock capacity %d" % cap, lock_body(LOCK, cap, [one]))
    for cap in (0, -1, MAX_CAPACITY + 1, I64_MAX, -I64_MAX - 1):
        add("semaphore capacity %d" % cap, lock_body(SEMAPHORE, cap, [one]))
    for declared in (0, 2, 3, MAX_HOLDERS, MAX_HOLDERS + 1, 1 << 32, (1 << 63), MASK):
        add("declared %d holders, one present" % declared, lock_body(LOCK, 0, [one], declared=declared))
    add("declared 1 holder, two present",
        lock_body(LOCK, 0, [(b"a", SHARED, 1, exp, 5), (b"b", SHARED, 1, exp, 6)], declared=1))
    for owner in (b"", b"o" * (OWNER_MAX + 1), b"o" * 100000):
        with_holder("owner of %d bytes" % len(owner), owner=owner)
    for mode in (2, 3, 255, 256, MASK):
        with_holder("mode %d" % mode, mode=mode)
    for count in (0, -1, MAX_REENTRY + 1, I64_MAX, -I64_MAX - 1):
        with_holder("count %d" % count, count=count)
    for expires in (0, -1, -I64_MAX - 1):
        with_holder("expires_us %d" % expires, expires_us=expires)
    for token in (0, TOKEN_MAX + 1, I64_MAX, 1 << 63, MASK):
        with_holder("token %d" % token, token=token)
    add("duplicate owners (shared)",
        lock_body(LOCK, 0, [(b"a", SHARED, 1, exp, 5), (b"a", SHARED, 1, exp, 6)]))
    add("duplicate owners (semaphore)",
        lock_body(SEMAPHORE, 9, [(b"a", EXCLUSIVE, 1, exp, 5), (b"b", EXCLUSIVE, 1, exp, 7),
                                 (b"a", EXCLUSIVE, 2, exp, 6)]))
    add("two exclusive holders",
        lock_body(LOCK, 0, [(b"a", EXCLUSIVE, 1, exp, 5), (b"b", EXCLUSIVE, 1, exp, 6)]))
    add("exclusive and shared holders",
        lock_body(LOCK, 0, [(b"a", SHARED, 1, exp, 5), (b"b", EXCLUSIVE, 1, exp, 6)]))
    add("semaphore shared holder", lock_body(SEMAPHORE, 5, [(b"a", SHARED, 1, exp, 5)]))
    add("semaphore count 0", lock_body(SEMAPHORE, 5, [(b"a", EXCLUSIVE, 0, exp, 5)]))
    add("semaphore count -3", lock_body(SEMAPHORE, 5, [(b"a", EXCLUSIVE, -3, exp, 5)]))
    add("a uint where the owner goes",
        lock_body(LOCK, 0, [], declared=1, tail=u(5) + u(0) + i64(1) + i64(exp) + u(5)))
    add("an extra field", lock_body(LOCK, 0, [one], tail=u(0)))
    add("no EOF", lock_body(LOCK, 0, [one])[:-1])
    for token in (0, 1 << 63, MASK):
        add("fenced token %d" % token, fenced_body(token, b"v"))
        add("fenced token %d, no value" % token, fenced_body(token, None))
    for has in (2, 255, MASK):
        add("fenced has_value %d" % has, fenced_body(5, b"v", has=has))
    add("fenced has_value 1 without a value", fenced_body(5, None, has=1))
    add("fenced has_value 0 with a value", fenced_body(5, b"v", has=0))
    add("fenced value as a uint", fenced_body(5, None, has=1, tail=u(7)))
    return cases


def used_memory(c):
    return int(c.info("memory")["used_memory"])


def test_invalid_states_are_refused_without_leaks():
    with Server(["--slowlog-log-slower-than", "-1"]) as srv:
        c = srv.client()
        cases = refused_cases()
        assert len(cases) > 70

        def run_all():
            accepted = []
            for label, body in cases:
                try:
                    c.restore("victim", 0, payload(body), replace=True)
                    accepted.append(label)
                except redis.ResponseError as e:
                    if "payload version or checksum" in str(e):
                        accepted.append(label + " (footer refused)")
            assert not accepted, "accepted (or refused for the wrong reason): %s" % accepted
            assert c.exists("victim") == 0

        # The first rounds (and the first INFO) allocate buffers that stay;
        # the reply buffer would shrink under the measure if it could.
        c.execute_command("DEBUG", "REPLYBUFFER", "RESIZING", "0")
        run_all()
        run_all()
        used_memory(c)
        mem0 = used_memory(c)
        rounds = 20
        for _ in range(rounds):
            run_all()
        grown = used_memory(c) - mem0
        # one leaked allocation per refusal would be more than this
        assert grown < 1024, "used_memory grew by %d bytes over %d refused payloads" % (
            grown, rounds * len(cases))
        # the valid neighbours of these cases are accepted
        exp = now_us() + LEASE_MS * 1000
        for body in (lock_body(LOCK, 0, [(b"o" * OWNER_MAX, EXCLUSIVE, MAX_REENTRY, 1, TOKEN_MAX)]),
                     lock_body(SEMAPHORE, MAX_CAPACITY, [(b"a", EXCLUSIVE, 1, exp, 1)]),
                     fenced_body(I64_MAX, None), fenced_body(1, b"")):
            assert c.restore("fine", 0, payload(body), replace=True)
        assert_no_crash(srv)


# ---------------------------------------------------------------------------
# Corrupted payloads: refused, or a valid state that every command survives


def base_bodies(c):
    """Small real values of each shape (owners short and not numbers, so
    that they are raw strings the corruptions can parse)."""
    lock(c, "z:excl", "alice")
    lock(c, "z:shared", "r-a", "SHARED")
    lock(c, "z:shared", "r-b", "SHARED")
    acquire(c, "z:sem", 10, "w-a", 2)
    acquire(c, "z:sem", 10, "w-b", 3)
    acquire(c, "z:sem", 10, "w-c", 1)
    c.execute_command("FG.FSET", "z:fval", 12, "hello")
    c.execute_command("FG.FENCE", "z:fnone", 13)
    out = []
    for k in ("z:excl", "z:shared", "z:sem", "z:fval", "z:fnone"):
        body, version, _ = rdbpayload.split(c.dump(k))
        assert version == rdb_version()
        rdbpayload.parse_module_value(body)
        out.append((k, body))
    return out


KEY_CALLS = [
    ("FG.LOCKINFO", "{k}"),
    ("DEBUG", "DIGEST-VALUE", "{k}"),
    ("DUMP", "{k}"),
    ("MEMORY", "USAGE", "{k}"),
    ("PEXPIRETIME", "{k}"),
    ("FG.LOCK", "{k}", "alice", 1000),
    ("FG.LOCK", "{k}", "r-a", 1000, "SHARED", "REENTRANT"),
    ("FG.UNLOCK", "{k}", "alice"),
    ("FG.ACQUIRE", "{k}", 10, "w-a", 1, 1000),
    ("FG.RELEASE", "{k}", "w-b", 1),
    ("FG.EXTEND", "{k}", "w-c", 5000),
    ("FG.FGET", "{k}"),
    ("FG.FGET", "{k}", 14),
    ("FG.FSET", "{k}", 15, "v"),
    ("FG.FENCE", "{k}", 16),
    ("COPY", "{k}", "{k}:copy"),
    ("FG.LOCKINFO", "{k}:copy"),
    ("FG.FORCEUNLOCK", "{k}:copy"),
    ("FG.FORCEUNLOCK", "{k}"),
]


def test_corrupted_restore_payloads_never_crash():
    # FG.HOLD, sent as a repair tool would, checks the values RESTORE accepts
    srv = plain_server("--sanitize-dump-payload", "yes", "--slowlog-log-slower-than", "-1",
                       "--floodgate.enable-effect-commands", "yes")
    try:
        srv.start()
        c = srv.client(socket_timeout=20)
        bases = base_bodies(c)
        cases = []
        for n, (k, body) in enumerate(bases):
            for label, vb in rdbpayload.variants(body, seed=7000 + n, random_cases=150 * FUZZ_SCALE):
                cases.append(("%s/%s" % (k, label), vb))
        # each type's fields under the other type's id
        (_, lk), (_, fv) = bases[0], bases[3]
        lid, fid = rdbpayload.parse_module_value(lk)[0], rdbpayload.parse_module_value(fv)[0]
        cases.append(("lock-as-fenced", fv[:fid.end] + lk[lid.end:]))
        cases.append(("fenced-as-lock", lk[:lid.end] + fv[fid.end:]))
        assert len(cases) >= 2000, len(cases)
        crashes, accepted, refused, invalid = [], [], 0, []

        def restart(label, body, stage):
            crashes.append("%s (%s): RESTORE k 0 %s\n    %s" % (
                label, stage, payload(body).hex(), srv.log_tail(5).replace("\n", "\n    ")))
            if len(crashes) >= 10:
                raise AssertionError("crashes:\n" + "\n".join(crashes))
            srv.kill9()
            srv.start()
            return srv.client(socket_timeout=20)

        refused_bodies = []
        for n, (label, body) in enumerate(cases):
            key = "fz:%d" % n
            try:
                c.restore(key, 0, payload(body))
                accepted.append((key, label, body))
            except redis.ResponseError as e:
                refused += 1
                refused_bodies.append(body)
                assert "payload version or checksum" not in str(e), label
            except (redis.ConnectionError, redis.TimeoutError):
                c = restart(label, body, "RESTORE")
        assert c.ping()
        # refusing again and again holds on to nothing
        c.execute_command("DEBUG", "REPLYBUFFER", "RESIZING", "0")
        used_memory(c)
        mem = []
        for _ in range(3):
            p = c.pipeline(transaction=False)
            for body in refused_bodies:
                p.restore("victim", 0, payload(body))
            assert all(isinstance(r, redis.ResponseError) for r in p.execute(raise_on_error=False))
            mem.append(used_memory(c))
        assert mem[2] - mem[0] < 1024, "used_memory %r over rounds of %d refused payloads" % (
            mem, len(refused_bodies))
        # an accepted value is a valid value, one that FG.HOLD (AOF replay,
        # replicas) takes holder by holder
        for key, label, body in accepted:
            value = decode(c.dump(key))
            if value and value[0] == "lock":
                if not valid_lock(*value[1:]):
                    invalid.append("%s: RESTORE accepted %r" % (label, value))
                    continue
                c.delete("rebuilt")
                kind = {LOCK: "lock", SEMAPHORE: "semaphore"}[value[1]]
                for owner, mode, count, expires_us, token in value[3]:
                    try:
                        c.execute_command("FG.HOLD", "rebuilt", kind, value[2], owner,
                                          ["exclusive", "shared"][mode], count, expires_us, token)
                    except redis.ResponseError as e:
                        invalid.append("%s: FG.HOLD refuses %r of the accepted %r: %s"
                                       % (label, owner, value, e))
            if value and value[0] == "fenced" and not 1 <= value[1] <= I64_MAX:
                invalid.append("%s: RESTORE accepted %r" % (label, value))
        # every command survives every accepted value
        for key, label, body in accepted:
            p = c.pipeline(transaction=False)
            for cmd in KEY_CALLS:
                p.execute_command(*[a.replace("{k}", key) if isinstance(a, str) else a for a in cmd])
            p.ping()
            try:
                res = p.execute(raise_on_error=False)
            except (redis.ConnectionError, redis.TimeoutError):
                c = restart(label, body, "commands on the accepted key")
                continue
            assert res[-1] is True, (label, res)
        if srv.alive():
            try:
                assert c.execute_command("DEBUG", "RELOAD") in (b"OK", "OK")
            except redis.ResponseError as e:
                invalid.append("DEBUG RELOAD: %s\n%s" % (e, srv.log_tail(8)))
            except (redis.ConnectionError, redis.TimeoutError):
                crashes.append("DEBUG RELOAD: " + srv.log_tail(20))
        print("corrupted lock payloads: %d cases, %d refused, %d accepted, %d crashes"
              % (len(cases), refused, len(accepted), len(crashes)))
        assert not crashes, "\n".join(crashes[:5])
        assert not invalid, "\n".join(invalid[:10])
        assert refused > len(cases) // 2, (refused, len(accepted))
        assert_no_crash(srv)
    finally:
        srv.cleanup()


# ---------------------------------------------------------------------------
# Reload, restart, AOF, DUMP/RESTORE, COPY of states built by the commands

PLAIN = ["plain:str", "plain:ttl"]


def test_debug_reload():
    with Server() as srv:
        c = srv.client()
        keys = build_states(c) + PLAIN
        check_built_states(c)
        check_lock_ttls(c, keys)
        before = snapshot(c, keys)
        assert c.execute_command("DEBUG", "RELOAD") in (b"OK", "OK")
        assert_same(before, snapshot(c, keys), "DEBUG RELOAD")
        assert_no_crash(srv)


def test_save_and_restart():
    with Server() as srv:
        c = srv.client()
        keys = build_states(c) + PLAIN
        before = snapshot(c, keys)
        assert c.save()
        srv.restart()
        c = srv.client()
        assert "Done loading RDB" in open(srv.logfile, errors="replace").read()
        assert_same(before, snapshot(c, keys), "SAVE + restart")
        check_built_states(c)
        assert_no_crash(srv)


@pytest.mark.parametrize("preamble", ["yes", "no"])
def test_aof_rewrite_and_restart(preamble):
    with Server(["--appendonly", "yes", "--aof-use-rdb-preamble", preamble]) as srv:
        c = srv.client()
        keys = build_states(c) + PLAIN
        c.bgrewriteaof()
        wait_aof_rewrite_done(c)
        before = snapshot(c, keys)
        base = [f for f in aof_files(srv) if ".base." in f]
        assert len(base) == 1, aof_files(srv)
        if preamble == "no":
            cmds = read_aof_commands(base[0])
            holds = [a for a in cmds if a[0].upper() == b"FG.HOLD"]
            # one FG.HOLD per holder: key kind capacity owner mode count expires_us token
            expected = []
            for k in keys:
                v = decode(c.dump(k))
                if v and v[0] == "lock":
                    kind = {LOCK: b"lock", SEMAPHORE: b"semaphore"}[v[1]]
                    for owner, mode, count, expires, token in v[3]:
                        expected.append([b"FG.HOLD", k.encode(), kind, b"%d" % v[2], owner,
                                         [b"exclusive", b"shared"][mode], b"%d" % count,
                                         b"%d" % expires, b"%d" % token])
            assert sorted(holds) == sorted(expected)
            fenced = sorted(a for a in cmds if a[0].upper() in (b"FG.FSET", b"FG.FENCE"))
            assert fenced == sorted([
                [b"FG.FSET", b"f:val", b"7", b"hello"], [b"FG.FSET", b"f:bin", b"9", BINARY_VALUE],
                [b"FG.FSET", b"f:empty", b"3", b""], [b"FG.FENCE", b"f:none", b"11"],
                [b"FG.FSET", b"f:big", b"%d" % I64_MAX, b"v" * 100000]])
            names = {a[0].upper() for a in cmds}
            assert not names & {b"FG.LOCK", b"FG.ACQUIRE"}, names
        srv.restart()
        c = srv.client()
        assert_same(before, snapshot(c, keys), "BGREWRITEAOF (preamble %s) + restart" % preamble)
        check_built_states(c)
        assert_no_crash(srv)


def test_aof_incremental_and_restart():
    """Without a rewrite, the AOF holds the effects (FG.HOLD with absolute
    lease ends), never the requests, and replays to the same values."""
    with Server(["--appendonly", "yes"]) as srv:
        c = srv.client()
        keys = build_states(c) + PLAIN
        c.execute_command("FG.UNLOCK", "l:reent", "bob")
        c.execute_command("FG.RELEASE", "s:one", "w2", 1)
        c.execute_command("FG.EXTEND", "l:excl", "alice", LEASE_MS * 2)
        wait_for(lambda: c.info("persistence")["aof_rewrite_in_progress"] == 0, timeout=20)
        before = snapshot(c, keys)
        incr = [f for f in aof_files(srv) if ".incr." in f]
        names = {a[0].upper() for a in read_aof_commands(incr[0])}
        assert b"FG.HOLD" in names and not names & {b"FG.LOCK", b"FG.ACQUIRE", b"FG.EXTEND"}, names
        srv.restart()
        c = srv.client()
        assert "DB loaded from append only file" in open(srv.logfile, errors="replace").read()
        assert_same(before, snapshot(c, keys), "AOF + restart")
        assert_no_crash(srv)


def test_dump_restore_to_this_and_another_server():
    with Server() as a, Server() as b:
        ca, cb = a.client(), b.client()
        keys = build_states(ca)
        for k in keys:
            dumped = ca.dump(k)
            at = ca.execute_command("PEXPIRETIME", k)
            assert ca.restore(k + ":r", max(at, 0), dumped, absttl=at > 0)
            assert cb.restore(k, max(at, 0), dumped, absttl=at > 0)
            for c, dst in ((ca, k + ":r"), (cb, k)):
                assert c.dump(dst) == dumped, dst
                assert c.execute_command("PEXPIRETIME", dst) == at, dst
                assert s(c.execute_command("DEBUG", "DIGEST-VALUE", dst)) == \
                    s(ca.execute_command("DEBUG", "DIGEST-VALUE", k))
            ca.delete(k + ":r")
        # the restored locks work: held by their owners, refused to others
        assert cb.execute_command("FG.LOCK", "l:excl", "mallory", 1000)[0] == 0
        assert cb.execute_command("FG.UNLOCK", "l:excl", "alice") == 0
        assert cb.execute_command("FG.ACQUIRE", "s:one", 5, "w3", 1, 1000)[0] == 0
        assert cb.execute_command("FG.FSET", "f:val", 6, "stale") == 0
        assert cb.execute_command("FG.FGET", "f:bin") == [1, 9, BINARY_VALUE]
        assert_no_crash(a)
        assert_no_crash(b)


def test_copy_is_deep():
    with Server() as srv:
        c = srv.client()
        keys = build_states(c)
        before = snapshot(c, keys)
        for k in keys:
            assert c.execute_command("COPY", k, k + ":cp") == 1
            assert c.dump(k + ":cp") == c.dump(k)
            assert c.execute_command("PEXPIRETIME", k + ":cp") == c.execute_command("PEXPIRETIME", k)
        # change every copy; the originals stay as they were
        assert c.execute_command("FG.UNLOCK", "l:excl:cp", "alice") == 0
        assert c.execute_command("FG.UNLOCK", "l:reent:cp", "bob") == 2
        assert c.execute_command("FG.UNLOCK", "l:shared:cp", BINARY_OWNER) == 0
        assert c.execute_command("FG.RELEASE", "s:many:cp", "owner-3") == 0
        assert c.execute_command("FG.FORCEUNLOCK", "s:one:cp") == 2
        assert c.execute_command("FG.FSET", "f:val:cp", 8, "new") == 1
        assert c.execute_command("FG.FSET", "f:none:cp", 12, "first") == 1
        assert c.execute_command("FG.FSET", "f:bin:cp", 10, "x") == 1
        assert_same(before, snapshot(c, keys), "changing the copies", dataset=False)
        assert decode(c.dump("f:none:cp")) == ("fenced", 12, b"first")
        c.delete(*[k + ":cp" for k in keys])
        assert_same(before, snapshot(c, keys), "deleting the copies")
        assert_no_crash(srv)


def test_fset_keeps_a_ttl():
    with Server() as srv:
        c = srv.client()
        assert c.execute_command("FG.FSET", "f", 1, "a") == 1
        assert c.pexpire("f", LEASE_MS)
        at = c.execute_command("PEXPIRETIME", "f")
        assert c.execute_command("FG.FSET", "f", 2, "b") == 1
        assert c.execute_command("FG.FENCE", "f", 3) == 1
        assert c.execute_command("PEXPIRETIME", "f") == at
        assert decode(c.dump("f")) == ("fenced", 3, b"b")


# ---------------------------------------------------------------------------
# The fencing counter


def next_token(c):
    """The token the next grant gets (a fresh key, released at once)."""
    reply = lock(c, "probe", "probe", lease_ms=10000)
    assert c.execute_command("FG.UNLOCK", "probe", "probe") == 0
    return int(reply[1])


def test_fencing_counter_survives_rdb():
    with Server() as srv:
        c = srv.client()
        t1 = int(lock(c, "k", "a")[1])
        assert c.execute_command("FG.UNLOCK", "k", "a") == 0
        assert c.exists("k") == 0
        assert c.save()
        srv.restart()
        c = srv.client()
        assert next_token(c) > t1


@pytest.mark.parametrize("rewrite,preamble", [(False, "yes"), (True, "yes"), (True, "no")])
def test_fencing_counter_survives_aof(rewrite, preamble):
    """(Without a preamble, a rewritten AOF has no aux data: the clock's
    floor keeps the next token above, as it would after a lost counter.)"""
    with Server(["--appendonly", "yes", "--aof-use-rdb-preamble", preamble]) as srv:
        c = srv.client()
        t1 = int(lock(c, "k", "a")[1])
        assert c.execute_command("FG.UNLOCK", "k", "a") == 0
        if rewrite:
            c.bgrewriteaof()
            wait_aof_rewrite_done(c)
        srv.restart()
        c = srv.client()
        assert next_token(c) > t1


def held_token_far_ahead(c):
    """Raises the counter far above the clock's floor (now in microseconds) through
    a replicated hold, then releases it: afterwards only the counter itself
    can explain a token above it. The hold is sent as a repair tool would;
    restarts, replays and replicas then run with the default (off)."""
    far = time.time_ns() // 1_000 + 10 ** 15
    c.config_set("floodgate.enable-effect-commands", "yes")
    assert ok(c.execute_command("FG.HOLD", "far", "lock", 0, "o", "exclusive", 1,
                                now_us() + 10 ** 9, far))
    assert c.execute_command("FG.UNHOLD", "far", "o") in (1, b"OK", "OK")
    c.config_set("floodgate.enable-effect-commands", "no")
    assert c.exists("far") == 0
    return far


def test_fencing_counter_above_the_clock_survives_rdb_and_preamble_aof():
    with Server() as srv:
        c = srv.client()
        far = held_token_far_ahead(c)
        assert next_token(c) == far + 1
        assert c.save()
        srv.restart()
        c = srv.client()
        assert next_token(c) == far + 2
        c.execute_command("FLUSHALL")
        assert next_token(c) == far + 3  # FLUSHALL never lowers it
        assert c.execute_command("DEBUG", "RELOAD") in (b"OK", "OK")
        assert next_token(c) == far + 4
    with Server(["--appendonly", "yes"]) as srv:
        c = srv.client()
        far = held_token_far_ahead(c)
        srv.restart()  # FG.HOLD in the AOF raises the counter
        c = srv.client()
        assert next_token(c) == far + 1
        c.bgrewriteaof()  # the RDB preamble carries it
        wait_aof_rewrite_done(c)
        srv.restart()
        c = srv.client()
        assert next_token(c) == far + 2


def test_full_sync_carries_the_counter():
    """A replica that joins after the grants (a full sync: the RDB with its
    aux data) continues the counter once promoted."""
    with Server(["--repl-diskless-sync-delay", "0"]) as master, Server() as replica:
        cm, cr = master.client(), replica.client()
        far = held_token_far_ahead(cm)
        cr.execute_command("REPLICAOF", "127.0.0.1", master.port)
        wait_for(lambda: cr.info("replication")["master_link_status"] == "up", timeout=20)
        cr.execute_command("REPLICAOF", "NO", "ONE")
        assert next_token(cr) == far + 1


def test_restore_raises_the_counter():
    """A lock moved by DUMP/RESTORE (MIGRATE) from a server whose tokens are
    ahead: the next grant still gets a greater token than its holders'."""
    far = time.time_ns() // 1_000 + 10 ** 15
    exp = now_us() + LEASE_MS * 1000
    with Server() as srv:
        c = srv.client()
        body = lock_body(SEMAPHORE, 5, [(b"a", EXCLUSIVE, 1, exp, far), (b"b", EXCLUSIVE, 1, exp, far - 9)])
        assert c.restore("moved", 0, payload(body))
        assert acquire(c, "moved", 5, "c", 1)[1] == far + 1
        # a refused payload raises nothing
        bad = lock_body(SEMAPHORE, 5, [(b"a", EXCLUSIVE, 1, exp, far + 100), (b"a", EXCLUSIVE, 1, exp, 1)])
        with pytest.raises(redis.ResponseError):
            c.restore("bad", 0, payload(bad))
        assert next_token(c) == far + 2


def test_tokens_stay_in_their_range():
    """Lock tokens are 1 .. 2^53-1 everywhere (FG.HOLD, the RDB file). A
    counter raised to the top must not push a grant beyond it: the server
    could neither replicate that grant nor load the file it saves
    (test_lock_fencing.py has the rest)."""
    with Server(["--floodgate.enable-effect-commands", "yes"]) as srv:
        c = srv.client()
        assert ok(c.execute_command("FG.HOLD", "top", "lock", 0, "o", "exclusive", 1,
                                    now_us() + 10 ** 9, TOKEN_MAX))
        c.delete("top")
        with pytest.raises(redis.ResponseError, match="no fencing token left"):
            c.execute_command("FG.LOCK", "k", "a", 10000)
        assert c.save()
        srv.restart()  # the file loads
        assert_no_crash(srv)


# ---------------------------------------------------------------------------
# RDB files with the module's aux data


def rdb_body(aux=b"", keys=b""):
    """What follows the magic in an RDB file (checksum 0: not checked)."""
    return aux + b"\xfe\x00" + keys + b"\xff" + b"\0" * 8


def rdb_file(aux=b"", keys=b""):
    """An RDB file of the server's RDB version."""
    return rdb_file_magic() + rdb_body(aux, keys)


def aux_record(counter_fields, encver=1, when=1):
    return (b"\xf7" + enc_len(type_id("fg-lockst", encver)) + enc_len(OP_UINT) + enc_len(when)
            + counter_fields + enc_len(OP_EOF))


def start_on(dirpath, contents):
    """Starts a server on an RDB file: (Server, None) when it runs, (None,
    log) when it refused the file and exited."""
    with open(os.path.join(dirpath, "dump.rdb"), "wb") as f:
        f.write(contents)
    srv = Server(dir=dirpath)
    try:
        srv.start()
    except RuntimeError as e:
        log = open(srv.logfile, errors="replace").read()
        assert "exited with 0" in str(e) or "exited with 1" in str(e), str(e)
        return None, log
    return srv, None


def test_rdb_file_with_aux_data(tmp_path):
    far = time.time_ns() // 1_000 + 10 ** 15
    value = fenced_body(77, b"value")
    key = value[:1] + enc_len(4) + b"fset" + value[1:]  # type, key name, value
    srv, log = start_on(str(tmp_path), rdb_file(aux_record(u(far)), key))
    assert srv is not None, log
    try:
        c = srv.client()
        assert decode(c.dump("fset")) == ("fenced", 77, b"value")
        assert next_token(c) == far + 1
        # the file the server writes has the raised counter too
        assert c.save()
        srv.restart()
        assert next_token(srv.client()) == far + 2
    finally:
        srv.stop()
    # a counter below the clock's floor is raised by the floor
    srv, log = start_on(str(tmp_path), rdb_file(aux_record(u(5))))
    assert srv is not None, log
    try:
        assert next_token(srv.client()) > time.time_ns() // 1_000 - 60 * 10 ** 6
    finally:
        srv.stop()


@pytest.mark.parametrize("label,contents", [
    ("encver 2", rdb_body(aux_record(u(5), encver=2))),
    ("counter above INT64_MAX", rdb_body(aux_record(u(1 << 63)))),
    ("counter at the ceiling of tokens, 2^53", rdb_body(aux_record(u(TOKEN_MAX + 1)))),
    ("counter at INT64_MAX", rdb_body(aux_record(u(I64_MAX)))),
    ("no counter", rdb_body(aux_record(b""))),
    ("a string", rdb_body(aux_record(buf(b"12")))),
    ("two counters", rdb_body(aux_record(u(5) + u(6)))),
    ("the file ends in the counter", aux_record(u(1000))[:-2]),
])
def test_rdb_file_with_bad_aux_data_is_refused(tmp_path, label, contents):
    # the magic is added here: parameters are built before any server runs
    srv, log = start_on(str(tmp_path), rdb_file_magic() + contents)
    if srv is not None:
        srv.stop()
    assert srv is None, "%s: the server loaded the file" % label
    assert "STACK TRACE" not in log and "crashed by signal" not in log, log[-2000:]

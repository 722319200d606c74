"""Fencing tokens at their ceiling (docs/locks.md, "Fencing tokens").

Tokens stay below 2^53 (so that every token is exact as a Lua or JavaScript
number). No token may be handed out twice, and the server's counter may
never be pinned at the ceiling, whatever reaches it: FG.HOLD from a client
(from a repair tool: floodgate.enable-effect-commands on), AOF replay, a master,
a RESTORE payload or an RDB file (test_lock_persistence.py has the files
whose counter is at or above the ceiling: refused). A grant that cannot
take a token above every token given is refused with an error, and nothing
is written.
"""

import os
import socket
import threading
import time

import pytest
import redis

from harness import Server, wait_for
from test_lock_persistence import (EXCLUSIVE, I64_MAX, LOCK, SEMAPHORE, aux_record, fenced_body,
                                   lock_body, payload, rdb_file, start_on, u)

CEILING = 1 << 53
LAST = CEILING - 1  # the largest token: JavaScript's Number.MAX_SAFE_INTEGER
NO_TOKEN = "no fencing token left"
EFFECTS = ["--floodgate.enable-effect-commands", "yes"]  # FG.HOLD from a client


def now_us():
    return time.time_ns() // 1000


def hold(c, key, owner, token, kind="lock", capacity=0):
    """FG.HOLD of one exclusive holder whose lease ends in 1000 s."""
    return c.execute_command("FG.HOLD", key, kind, capacity, owner, "exclusive", 1,
                             now_us() + 10 ** 9, token)


def grant_token(c, key, owner="a"):
    reply = c.execute_command("FG.LOCK", key, owner, 60000)
    assert int(reply[0]) == 1, reply
    return int(reply[1])


def next_token(c):
    return int(c.info("floodgate")["floodgate_lock_next_token"])


def assert_tokens_still_grow(c, floor):
    """Grants get tokens above `floor`, all different, below the ceiling:
    nothing pinned the counter."""
    tokens = []
    for _ in range(3):
        tokens.append(grant_token(c, "fresh"))
        assert c.execute_command("FG.UNLOCK", "fresh", "a") == 0
    assert floor < tokens[0] < tokens[1] < tokens[2] < CEILING, tokens


# ---------------------------------------------------------------------------
# FG.HOLD from a client


def test_a_forged_hold_cannot_pin_the_counter():
    """The reported attack: FG.HOLD with token 2^63 - 1 was accepted, and
    every later grant got that same token, so a stale holder's FG.FSET
    passed the fence. Now the hold is refused and tokens keep growing."""
    with Server(EFFECTS) as srv:
        c = srv.client()
        stale = grant_token(c, "res:lock", "stale")
        assert c.execute_command("FG.FSET", "res", stale, "v1") == 1
        with pytest.raises(redis.ResponseError, match="token must be between 1 and %d" % LAST):
            hold(c, "junk", "evil", I64_MAX)
        with pytest.raises(redis.ResponseError, match="token must be between 1 and %d" % LAST):
            hold(c, "junk", "evil", CEILING)
        assert c.exists("junk") == 0
        assert_tokens_still_grow(c, stale)
        # The lock passes to a new holder (the stale one's lease ran out):
        # its token is greater, and the stale holder's write is refused.
        c.execute_command("FG.FORCEUNLOCK", "res:lock")
        fresh = grant_token(c, "res:lock", "fresh")
        assert fresh > stale
        assert c.execute_command("FG.FSET", "res", fresh, "v2") == 1
        assert c.execute_command("FG.FSET", "res", stale, "stale write") == 0
        assert c.execute_command("FG.FGET", "res") == [1, fresh, b"v2"]


def test_after_the_last_token_grants_are_refused():
    """A hold with the last token (2^53 - 1, a grant a server could have
    made) leaves no token above it: every grant is then refused with an
    error and writes nothing, where a token would have been given twice.
    Re-entries keep their token and still work."""
    with Server(EFFECTS) as srv:
        c = srv.client()
        assert grant_token(c, "held", "h") < LAST
        reentrant = c.execute_command("FG.LOCK", "mine", "me", 60000, "REENTRANT")
        waiter = socket.create_connection(("127.0.0.1", srv.port))
        waiter.settimeout(30)
        waiter.sendall(b"*6\r\n$7\r\nFG.LOCK\r\n$4\r\nheld\r\n$1\r\nw\r\n$5\r\n60000\r\n"
                       b"$4\r\nWAIT\r\n$5\r\n20000\r\n")
        wait_for(lambda: int(c.info("floodgate")["floodgate_lock_waiters"]) == 1)

        assert hold(c, "last", "o", LAST) in (b"OK", "OK")
        assert next_token(c) == 0
        assert c.execute_command("FG.LOCKINFO", "last")[-1] == 0  # next_token
        for command in (("FG.LOCK", "k", "a", 1000),
                        ("FG.LOCK", "k", "a", 1000, "SHARED"),
                        ("FG.ACQUIRE", "sem", 5, "a", 1, 1000),
                        ("FG.MLOCK", 2, "m1", "m2", "a", 1000)):
            with pytest.raises(redis.ResponseError, match=NO_TOKEN):
                c.execute_command(*command)
        assert c.exists("k", "sem", "m1", "m2") == 0
        # The waiter's turn comes: it is told, not given a token again.
        assert c.execute_command("FG.UNLOCK", "held", "h") == 0
        reply = waiter.recv(1000)
        assert reply.startswith(b"-ERR " + NO_TOKEN.encode()), reply
        assert c.exists("held") == 0
        again = c.execute_command("FG.LOCK", "mine", "me", 60000, "REENTRANT")
        assert again[:2] == [1, reentrant[1]] and again[3] == 2
        waiter.close()


# ---------------------------------------------------------------------------
# Effects replayed or replicated


def test_aof_replay_of_a_hold_beyond_the_ceiling_leaves_the_counter():
    """An AOF written by an older version may hold such an FG.HOLD: replay
    refuses it (logged as an error of the AOF loading client) and the
    counter stays where the file's legitimate grants put it."""
    with Server(["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]) as srv:
        c = srv.client()
        before = grant_token(c, "legit")
        srv.stop()
        aof_dir = os.path.join(srv.dir, "appendonlydir")
        incr = [os.path.join(aof_dir, n) for n in os.listdir(aof_dir) if n.endswith(".incr.aof")]
        assert len(incr) == 1, incr
        args = [b"FG.HOLD", b"junk", b"lock", b"0", b"evil", b"exclusive", b"1",
                str(now_us() + 10 ** 9).encode(), str(I64_MAX).encode()]
        with open(incr[0], "ab") as f:
            f.write(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args))
        srv.start()
        c = srv.client()
        assert c.exists("legit") == 1 and c.exists("junk") == 0
        assert_tokens_still_grow(c, before)
        with open(srv.logfile, errors="replace") as log:
            assert "token must be between 1 and %d" % LAST in log.read()


class FakeMaster:
    """A master that answers a replica's handshake with a full sync of an
    empty RDB file, then streams `commands` (RESP), as a master of an older
    version, or a forged one, could."""

    def __init__(self, commands):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.port = self.listener.getsockname()[1]
        self.commands = commands
        self.conn = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @staticmethod
    def _read_command(f):
        argc = int(f.readline()[1:])
        args = []
        for _ in range(argc):
            size = int(f.readline()[1:])
            args.append(f.read(size + 2)[:-2])
        return args

    def _serve(self):
        self.conn, _ = self.listener.accept()
        f = self.conn.makefile("rb")
        while True:
            name = self._read_command(f)[0].upper()
            if name == b"PING":
                self.conn.sendall(b"+PONG\r\n")
            elif name == b"REPLCONF":
                self.conn.sendall(b"+OK\r\n")
            elif name == b"PSYNC":
                rdb = b"REDIS0010\xff" + b"\0" * 8  # checksum 0: not checked
                self.conn.sendall(b"+FULLRESYNC " + b"f" * 40 + b" 0\r\n")
                self.conn.sendall(b"$%d\r\n" % len(rdb) + rdb + self.commands)
                return

    def close(self):
        if self.conn is not None:
            self.conn.close()
        self.listener.close()


def resp(*args):
    args = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


def test_a_hold_beyond_the_ceiling_from_a_master_leaves_the_counter():
    """A replica refuses FG.HOLD with a token at or above the ceiling from
    its master too (an error to its master, in its log), applies the
    legitimate ones, and continues the counter from those once promoted."""
    legit = now_us() + 10 ** 12  # a counter far ahead of the clock
    expires = now_us() + 10 ** 9
    stream = (resp("SELECT", 0)
              + resp("FG.HOLD", "good", "lock", 0, "o", "exclusive", 1, expires, legit)
              + resp("FG.HOLD", "junk", "lock", 0, "evil", "exclusive", 1, expires, I64_MAX)
              + resp("FG.HOLD", "junk2", "semaphore", 5, "evil", "exclusive", 1, expires, CEILING)
              + resp("SET", "marker", 1))
    master = FakeMaster(stream)
    try:
        with Server() as replica:
            c = replica.client()
            c.execute_command("REPLICAOF", "127.0.0.1", master.port)
            wait_for(lambda: c.get("marker") == b"1", timeout=30)
            assert c.exists("good") == 1 and c.exists("junk", "junk2") == 0
            assert next_token(c) == legit + 1
            c.execute_command("REPLICAOF", "NO", "ONE")
            assert_tokens_still_grow(c, legit)
            with open(replica.logfile, errors="replace") as log:
                assert log.read().count("token must be between 1 and %d" % LAST) == 2
    finally:
        master.close()


# ---------------------------------------------------------------------------
# Payloads: RESTORE and RDB files


def test_restore_of_a_lock_beyond_the_ceiling_is_refused():
    """MIGRATE and RESTORE carry holders' tokens, and loading a lock raises
    the counter to them: a holder at or above the ceiling would leave no
    token for any grant, so the payload is refused (and raises nothing).
    The last token itself loads, as a server may have granted it."""
    exp = now_us() + 10 ** 9
    with Server(EFFECTS) as srv:
        c = srv.client()
        before = grant_token(c, "probe")
        for token in (CEILING, CEILING + 1, I64_MAX):
            for body in (lock_body(LOCK, 0, [(b"a", EXCLUSIVE, 1, exp, token)]),
                         lock_body(SEMAPHORE, 5, [(b"a", EXCLUSIVE, 1, exp, 7),
                                                  (b"b", EXCLUSIVE, 1, exp, token)])):
                with pytest.raises(redis.ResponseError, match="Bad data format"):
                    c.restore("moved", 0, payload(body))
                assert c.exists("moved") == 0
        assert_tokens_still_grow(c, before)
        # Fenced values never raise the counter: any token of theirs is fine.
        assert c.restore("fenced", 0, payload(fenced_body(I64_MAX, b"v")))
        assert_tokens_still_grow(c, before)
        assert c.restore("moved", 0, payload(lock_body(LOCK, 0, [(b"a", EXCLUSIVE, 1, exp, LAST)])))
        assert next_token(c) == 0


def test_rdb_file_with_the_last_token_loads(tmp_path):
    srv, log = start_on(str(tmp_path), rdb_file(aux_record(u(LAST))))
    assert srv is not None, log
    try:
        c = srv.client()
        assert next_token(c) == 0
        with pytest.raises(redis.ResponseError, match=NO_TOKEN):
            c.execute_command("FG.LOCK", "k", "a", 1000)
    finally:
        srv.stop()

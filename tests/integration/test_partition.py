"""Partitions and split brain (docs/locks.md, "Partitions and split
brain"): a master M cut off from its replicas R1 and R2 while R1 is
promoted, with clients on both sides taking the same locks.

    side A: M                side B: R1 (promoted), R2 (its replica)

With durable grants (the client's durable_replicas = 1: WAIT for a
replica before acknowledging), a lock never has two durable holders: M,
which no replica hears any more, acknowledges none, and R1 knows every
durable grant made before the cut. Without them, the same partition
grants every lock on both sides. That contrast is asserted too, so the
test fails if the partition was not real. After the heal M becomes R1's
replica and its grants vanish. A second test shows min-replicas-to-write
closing the old master.

The partition is made with network namespaces where the test can create
them (root, with unshare, nsenter and iproute2's ip). M runs in a
namespace of its own, and R1 and R2 share another; a veth pair joins the
two namespaces, and its link is set down to cut and up to heal. Every
client reaches its server through a unix socket. Elsewhere the test
falls back to CLIENT PAUSE WRITE on the replicas: they stop applying what
M sends, and the failover then drops their links to M.
FLOODGATE_PARTITION=netns|pause forces one of the two. The test id
(test_...[netns] or [pause]) and the output (-s) say which one ran.

Every lease outlives the test, so any two grants of one key are held at
the same time. Nothing waits for a fixed time: each step waits for its
condition, with a deadline. The servers die with the test
(setpriv --pdeathsig where it exists), and the namespaces and the veth
pair go with them.
"""

import os
import shutil
import subprocess
import threading
import time

import pytest
import redis

import floodgate
import harness
from floodgate import NotDurableError
from harness import Server, s, wait_for, wait_replica_synced
from topology import assert_no_crash, digest

LEASE_MS = 600_000          # longer than the test: all grants of a key overlap
DURABLE_TIMEOUT_MS = 1000   # the library's default
DEADLINE_S = 20             # the most any one step may take on a loaded machine
DURABLE = ["split:%d" % i for i in range(4)]  # taken with durable grants
PLAIN = ["plain:%d" % i for i in range(4)]    # the contrast: without them
ADDR_A, ADDR_B = "10.251.0.1", "10.251.0.2"   # the veth pair, only inside our namespaces
LINK_A, LINK_B = "fgsplit-a", "fgsplit-b"
MAX_LAG_S = 1               # min-replicas-max-lag of the second test


# ------------------------------------------------------------ the two modes

def run(*argv):
    p = subprocess.run(argv, timeout=30, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(argv), p.returncode,
                                                 p.stderr.decode(errors="replace").strip()))


def netns_unusable():
    """Why network namespaces cannot be used here (None: they can)."""
    if os.geteuid() != 0:
        return "not root"
    for tool in ("unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            return "no %s" % tool
    try:  # a namespace of our own with a veth pair in it, gone when `ip` exits
        run("unshare", "--net", "ip", "link", "add", LINK_A, "type", "veth",
            "peer", "name", LINK_B)
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        return "cannot make a namespace with a veth pair (%s)" % e
    return None


def partition_mode():
    """("netns" or "pause", why)."""
    forced = os.environ.get("FLOODGATE_PARTITION")
    if forced in ("netns", "pause"):
        return forced, "FLOODGATE_PARTITION=" + forced
    assert not forced, "FLOODGATE_PARTITION is netns or pause, not %r" % forced
    why_not = netns_unusable()
    return ("pause", "no network namespaces: " + why_not) if why_not else ("netns", "as root")


MODE, MODE_WHY = partition_mode()


def say(msg):
    print("test_partition [%s]: %s" % (MODE, msg), flush=True)


class NsServer(Server):
    """A redis-server with the module, reached by its unix socket. In netns
    mode it runs in a network namespace: a new one (`unshare --net`), or
    that of `join`, another NsServer. It listens on every address there."""

    def __init__(self, extra_args=(), netns=False, join=None):
        # shutdown-timeout 0: a master whose replicas are cut off stops at
        # once instead of waiting 10 s for them.
        super().__init__(["--repl-diskless-sync-delay", "0", "--protected-mode", "no",
                          "--shutdown-timeout", "0"] + list(extra_args))
        self.netns = netns
        self.join = join
        self.sock = os.path.join(self.dir, "redis.sock")
        self.url = "unix://" + self.sock

    def args(self):
        a = super().args()
        a[a.index("--bind") + 1] = "0.0.0.0" if self.netns else "127.0.0.1"
        a += ["--unixsocket", self.sock, "--unixsocketperm", "700"]
        if not self.netns:
            return a
        if shutil.which("setpriv"):  # dies with the test, and its namespace with it
            a = ["setpriv", "--pdeathsig", "KILL"] + a
        if self.join is None:
            return ["unshare", "--net"] + a
        return ["nsenter", "--net=/proc/%d/ns/net" % self.join.proc.pid] + a

    def start(self, timeout=10):
        # Server.start pings over TCP from this namespace: the same, by the socket.
        assert self.proc is None
        self.proc = subprocess.Popen(self.args(), cwd=self.dir, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with harness._lock:  # stopped by harness.stop_all, as every Server
            harness._live_servers.add(self)
        c = self.client(socket_timeout=1, socket_connect_timeout=1)
        try:
            wait_for(lambda: self.proc.poll() is None and c.ping(), timeout=timeout)
        except TimeoutError:
            raise RuntimeError("redis-server %r did not start; log tail:\n%s"
                               % (self, self.log_tail(40)))
        finally:
            c.close()
        return self

    def client(self, **kw):
        kw.setdefault("socket_timeout", 60)
        return redis.Redis(unix_socket_path=self.sock, **kw)

    def ns(self, *argv):
        """Runs argv in this server's network namespace."""
        run("nsenter", "--net=/proc/%d/ns/net" % self.proc.pid, *argv)


class Split:
    """M replicated by R1 and R2 (start), then cut off from them (cut), R1
    promoted with R2 as its replica (promote), and M made R1's replica
    (heal)."""

    def __init__(self, mode, m_args=()):
        self.mode = mode
        self.m_args = list(m_args)
        self.servers = []
        self.clients = []

    def _server(self, **kw):
        srv = NsServer(netns=self.mode == "netns", **kw)
        self.servers.append(srv)
        srv.start()
        self.clients.append(srv.client())
        return srv, self.clients[-1]

    def start(self):
        netns = self.mode == "netns"
        self.m, self.mc = self._server(extra_args=self.m_args)
        self.r1, self.r1c = self._server()
        self.r2, self.r2c = self._server(join=self.r1 if netns else None)
        if netns:
            # M's namespace and R1's (R2's too) joined by a veth pair;
            # loopback up on side B, where R2 follows R1 after the failover.
            run("ip", "link", "add", LINK_A, "netns", str(self.m.proc.pid), "type", "veth",
                "peer", "name", LINK_B, "netns", str(self.r1.proc.pid))
            self.m.ns("ip", "addr", "add", ADDR_A + "/30", "dev", LINK_A)
            self.m.ns("ip", "link", "set", LINK_A, "up")
            self.r1.ns("ip", "addr", "add", ADDR_B + "/30", "dev", LINK_B)
            self.r1.ns("ip", "link", "set", LINK_B, "up")
            self.r1.ns("ip", "link", "set", "lo", "up")
            self.m_addr, self.r1_addr_for_m = ADDR_A, ADDR_B
        else:
            self.m_addr = self.r1_addr_for_m = "127.0.0.1"
        for rc in (self.r1c, self.r2c):
            rc.execute_command("REPLICAOF", self.m_addr, self.m.port)
        for rc in (self.r1c, self.r2c):
            wait_replica_synced(self.mc, rc, timeout=DEADLINE_S)
        wait_for(lambda: online_replicas(self.mc) == 2, timeout=DEADLINE_S)
        return self

    def cut(self):
        if self.mode == "netns":
            self.m.ns("ip", "link", "set", LINK_A, "down")
        else:
            for rc in (self.r1c, self.r2c):
                rc.execute_command("CLIENT", "PAUSE", DEADLINE_S * 10_000, "WRITE")

    def promote(self):
        """R1 becomes a master and R2 its replica: a failover on side B."""
        self.r1c.execute_command("REPLICAOF", "NO", "ONE")
        self.r2c.execute_command("REPLICAOF", "127.0.0.1", self.r1.port)
        if self.mode == "pause":
            for rc in (self.r1c, self.r2c):
                rc.execute_command("CLIENT", "UNPAUSE")
        wait_replica_synced(self.r1c, self.r2c, timeout=DEADLINE_S)

    def heal(self):
        if self.mode == "netns":
            self.m.ns("ip", "link", "set", LINK_A, "up")
        self.mc.execute_command("REPLICAOF", self.r1_addr_for_m, self.r1.port)
        wait_replica_synced(self.r1c, self.mc, timeout=DEADLINE_S)

    def check_and_close(self, check):
        try:
            if check:
                for srv in self.servers:
                    assert_no_crash(srv)
        finally:
            for c in self.clients:
                c.close()
            for srv in self.servers:  # the namespaces go with their last process
                srv.cleanup()


def online_replicas(c):
    info = c.info("replication")
    return sum(1 for k, v in info.items()
               if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online")


def split_of(m_args=()):
    say("partition by %s (%s)" % ("network namespaces and a veth pair" if MODE == "netns" else
                                  "CLIENT PAUSE WRITE on the replicas", MODE_WHY))
    sp = Split(MODE, m_args)
    ok = False
    try:
        yield sp.start()
        ok = True
    finally:
        sp.check_and_close(ok)


@pytest.fixture(params=[MODE])
def split():
    yield from split_of()


@pytest.fixture(params=[MODE])
def guarded_split():
    """A split whose M refuses writes unless a replica acknowledged within
    MAX_LAG_S (min-replicas-to-write 1)."""
    yield from split_of(["--min-replicas-to-write", "1", "--min-replicas-max-lag", MAX_LAG_S])


# ----------------------------------------------------------------- helpers

class Ledger:
    """Every grant acknowledged to a client: key -> [(side, owner, token,
    durable)]; and every durable attempt refused as not durable."""

    def __init__(self):
        self.mu = threading.Lock()
        self.grants = {}
        self.not_durable = []

    def take(self, client, side, key, owner, durable, wait_ms=0, replicas=1):
        """One attempt: the grant, or None when refused (held, or not
        durable). durable: acknowledged once `replicas` replicas have it."""
        opts = dict(lease_ms=LEASE_MS, wait_ms=wait_ms)
        if durable:
            opts.update(durable_replicas=replicas, durable_timeout_ms=DURABLE_TIMEOUT_MS)
        try:
            g = client.lock(key, owner=owner, **opts).acquire()
        except NotDurableError as e:
            with self.mu:
                self.not_durable.append((side, key, owner, str(e)))
            return None
        if not g.acquired:
            return None
        with self.mu:
            self.grants.setdefault(key, []).append((side, owner, g.token, durable))
        return g

    def holders(self, key, durable):
        return [(side, owner) for side, owner, _, d in self.grants.get(key, []) if d == durable]

    def token(self, key, side):
        return [t for sd, _, t, _ in self.grants.get(key, []) if sd == side][0]


def take_durably(ledger, client, side, key, owner, replicas=1):
    """A durable attempt where the replicas are reachable, asked again while
    they are too slow to acknowledge in time (a loaded machine: the client
    released the grant each time, and the refusal is not kept): the
    grant, or None when refused because the lock is held."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        g = ledger.take(client, side, key, owner, True, replicas=replicas)
        with ledger.mu:
            refused = [x for x in ledger.not_durable if x[2] == owner]
            ledger.not_durable = [x for x in ledger.not_durable if x[2] != owner]
        if g is not None or not refused:
            return g
        assert time.monotonic() < deadline, refused


def in_background(fn):
    """Starts fn on a thread of its own; the call returned joins it and
    answers what fn answered, or raises what it raised."""
    box = {}

    def body():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - raised again by the join
            box["error"] = e
    th = threading.Thread(target=body)
    th.start()

    def join():
        th.join(DEADLINE_S * 3)
        assert not th.is_alive(), "a call never returned"
        if "error" in box:
            raise box["error"]
        return box["value"]
    return join


def in_parallel(*fns):
    """Runs the calls at once (the binding releases the GIL in the library)."""
    return [join() for join in [in_background(fn) for fn in fns]]


def lockinfo(c, key):
    raw = c.execute_command("FG.LOCKINFO", key)
    return {} if raw is None else dict(zip(s(raw[0::2]), raw[1::2]))


def lock_holders(c, key):
    return sorted(s(h[0]) for h in lockinfo(c, key).get("holders", []))


def lock_waiters(c, key):
    return [s(w[0]) for w in lockinfo(c, key).get("waiters", [])]


def refused_noreplicas(c, *argv):
    try:
        c.execute_command(*argv)
    except redis.ResponseError as e:
        assert str(e).startswith("NOREPLICAS "), e
        return True
    return False


# -------------------------------------------------------------------- tests

def test_durable_grants_are_never_doubled_across_a_partition(split):
    sp = split
    a = floodgate.Client(sp.m.url, command_timeout_ms=DEADLINE_S * 1000)   # side A's clients
    b = floodgate.Client(sp.r1.url, command_timeout_ms=DEADLINE_S * 1000)  # side B's
    ledger = Ledger()
    try:
        # Healthy: a grant acknowledged once both replicas have it, so
        # whichever a failover picks knows it.
        assert take_durably(ledger, a, "A", DURABLE[0], "before-the-cut", replicas=2)
        assert lock_holders(sp.r1c, DURABLE[0]) == lock_holders(sp.r2c, DURABLE[0]) == \
            ["before-the-cut"]

        sp.cut()
        # Side A before any failover: M acknowledges plain grants at once,
        # durable ones never (no replica hears it). M's fence accepts its
        # holders' writes: nothing on M can tell.
        in_parallel(*[lambda k=k: ledger.take(a, "A", k, "A1-" + k, True) for k in DURABLE])
        for k in PLAIN:
            assert ledger.take(a, "A", k, "A-" + k, False), k
            assert sp.mc.execute_command("FG.FSET", "res:" + k, ledger.token(k, "A"), "A") == 1

        sp.promote()
        # Both sides at once: side A asks again, after waiting in the queue
        # (the WAIT follows on the same connection); side B takes every lock.
        in_parallel(
            *[lambda k=k: ledger.take(a, "A", k, "A2-" + k, True, wait_ms=200) for k in DURABLE],
            *[lambda k=k: take_durably(ledger, b, "B", k, "B-" + k) for k in DURABLE],
            *[lambda k=k: ledger.take(b, "B", k, "B-" + k, False) for k in PLAIN])

        # A lock never has two durable holders at once.
        for k in DURABLE:
            assert len(ledger.holders(k, True)) <= 1, (k, ledger.grants[k])
        # Not vacuously: the grant acknowledged before the cut survived the
        # failover (side B was refused it), side B got every other lock,
        # and each of side A's attempts on them was refused as not durable
        # and left nothing held on M.
        assert ledger.holders(DURABLE[0], True) == [("A", "before-the-cut")]
        assert [ledger.holders(k, True) for k in DURABLE[1:]] == \
            [[("B", "B-" + k)] for k in DURABLE[1:]]
        a_refused = [x for x in ledger.not_durable if x[0] == "A"]
        assert len(a_refused) == 2 * (len(DURABLE) - 1), ledger.not_durable
        assert all("only 0 of the 1 replicas" in x[3] for x in a_refused), a_refused
        for k in DURABLE[1:]:
            assert lock_holders(sp.mc, k) == []

        # The contrast: without durable grants every lock has a holder on
        # each side, so the partition was real. R1's fence accepts side B's
        # writes as well: a fence on either split server stops nobody.
        for k in PLAIN:
            assert ledger.holders(k, False) == [("A", "A-" + k), ("B", "B-" + k)], \
                (k, ledger.grants.get(k))
            assert sp.r1c.execute_command("FG.FSET", "res:" + k, ledger.token(k, "B"), "B") == 1
        # In a resource both sides write to, the fence refuses the older
        # token once the newer one was seen (FG.FGET key token, then
        # FG.FSET): one of the two holders is stopped.
        with Server() as resource:
            rc = resource.client()
            for k in PLAIN:
                older, newer = sorted([ledger.token(k, "A"), ledger.token(k, "B")])
                assert s(rc.execute_command("FG.FGET", "r:" + k, older))[0] == 1
                assert s(rc.execute_command("FG.FGET", "r:" + k, newer))[0] == 1
                assert rc.execute_command("FG.FSET", "r:" + k, older, "older") == 0
                assert rc.execute_command("FG.FSET", "r:" + k, newer, "newer") == 1
            rc.close()
        # On the new master, side A's holders hold nothing.
        for k in PLAIN:
            assert sp.r1c.execute_command("FG.EXTEND", k, "A-" + k, LEASE_MS) == 0
            assert sp.r1c.execute_command("FG.UNLOCK", k, "A-" + k) == -1

        # The heal: M becomes R1's replica and what it granted alone
        # vanishes; a client waiting there is sent away.
        waiter = sp.m.client()
        waited = in_background(lambda: waiter.execute_command(
            "FG.LOCK", PLAIN[0], "waiter", LEASE_MS, "WAIT", DEADLINE_S * 3000))
        wait_for(lambda: lock_waiters(sp.mc, PLAIN[0]) == ["waiter"], timeout=DEADLINE_S)
        sp.heal()
        with pytest.raises(redis.ResponseError, match="^UNBLOCKED"):
            waited()
        waiter.close()
        for k in PLAIN:
            assert lock_holders(sp.mc, k) == ["B-" + k]
            assert sp.mc.dump("res:" + k) == sp.r1c.dump("res:" + k)  # side B's write
        assert lock_holders(sp.mc, DURABLE[0]) == ["before-the-cut"]
        assert digest(sp.mc) == digest(sp.r1c)
        with pytest.raises(redis.ReadOnlyError):
            sp.mc.execute_command("FG.LOCK", PLAIN[0], "late", LEASE_MS)
        say("durable: none of side A's %d attempts acknowledged, %d of %d locks to side B; "
            "plain: %d of %d locks granted on both sides"
            % (len(a_refused), len(DURABLE) - 1, len(DURABLE), len(PLAIN), len(PLAIN)))
    finally:
        a.close()
        b.close()


def test_min_replicas_to_write_closes_the_old_master(guarded_split):
    """min-replicas-to-write bounds the old master's window: once its
    replicas' acknowledgements are older than min-replicas-max-lag, every
    lock command is refused there, for the rest of the partition and after
    the heal until it is made a replica."""
    sp = guarded_split
    m = sp.mc
    assert m.execute_command("FG.LOCK", "g:0", "before", LEASE_MS)[0] == 1
    sp.cut()
    cut_at = time.monotonic()
    sp.promote()
    n = iter(range(1, 10**6))
    wait_for(lambda: refused_noreplicas(m, "FG.LOCK", "g:%d" % next(n), "A", LEASE_MS),
             timeout=DEADLINE_S, interval=0.05)
    say("the old master refused grants %.1f s after the cut (min-replicas-max-lag %d)"
        % (time.monotonic() - cut_at, MAX_LAG_S))
    for argv in (("FG.LOCK", "g:x", "A", LEASE_MS), ("FG.UNLOCK", "g:0", "before"),
                 ("FG.EXTEND", "g:0", "before", LEASE_MS),
                 ("FG.ACQUIRE", "g:s", 2, "A", 1, LEASE_MS), ("FG.FSET", "g:f", 1, "v")):
        assert refused_noreplicas(m, *argv), argv
    # Side B is not held back: its master has R2.
    assert sp.r1c.execute_command("FG.LOCK", "g:x", "B", LEASE_MS)[0] == 1
    if sp.mode == "netns":
        sp.m.ns("ip", "link", "set", LINK_A, "up")
        assert refused_noreplicas(m, "FG.LOCK", "g:y", "A", LEASE_MS)  # healed, still alone
    sp.heal()
    with pytest.raises(redis.ReadOnlyError):
        m.execute_command("FG.LOCK", "g:y", "A", LEASE_MS)
    assert lock_holders(m, "g:x") == ["B"]

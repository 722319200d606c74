"""Helpers shared by the persistence, replication and cluster tests: digests,
snapshots of keys, crash detection, AOF files and a 3-master cluster."""

import glob
import os
import subprocess
import time

from harness import Server, wait_for

CRASH_MARKERS = (
    "REDIS BUG REPORT",
    "crashed by signal",
    "ASSERTION FAILED",
    "Guru Meditation",
    "------ STACK TRACE",
    "Error loading data from RDB",
    "Terminating server after rdb file reading failure",
    # a replica that fails to apply what its master sent has diverged
    "sending an error to its master",
)


def read_log(server):
    try:
        with open(server.logfile, "r", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def assert_no_crash(server, since=0):
    """The server answers PING and its log (from byte `since`) has no crash report."""
    assert server.alive(), "redis-server %r died; log tail:\n%s" % (server, server.log_tail(60))
    c = server.client(socket_timeout=10)
    try:
        assert c.ping()
    finally:
        c.close()
    log = read_log(server)[since:]
    hits = [ln[:300] for ln in log.splitlines() if any(m in ln for m in CRASH_MARKERS)]
    assert not hits, "%d crash/divergence lines in the log of %r, first ones:\n%s" % (
        len(hits), server, "\n".join(hits[:6]))


def log_size(server):
    return len(read_log(server))


def s(x):
    return x.decode() if isinstance(x, bytes) else x


def digest(c):
    return s(c.execute_command("DEBUG", "DIGEST"))


def digest_value(c, key):
    return s(c.execute_command("DEBUG", "DIGEST-VALUE", key)[0])


def state(ins):
    """An FG.INSPECT reply without its "pttl" field (which is relative to now):
    the stored state only, comparable across time."""
    if not isinstance(ins, list) or len(ins) % 2:
        return ins
    out = []
    for i in range(0, len(ins), 2):
        if s(ins[i]) == "pttl":
            continue
        out += [ins[i], ins[i + 1]]
    return out


def inspect(c, key):
    return state(c.execute_command("FG.INSPECT", key))


def snapshot(c, keys):
    """{key: (digest-value, FG.INSPECT, PTTL)} plus the dataset digest, and
    the monotonic times before and after the PTTLs were read."""
    start = time.monotonic()
    p = c.pipeline(transaction=False)
    for k in keys:
        p.execute_command("DEBUG", "DIGEST-VALUE", k)
        p.execute_command("FG.INSPECT", k)
        p.pttl(k)
    res = [("error", str(x)) if isinstance(x, Exception) else x
           for x in p.execute(raise_on_error=False)]
    end = time.monotonic()
    out = {}
    for i, k in enumerate(keys):
        dv, ins, pttl = res[3 * i:3 * i + 3]
        out[k] = (s(dv[0]), state(ins), pttl)
    return digest(c), out, (start, end)


def assert_same_snapshot(before, after, what):
    """Same digest, same state per key, and each PTTL shrank by at most the
    time between the start of the first snapshot and the end of the second
    (which holds both PTTL reads), plus the rounding of two PTTLs."""
    d0, k0, (t0, _) = before
    d1, k1, (_, t1) = after
    elapsed_ms = (t1 - t0) * 1000.0 + 2
    problems = []
    for k in k0:
        dv0, in0, p0 = k0[k]
        dv1, in1, p1 = k1[k]
        if dv0 != dv1:
            problems.append("%s: DIGEST-VALUE %s -> %s" % (k, dv0, dv1))
        if in0 != in1:
            problems.append("%s: FG.INSPECT %r -> %r" % (k, in0, in1))
        if p0 < 0 or p1 < 0:
            if p0 != p1:
                problems.append("%s: PTTL %d -> %d" % (k, p0, p1))
        else:
            if p1 > p0 + 2:
                problems.append("%s: PTTL grew %d -> %d" % (k, p0, p1))
            if p1 < p0 - elapsed_ms:
                problems.append("%s: PTTL %d -> %d shrank more than the %.0f ms elapsed" % (k, p0, p1, elapsed_ms))
    if d0 != d1:
        problems.append("DEBUG DIGEST %s -> %s" % (d0, d1))
    assert not problems, "%s changed the dataset:\n  " % what + "\n  ".join(problems[:40])


def info(c, section=None):
    return c.info(section) if section else c.info()


def wait_aof_rewrite_done(c, timeout=30):
    def done():
        i = c.info("persistence")
        return (i["aof_rewrite_in_progress"] == 0 and i["aof_rewrite_scheduled"] == 0
                and i.get("aof_rewrites_consecutive_failures", 0) == 0)
    wait_for(done, timeout=timeout, interval=0.05)
    assert c.info("persistence")["aof_last_bgrewrite_status"] == "ok"


def wait_bgsave_done(c, timeout=30):
    wait_for(lambda: c.info("persistence")["rdb_bgsave_in_progress"] == 0, timeout=timeout, interval=0.05)


def aof_files(server, appenddirname="appendonlydir"):
    """The server's AOF files, once a running server has written what it
    holds in its AOF buffer: with appendfsync everysec the write waits (up
    to 2 s) while a background fsync runs, which a busy disk makes slow."""
    if server.alive():
        c = server.client()
        try:
            wait_for(lambda: c.info("persistence").get("aof_buffer_length", 0) == 0, timeout=10)
        finally:
            c.close()
    d = os.path.join(server.dir, appenddirname)
    return sorted(glob.glob(os.path.join(d, "*")))


def stream_position(c):
    """The replication offset and the AOF's size once the AOF buffer is
    written: under load, appendfsync everysec postpones that write (up to
    2 s) while a background fsync runs, so earlier commands could grow the
    file later."""
    wait_for(lambda: c.info("persistence")["aof_buffer_length"] == 0, timeout=10)
    return c.info("replication")["master_repl_offset"], c.info("persistence")["aof_current_size"]


def read_aof_commands(path):
    """Command names in a RESP-format AOF file (an RDB preamble is skipped)."""
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(b"REDIS"):
        return None  # an RDB base file
    names = []
    pos = 0
    n = len(data)
    while pos < n:
        if data[pos:pos + 1] != b"*":
            raise ValueError("unexpected byte %r at %d in %s" % (data[pos:pos + 1], pos, path))
        eol = data.index(b"\r\n", pos)
        argc = int(data[pos + 1:eol])
        pos = eol + 2
        args = []
        for _ in range(argc):
            assert data[pos:pos + 1] == b"$"
            eol = data.index(b"\r\n", pos)
            ln = int(data[pos + 1:eol])
            pos = eol + 2
            args.append(data[pos:pos + ln])
            pos += ln + 2
        names.append(args)
    return names


# --------------------------------------------------------------------------
# A 3-master cluster


class Cluster:
    """n masters; module=False: stock servers, without floodgate.so (the
    library's server scripts then run there)."""

    def __init__(self, n=3, extra_args=(), module=True):
        self.nodes = [Server(["--cluster-enabled", "yes",
                              "--cluster-config-file", "nodes.conf",
                              "--cluster-node-timeout", "2000"] + list(extra_args),
                             module=module)
                      for _ in range(n)]

    def start(self):
        for node in self.nodes:
            node.start()
        cmd = ["redis-cli", "--cluster", "create"] + \
              ["127.0.0.1:%d" % node.port for node in self.nodes] + \
              ["--cluster-replicas", "0", "--cluster-yes"]
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=60)
        out = p.stdout.decode(errors="replace")
        assert p.returncode == 0, "redis-cli --cluster create failed:\n" + out
        clients = [node.client() for node in self.nodes]

        def ok():
            for c in clients:
                if "cluster_state:ok" not in s(c.execute_command("CLUSTER", "INFO")):
                    return False
            # every node knows the owner of every slot the same way
            views = [self._slot_view(c) for c in clients]
            return all(v == views[0] for v in views) and len(views[0]) == 16384
        wait_for(ok, timeout=30, interval=0.1)
        for c in clients:
            c.close()
        self.slot_owner = self._slot_view(self.nodes[0].client())
        return self

    @staticmethod
    def _slot_view(c):
        owner = {}
        for start, end, master, *rest in c.execute_command("CLUSTER", "SLOTS"):
            port = int(master[1])
            for sl in range(int(start), int(end) + 1):
                owner[sl] = port
        return owner

    def node_by_port(self, port):
        for n in self.nodes:
            if n.port == port:
                return n
        raise KeyError(port)

    def owner_of(self, key):
        c = self.nodes[0].client()
        try:
            slot = int(c.execute_command("CLUSTER", "KEYSLOT", key))
        finally:
            c.close()
        return slot, self.node_by_port(self.slot_owner[slot])

    def stop(self):
        for n in self.nodes:
            n.cleanup()


def replicated_pair(master_args, socket_timeout=30, module=True, client=None):
    """A master started with master_args and its replica, linked: yields
    (master, replica, master client, replica client), and stops both.
    module=False: stock servers; client(server, socket_timeout=...) makes
    the clients (default: the server's own)."""
    master = Server(master_args, module=module)
    master.start()
    replica = Server(["--replicaof", "127.0.0.1", master.port], module=module)
    replica.start()
    make = client or (lambda srv, **kw: srv.client(**kw))
    m, r = make(master, socket_timeout=socket_timeout), make(replica, socket_timeout=socket_timeout)
    wait_for(lambda: r.info("replication")["master_link_status"] == "up", timeout=20)
    yield master, replica, m, r
    m.close()
    r.close()
    replica.cleanup()
    master.cleanup()


def aof_command_names(server):
    """The names of the commands in a server's AOF files (upper case)."""
    names = set()
    for f in aof_files(server):
        if f.endswith(".aof"):
            names |= {a[0].upper() for a in read_aof_commands(f) or []}
    return names

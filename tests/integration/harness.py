"""Shared harness for floodgate integration tests: real redis-server processes
on 127.0.0.1, loading build/floodgate.so.

Public API (kept stable, other test files import it):
    REPO, MODULE, REDIS_SERVER (the binary: $FLOODGATE_REDIS_SERVER, else
                                /usr/bin/redis-server)
    free_port()
    Server(extra_args=(), module=True, dir=None)
        .start() .stop() .kill9() .restart() .client(**kw)
        .port .dir .proc .log_tail(n)
        usable as a context manager
    wait_for(predicate, timeout=10, interval=0.02)
    wait_replica_synced(master_client, replica_client, timeout=30)
    commandstats(server)
    stop_all()
    rdb_version()
"""

import atexit
import errno
import fcntl
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import redis

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def built_script(family):
    """A family's EVALSHA script as the library sends it: the build's
    build/gen/scripts/<family>.lua (scripts/gen-scripts.sh)."""
    with open(os.path.join(REPO, "build", "gen", "scripts", family + ".lua")) as f:
        return f.read()


def fast_path_alone(family):
    """A family's script cut after its fast path: the fast path's reply, or
    nil where the whole script would go on to the exact code. The
    differential tests hold the whole script's answers to the module's,
    which the exact code alone would pass; with this one a test sees that
    the fast path answers the calls it is for."""
    text = built_script(family)
    head, found, _ = text.partition(" if r then return r end\nend\n")
    assert found, "no fast path in build/gen/scripts/%s.lua" % family
    return head + " return r\nend\n"
MODULE = os.path.join(REPO, "build", "floodgate.so")
REDIS_SERVER = os.environ.get("FLOODGATE_REDIS_SERVER", "/usr/bin/redis-server")
# A sanitizer preloaded into this Python (test_python_asan.py) is for the
# library it loads, not for the servers and tools the tests start.
os.environ.pop("LD_PRELOAD", None)

_lock = threading.Lock()
_live_servers = set()
_reserved_ports = set()

# Ports are handed out from PORT_FIRST..PORT_LAST, with the cluster bus port
# (port+10000) in PORT_FIRST+10000..PORT_LAST+10000: both below Linux's
# ephemeral range (ip_local_port_range, 32768-60999 by default), so that no
# client's outgoing connection, nor any program that asks the kernel for a
# port, is given one of them while the server that owns it is down (a server
# restarted on its port), and the two ranges never overlap. Every process of
# the suite (xdist's workers, a pytest that a test starts, another run
# beside this one) reserves its ports in PORT_LOCK_FILE: a POSIX record lock
# on the byte at offset <port>, which the kernel drops when the process
# exits. So a port is handed out once on the whole machine while its holder
# lives, whether anything listens on it yet or not (a "nowhere" address a
# test connects to, a server not started yet or restarting), and the ports
# of a process that died are free again.
PORT_FIRST, PORT_LAST = 10000, 19999
PORT_LOCK_FILE = os.environ.get("FLOODGATE_PORT_LOCK_FILE", "/tmp/floodgate-test-ports.lock")
_port_lock_fd = None
_port_rng = random.Random("%d-%d" % (os.getpid(), time.time_ns()))


def _port_free(port):
    for fam, addr in ((socket.AF_INET, "127.0.0.1"),):
        s = socket.socket(fam, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, port))
        except OSError:
            return False
        finally:
            s.close()
    return True


def _lock_port(port):
    """Takes this process's lock on port without waiting: False if another
    process holds it. Called with _lock held."""
    global _port_lock_fd
    if _port_lock_fd is None or _port_lock_fd[0] != os.getpid():
        # (a forked child holds none of its parent's record locks: its own fd)
        fd = os.open(PORT_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            os.fchmod(fd, 0o666)  # any user's run locks its ports in the same file
        except OSError:
            pass
        # Never closed: closing any fd of the file would drop all the locks.
        _port_lock_fd = (os.getpid(), fd)
    try:
        fcntl.lockf(_port_lock_fd[1], fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EAGAIN):
            return False
        raise
    return True


def free_port():
    """An unused TCP port on 127.0.0.1 such that port+10000 is free as well
    (cluster bus). A port is handed out once while this process lives, and
    to no other process of the suite on this machine while this one lives
    (PORT_LOCK_FILE)."""
    with _lock:
        n = PORT_LAST - PORT_FIRST + 1
        start = _port_rng.randrange(n)
        for i in range(n):
            port = PORT_FIRST + (start + i) % n
            if port in _reserved_ports:
                continue
            if not (_port_free(port) and _port_free(port + 10000)):
                continue  # a listener that is not of the suite
            if not _lock_port(port):
                continue  # another process of the suite has it
            _reserved_ports.add(port)
            _reserved_ports.add(port + 10000)
            return port
    raise RuntimeError("no free port pair left in %d..%d" % (PORT_FIRST, PORT_LAST))


def wait_for(predicate, timeout=10, interval=0.02):
    """Poll predicate() until it returns a truthy value (returned). Exceptions
    raised by the predicate count as falsy. Raises TimeoutError."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            v = predicate()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - retry on any error
            last_exc = e
        if time.monotonic() >= deadline:
            msg = "condition not met within %.1fs" % timeout
            if last_exc is not None:
                msg += " (last error: %r)" % (last_exc,)
            raise TimeoutError(msg)
        time.sleep(interval)


class Server:
    """One redis-server process in the foreground, on its own port and dir."""

    def __init__(self, extra_args=(), module=True, dir=None):
        self.extra_args = [str(a) for a in extra_args]
        self.module = module
        self._own_dir = dir is None
        self.dir = dir if dir is not None else tempfile.mkdtemp(prefix="floodgate-it-")
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()
        self.proc = None
        self.logfile = os.path.join(self.dir, "redis.log")

    # -- lifecycle -----------------------------------------------------------
    def args(self):
        a = [
            REDIS_SERVER,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", self.dir,
            "--save", "",
            "--appendonly", "no",
            "--enable-debug-command", "yes",
            "--enable-module-command", "yes",
            "--logfile", self.logfile,
        ]
        if self.module:
            a += ["--loadmodule", MODULE]
        a += self.extra_args
        return a

    def start(self, timeout=10):
        if self.proc is not None and self.proc.poll() is None:
            return self
        if self.module and not os.path.exists(MODULE):
            raise RuntimeError("module not built: %s (run make)" % MODULE)
        self.proc = subprocess.Popen(
            self.args(),
            cwd=self.dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with _lock:
            _live_servers.add(self)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                rc = self.proc.returncode
                self.proc = None
                raise RuntimeError(
                    "redis-server on port %d exited with %s during start; log tail:\n%s"
                    % (self.port, rc, self.log_tail(40)))
            try:
                c = redis.Redis(host="127.0.0.1", port=self.port,
                                socket_timeout=1, socket_connect_timeout=1)
                try:
                    if c.ping():
                        return self
                finally:
                    c.close()
            except (redis.ConnectionError, redis.TimeoutError):
                pass
            except redis.ResponseError as e:
                # e.g. LOADING: keep waiting
                if "LOADING" not in str(e):
                    raise
            if time.monotonic() >= deadline:
                self._terminate(kill=True)
                raise RuntimeError(
                    "redis-server on port %d did not answer PING within %ss; log tail:\n%s"
                    % (self.port, timeout, self.log_tail(40)))
            time.sleep(0.02)

    def _terminate(self, kill=False, timeout=10):
        p = self.proc
        if p is None:
            return
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGKILL if kill else signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)
        else:
            p.wait()
        self.proc = None
        with _lock:
            _live_servers.discard(self)

    def stop(self):
        """SIGTERM, wait up to 10 s, then SIGKILL."""
        self._terminate(kill=False)

    def kill9(self):
        self._terminate(kill=True)

    def restart(self, timeout=10):
        self.stop()
        return self.start(timeout=timeout)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def cleanup(self):
        """Stop and remove the temp dir if the harness created it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- access --------------------------------------------------------------
    def client(self, **kw):
        # A command that never answers fails its test instead of hanging
        # the whole run.
        kw.setdefault("socket_timeout", 120)
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def log_tail(self, n=20):
        try:
            with open(self.logfile, "r", errors="replace") as f:
                lines = f.readlines()
        except OSError as e:
            return "<no log: %s>" % e
        return "".join(lines[-n:])

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.cleanup()
        return False

    def __repr__(self):
        return "<Server port=%d dir=%s pid=%s>" % (
            self.port, self.dir, self.proc.pid if self.proc else None)


def _info_field(info_text, name):
    for line in info_text.splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return None


def commandstats(server):
    """{command: calls} from INFO commandstats (names as the server gives them)."""
    c = server.client()
    try:
        return {k[len("cmdstat_"):]: v["calls"] for k, v in c.info("commandstats").items()}
    finally:
        c.close()


def wait_replica_synced(master_client, replica_client, timeout=30):
    """Wait until the replica's link is up and its replication offset equals
    the master's master_repl_offset."""
    def synced():
        mi = master_client.execute_command("INFO", "replication")
        ri = replica_client.execute_command("INFO", "replication")
        if isinstance(mi, bytes):
            mi = mi.decode()
        if isinstance(ri, bytes):
            ri = ri.decode()
        if isinstance(mi, dict) or isinstance(ri, dict):
            # parsed by redis-py
            mi_d = mi if isinstance(mi, dict) else {}
            ri_d = ri if isinstance(ri, dict) else {}
            if ri_d.get("master_link_status") != "up":
                return False
            return int(ri_d.get("master_repl_offset", -1)) == int(
                mi_d.get("master_repl_offset", -2))
        if _info_field(ri, "master_link_status") != "up":
            return False
        mo = _info_field(mi, "master_repl_offset")
        ro = _info_field(ri, "master_repl_offset")
        return mo is not None and mo == ro
    wait_for(synced, timeout=timeout, interval=0.02)


def stop_all():
    with _lock:
        servers = list(_live_servers)
    for s in servers:
        try:
            s.stop()
        except Exception:  # noqa: BLE001
            try:
                s.kill9()
            except Exception:  # noqa: BLE001
                pass


atexit.register(stop_all)


# -- helpers shared by the test files (additions only; the API above is stable)

def s(v):
    """bytes -> str, recursively for lists; other values unchanged."""
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (list, tuple)):
        return [s(x) for x in v]
    return v


def digest(c):
    """DEBUG DIGEST of the whole dataset, as str."""
    return s(c.execute_command("DEBUG", "DIGEST"))


def digest_value(c, *keys):
    return s(c.execute_command("DEBUG", "DIGEST-VALUE", *keys))


def inspect(c, key):
    """FG.INSPECT as a dict {field: value} (values decoded to str or lists),
    None when the key is absent."""
    raw = c.execute_command("FG.INSPECT", key)
    if raw is None:
        return None
    raw = s(raw)
    if isinstance(raw, dict):
        return raw
    assert isinstance(raw, list) and len(raw) % 2 == 0, raw
    return dict(zip(raw[0::2], raw[1::2]))


def state(c, key):
    """FG.INSPECT without the fields that change with the clock alone (pttl):
    what must stay equal when nothing is written. None when absent."""
    st = inspect(c, key)
    if st is None:
        return None
    return {k: v for k, v in st.items() if k not in ("pttl", "ttl")}


def slidelog_stamps(st):
    """The admission timestamps (us) of a sliding log from FG.INSPECT, one per
    unit, oldest first. Accepts a plain list of timestamps or runs of
    (ts_us, count)."""
    out = []
    for k, v in st.items():
        if not isinstance(v, list):
            continue
        vals = [int(x) for x in v]
        if all(x > 10 ** 15 for x in vals):
            out.extend(vals)
        else:
            assert len(vals) % 2 == 0, st
            for ts, n in zip(vals[0::2], vals[1::2]):
                out.extend([ts] * n)
    return out


class RespError(Exception):
    """An error reply, with the server's full message (redis-py strips the
    leading "ERR ")."""


class RespMap(dict):
    """A RESP3 map (`%`), in the server's order: a dict, told apart from
    an array (a list)."""


class RawClient:
    """A minimal RESP client that keeps error replies verbatim.
    execute(*args) returns the reply (bytes, int, list, None) or raises
    RespError(full message). With protocol=3 it sends HELLO 3 first and
    also reads RESP3's maps (RespMap), sets, booleans, doubles and nulls
    (redis-py 4.3 speaks only RESP2)."""

    def __init__(self, port, host="127.0.0.1", timeout=10, protocol=2):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        if protocol == 3:
            self.execute("HELLO", "3")

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    @staticmethod
    def encode(args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, bytes):
                b = a
            elif isinstance(a, str):
                b = a.encode()
            elif isinstance(a, float):
                b = repr(a).encode()
            else:
                b = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        return b"".join(out)

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("connection closed by server")
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def read_reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest
        if t == b"-":
            return RespError(rest.decode("utf-8", "replace"))
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if t in (b"*", b"~"):
            n = int(rest)
            if n < 0:
                return None
            return [self.read_reply() for _ in range(n)]
        if t == b"%":
            return RespMap((self.read_reply(), self.read_reply()) for _ in range(int(rest)))
        if t == b"_":
            return None
        if t == b"#":
            return rest == b"t"
        if t == b",":
            return float(rest)
        raise ValueError("bad RESP line %r" % line)

    def execute(self, *args):
        self.sock.sendall(self.encode(args))
        rep = self.read_reply()
        if isinstance(rep, RespError):
            raise rep
        return rep

    def error_of(self, *args):
        """The full error message of a command expected to fail; raises
        AssertionError with the reply when it does not fail."""
        try:
            rep = self.execute(*args)
        except RespError as e:
            return str(e)
        raise AssertionError("expected an error from %r, got %r" % (args, rep))


# A whole second (2023-11-14) in microseconds: a time for `AT` in tests.
T0 = 1_700_000_000_000_000


def call(c, *args):
    """A command's integer reply, or its array of integers."""
    reply = c.execute_command(*args)
    return [int(x) for x in reply] if isinstance(reply, list) else int(reply)


_rdb_versions = {}


def rdb_version():
    """The RDB version REDIS_SERVER writes (10 for Redis 7.0, 11 for 7.2 and
    Valkey 8, 12 for 7.4 and 8.x): the 2 bytes before the CRC64 of a DUMP
    payload, read once from a scratch server without the module, so that
    tests never write into a dataset of theirs to learn it."""
    if REDIS_SERVER not in _rdb_versions:
        with Server(module=False) as srv:
            c = srv.client()
            c.set("probe", "x")
            payload = c.dump("probe")
            c.close()
        _rdb_versions[REDIS_SERVER] = int.from_bytes(payload[-10:-8], "little")
    return _rdb_versions[REDIS_SERVER]


def rdb_file_magic():
    """The 9 bytes an RDB file of REDIS_SERVER's starts with."""
    return b"REDIS%04d" % rdb_version()


def server_version(c):
    """("redis", (major, minor)) or ("valkey", (major, minor)) of the server
    behind client c (redis-py or RawClient). Valkey reports redis_version
    7.2.4 too, for clients; its own version says which module APIs it has."""
    info = c.execute_command("INFO", "server") if hasattr(c, "execute_command") \
        else c.execute("INFO", "server")
    text = info if isinstance(info, str) else s(info) if isinstance(info, bytes) else \
        "\n".join("%s:%s" % kv for kv in info.items())
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    name = "valkey" if "valkey_version" in fields else "redis"
    major, minor = fields[name + "_version"].strip().split(".")[:2]
    return name, (int(major), int(minor))


def has_module_acl_categories(c):
    """RedisModule_AddACLCategory: Redis 7.4+, Valkey 8+."""
    name, v = server_version(c)
    return v >= ((8, 0) if name == "valkey" else (7, 4))


def expiry_command(c):
    """What the server writes to its AOF and replicas for a key that expired:
    UNLINK where lazyfree-lazy-expire is on (Valkey 8's default), else DEL."""
    lazy = c.config_get("lazyfree-lazy-expire").get("lazyfree-lazy-expire")
    return b"UNLINK" if s(lazy) == "yes" else b"DEL"

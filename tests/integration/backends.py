"""The servers behind the library's rate-limit and policy tests (issue 26):
the module, a stock redis-server and a stock 3-master cluster, without
floodgate.so, where libfloodgate runs its server scripts (docs/scripts.md).

A test file parametrizes its server fixture over BACKENDS (or a part of
it) and asks target(kind, module=...) for a flushed Target: the URL the
library opens and the servers behind it, for the few assertions that look
at the keyspace with redis-py. The module's server stays the file's own
(the session server, or one per test); the stock ones are shared by every
test of a process (an xdist worker has its own), started on first use and
stopped at its exit, and flushed before each test: FLUSHALL, which on a
stock server deletes the policies too (they are keys there), and the
library's scripts loaded again, so that no test's round trips depend on
whether an earlier one left them in the script cache (the NOSCRIPT path
has its own tests in test_script_backend.py).

A test that moves a slot of the shared cluster moves it back; should it
fail before, or stop a node, the next test finds the slot map or the node
changed and gets a new cluster.

What the stock backends do not have (docs/scripts.md, "What differs from
the module") stays with the module: counters (FG.POLICY GET's allowed,
denied...), Bloom lists, a policy check's FIFO WAIT, effect commands,
keyspace events and INFO floodgate. A test's own FG.* lock commands and
BF.* commands reach a stock server as lock.lua's and bloom.lua's EVALSHA
through script_client().
"""

import atexit
import glob
import hashlib
import os
import threading

import redis
import redis.cluster

from harness import REPO, Server
from topology import Cluster

# The library's tests run on these.
BACKENDS = ("module", "stock", "stock-cluster")
STOCK = ("stock", "stock-cluster")

SCRIPTS = os.path.join(REPO, "build", "gen", "scripts")

_lock = threading.Lock()
_shared = {}


def _scripts():
    out = []
    for path in sorted(glob.glob(os.path.join(SCRIPTS, "*.lua"))):
        with open(path) as f:
            out.append(f.read())
    return out


def _fresh(node):
    """A flushed stock node holding the library's scripts."""
    if not node.alive():  # a test stopped it
        node.start()
    c = node.client()
    try:
        c.flushall()
        for text in _scripts():
            c.script_load(text)
    finally:
        c.close()


def _cleanup():
    for thing in list(_shared.values()):
        try:
            if isinstance(thing, Cluster):
                thing.stop()
            else:
                thing.cleanup()
        except Exception:  # noqa: BLE001 - at exit, best effort
            pass
    _shared.clear()


atexit.register(_cleanup)


def stock_server():
    """This process's stock redis-server, started on first use."""
    with _lock:
        s = _shared.get("stock")
        if s is None:
            s = _shared["stock"] = Server(module=False)
        if not s.alive():
            s.start()
        return s


def _intact(cl):
    """Every node up, and the slot map the one the cluster started with."""
    if not all(n.alive() for n in cl.nodes):
        return False
    c = cl.nodes[0].client(socket_timeout=10)
    try:
        return Cluster._slot_view(c) == cl.slot_owner
    except redis.RedisError:
        return False
    finally:
        c.close()


def stock_cluster():
    """This process's stock 3-master cluster, started on first use, and
    again if a test left its slot map changed or a node down."""
    with _lock:
        cl = _shared.get("stock-cluster")
        if cl is not None and not _intact(cl):
            del _shared["stock-cluster"]
            cl.stop()
            cl = None
        if cl is None:
            cl = Cluster(3, module=False)
            try:
                cl.start()
            except Exception:
                cl.stop()
                raise
            _shared["stock-cluster"] = cl
        return cl


def cluster_url(cluster, nodes=None):
    return "redis+cluster://" + ",".join("127.0.0.1:%d" % n.port
                                         for n in (nodes or cluster.nodes))


class Target:
    """The servers a test's library clients open: kind is one of BACKENDS
    (or "module-cluster"), url the library's URL (no query), nodes the
    harness Servers (one unless a cluster)."""

    def __init__(self, kind, nodes, cluster=None):
        self.kind = kind
        self.nodes = list(nodes)
        self.cluster = cluster  # the topology.Cluster, if one
        if cluster is not None:
            self.url = cluster_url(cluster)
        else:
            self.url = "redis://127.0.0.1:%d" % self.nodes[0].port

    @property
    def module(self):
        """The module is loaded: FG.* answer to redis-py, counters count."""
        return not self.kind.startswith("stock")

    @property
    def is_cluster(self):
        return self.cluster is not None

    @property
    def server(self):
        assert not self.is_cluster, "a cluster has no one server"
        return self.nodes[0]

    @property
    def port(self):
        return self.server.port

    def client(self, **kw):
        """redis-py on the target: a cluster's client routes by slot."""
        if self.is_cluster:
            n = self.nodes[0]
            return redis.cluster.RedisCluster(host="127.0.0.1", port=n.port, **kw)
        return self.server.client(**kw)

    def owner(self, key):
        """The node holding key (one server: itself)."""
        if not self.is_cluster:
            return self.server
        return self.cluster.owner_of(key)[1]

    def __repr__(self):
        return "<Target %s %s>" % (self.kind, self.url)


def target(kind, module=None, module_cluster=None):
    """A flushed Target of kind. module: the file's module Server (flushed
    by the caller, as the file always did); module_cluster: its
    topology.Cluster with the module, for "module-cluster"."""
    if kind == "module":
        assert module is not None, "the module's server is the file's"
        if not module.alive():
            module.start()
        return Target(kind, [module])
    if kind == "module-cluster":
        return Target(kind, module_cluster.nodes, module_cluster)
    if kind == "stock":
        s = stock_server()
        _fresh(s)
        return Target(kind, [s])
    if kind == "stock-cluster":
        cl = stock_cluster()
        for n in cl.nodes:
            _fresh(n)
        return Target(kind, cl.nodes, cl)
    raise ValueError(kind)


def module_or_stock(kind, server):
    """The session's module `server`, flushed, for "module"; the shared
    stock server otherwise (the lock tests' servers)."""
    if kind == "stock":
        return target("stock")
    if not server.alive():
        server.start()
    c = server.client()
    c.flushall()
    c.close()
    return target("module", module=server)


def of_param(request, flush_session=False):
    """The Target of a test parametrized over BACKENDS: for "module" the
    file's `server` fixture (the session's, flushed through `r`, when
    flush_session), else the shared stock server or cluster."""
    if request.param == "module":
        if flush_session:
            request.getfixturevalue("r")
        return target("module", module=request.getfixturevalue("server"))
    return target(request.param)


# ------------------------------------------------ a test's own lock commands

LOCK_COMMANDS = {"FG.LOCK", "FG.UNLOCK", "FG.ACQUIRE", "FG.RELEASE", "FG.EXTEND",
                 "FG.FORCEUNLOCK", "FG.LOCKINFO", "FG.FENCE", "FG.FSET", "FG.FGET",
                 "FG.MLOCK", "FG.MUNLOCK", "FG.UNWAIT"}
COUNTED_KEYS = {"FG.MLOCK", "FG.MUNLOCK", "FG.UNWAIT"}  # numkeys key [key ...]
BLOOM_COMMANDS = {"BF.RESERVE", "BF.ADD", "BF.MADD", "BF.INSERT", "BF.EXISTS", "BF.MEXISTS",
                  "BF.INFO", "BF.CARD"}


def script_sha(family):
    with open(os.path.join(SCRIPTS, family + ".lua"), "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()


def lock_script_sha():
    return script_sha("lock")


def family_of(args):
    """The family whose script runs a test's own command: lock, bloom, or
    None (sent as it is)."""
    name = str(args[0]).upper() if args else ""
    return "lock" if name in LOCK_COMMANDS else "bloom" if name in BLOOM_COMMANDS else None


def lock_script_form(args):
    """A lock or Bloom command as the library sends it to a server without
    the module (scripts.c): EVALSHA <its script> <keys> <the rest in
    order>."""
    name = str(args[0]).upper()
    if name in COUNTED_KEYS:
        n = int(args[1]) if str(args[1]).isdigit() else 0
        keys, rest = list(args[2:2 + n]), [args[0], args[1], *args[2 + n:]]
    else:
        keys, rest = list(args[1:2]), [args[0], *args[2:]]
    return ["EVALSHA", script_sha(family_of(args)), len(keys), *keys, *rest]


class ScriptRedis(redis.Redis):
    """redis-py whose FG.* lock commands and BF.* commands run as lock.lua
    and bloom.lua (the scripts must be loaded: a Target's stock nodes have
    them)."""

    def execute_command(self, *args, **options):
        family = family_of(args)
        if family is None:
            return super().execute_command(*args, **options)
        form = lock_script_form(args)
        try:
            return super().execute_command(*form, **options)
        except redis.exceptions.NoScriptError:  # a restarted server: as the library does
            with open(os.path.join(SCRIPTS, family + ".lua")) as f:
                return super().execute_command("EVAL", f.read(), *form[2:], **options)


def script_client(node, **kw):
    """A client of a harness Server whose lock and Bloom commands run as
    scripts when it has no module (its own commands otherwise)."""
    if node.module:
        return node.client(**kw)
    c = ScriptRedis(host="127.0.0.1", port=node.port, **kw)
    for text in _scripts():
        c.script_load(text)
    return c

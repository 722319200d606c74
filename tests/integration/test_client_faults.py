"""Lost replies on a cluster never count a decision twice.

A fake cluster of two nodes on loopback: node A owns every slot by its map and
redirects every FG.* command to node B (ASK or MOVED); node B counts the FG.*
commands it receives and drops the connection without replying, as a node
that took the decision and then failed. The library must not send the
command again (B may have counted it), and must answer FG_CODE_IO so that the
failure policy applies.

Regression: a command lost after a redirect was sent again through A, which
redirected it to B a second time: the decision was counted twice, and the
caller got FG_CODE_SERVER "ASK ..." instead of an I/O error.
"""
import socket
import subprocess
import threading

import pytest

from harness import free_port
from test_client import program


class FakeCluster:
    def __init__(self, mode):
        self.mode = mode
        self.port_a, self.port_b = free_port(), free_port()
        self.executed_on_b = 0
        self.lock = threading.Lock()
        self.sockets = []
        for port, role in ((self.port_a, "A"), (self.port_b, "B")):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen(16)
            self.sockets.append(s)
            threading.Thread(target=self.accept, args=(s, role), daemon=True).start()

    def accept(self, listener, role):
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn, role), daemon=True).start()

    @staticmethod
    def read_command(f):
        line = f.readline()
        if not line:
            return None
        args = []
        for _ in range(int(line[1:])):
            length = int(f.readline()[1:])
            args.append(f.read(length + 2)[:-2].decode())
        return args

    def serve(self, conn, role):
        f = conn.makefile("rb")
        try:
            while True:
                cmd = self.read_command(f)
                if cmd is None:
                    break
                name = cmd[0].upper()
                if name == "CLUSTER":  # every slot is A's
                    conn.sendall(b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n"
                                 % self.port_a)
                elif name == "ASKING":
                    conn.sendall(b"+OK\r\n")
                elif role == "A":
                    word = b"ASK" if self.mode == "ask" else b"MOVED"
                    conn.sendall(b"-%s 7629 127.0.0.1:%d\r\n" % (word, self.port_b))
                else:
                    with self.lock:
                        self.executed_on_b += 1
                    break  # the decision is taken, the reply is lost
        except OSError:
            pass
        conn.close()

    def close(self):
        for s in self.sockets:
            s.close()


def run_driver(url, *opts, line="check k token 10 1"):
    proc = subprocess.run([program("driver"), url, *opts], input=line + "\n",
                          capture_output=True, text=True, timeout=30)
    return proc.stdout.strip().splitlines()[-1]  # after the "open ok" line


@pytest.mark.parametrize("mode", ["ask", "moved"])
def test_a_lost_redirected_command_is_not_sent_again(mode):
    cluster = FakeCluster(mode)
    try:
        out = run_driver("redis+cluster://127.0.0.1:%d" % cluster.port_a, "timeout_ms=500")
        assert out.startswith("err io"), out
        assert cluster.executed_on_b == 1
    finally:
        cluster.close()


def test_the_failure_policy_answers_a_lost_command():
    cluster = FakeCluster("ask")
    try:
        out = run_driver("redis+cluster://127.0.0.1:%d" % cluster.port_a, "policy=open",
                         "timeout_ms=500")
        assert out.startswith("ok 1") and "open" in out, out
        assert cluster.executed_on_b == 1
    finally:
        cluster.close()


class FakeServer:
    """A server that answers every FG.* with a reply of the right shape but
    absurd durations: not something the module can send."""

    def __init__(self):
        self.port = free_port()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", self.port))
        self.sock.listen(4)
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            f = conn.makefile("rb")
            while FakeCluster.read_command(f) is not None:
                conn.sendall(b"*5\r\n:0\r\n:10\r\n:0\r\n:9223372036854775807\r\n"
                             b":9223372036854775807\r\n")
            conn.close()

    def close(self):
        self.sock.close()


def test_absurd_durations_are_a_protocol_error():
    """Regression: a reply's retry time times 1000 overflowed (UB) when the
    denial cache stored it."""
    server = FakeServer()
    try:
        out = run_driver("redis://127.0.0.1:%d" % server.port, "cache")
        assert out.startswith("err protocol"), out
    finally:
        server.close()

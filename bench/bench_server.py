"""The redis-server a benchmark script starts for itself: on 127.0.0.1 and a
free port, `--save "" --appendonly no`, its files in a temporary directory,
one module loaded (or none: module None, a stock server), every thread
pinned to one CPU (so that the client can have the other), and stopped by
its PID. Used by uv_server.py, lock_scale.py, python_bench.py,
nginx_bench.py and scripts_bench.py; process_cpu_seconds by those that
time other processes too."""

import os
import shutil
import socket
import subprocess
import tempfile
import time

import redis


def process_cpu_seconds(pid):
    """A process's user + system CPU time, all threads (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BenchServer:
    def __init__(self, redis_server, module, cpu, prefix, extra_args=()):
        """Starts the server; RuntimeError when it does not come up."""
        self.dir = tempfile.mkdtemp(prefix=prefix)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.proc = subprocess.Popen(
            [redis_server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--logfile", os.path.join(self.dir, "redis.log")]
            + (["--loadmodule", module] if module else []) + [str(a) for a in extra_args])
        self.client = redis.Redis(host="127.0.0.1", port=self.port)
        for _ in range(100):
            if self.proc.poll() is not None:
                raise RuntimeError("redis-server exited at start: " + self.log_tail())
            try:
                if self.client.ping():
                    break
            except redis.ConnectionError:
                time.sleep(0.1)
        else:
            self.stop()
            raise RuntimeError("redis-server does not answer on port %d" % self.port)
        subprocess.run(["taskset", "-a", "-cp", str(cpu), str(self.proc.pid)], check=True,
                       stdout=subprocess.DEVNULL)

    def cpu_seconds(self):
        """The process's user + system CPU time, all threads (/proc/PID/stat)."""
        return process_cpu_seconds(self.proc.pid)

    def log_tail(self):
        try:
            with open(os.path.join(self.dir, "redis.log")) as f:
                return "".join(f.readlines()[-20:])
        except OSError:
            return "(no log)"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

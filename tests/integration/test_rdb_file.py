"""A corrupted RDB file never crashes the server.

Each case is a minimal RDB file holding one floodgate key, built from a real
DUMP payload, whose module value is then truncated or damaged. Starting a
server on it must end in one of two ways: the server refuses the file, or it
starts and the key it loaded answers every floodgate command without crashing.

Refusing is exiting after Redis's "Internal error in RDB", or Redis's own deliberate panic on a file
whose structure it cannot trust (its "Guru Meditation" in rdb.c, for example a
duplicate key read from bytes that followed a truncated value). A crash is any
other signal, or any stack trace that runs through floodgate.so.

FLOODGATE_FUZZ_SCALE multiplies the number of random cases (make fuzz-server).
"""
import os
import random
import subprocess
import time

import pytest
import redis

from harness import MODULE, REDIS_SERVER, Server, free_port, rdb_file_magic

SCALE = int(os.environ.get("FLOODGATE_FUZZ_SCALE", "1"))

SEEDS = {
    "bucket": [("FG.TOKEN", "k", 100, 1, "COST", 7)],
    "fixed": [("FG.FIXED", "k", 100, 600000, "COST", 3)],
    "sliding": [("FG.SLIDING", "k", 100, 600000, "COST", 3)],
    "slidelog": [("FG.SLIDELOG", "k", 100, 600000, "COST", 2),
                 ("FG.SLIDELOG", "k", 100, 600000, "COST", 1)],
}

CHECKS = {
    "bucket": ("FG.TOKEN", "k", 100, 1),
    "fixed": ("FG.FIXED", "k", 100, 600000),
    "sliding": ("FG.SLIDING", "k", 100, 600000),
    "slidelog": ("FG.SLIDELOG", "k", 100, 600000),
}


@pytest.fixture(scope="module")
def values():
    """family -> (the RDB type byte + module value) taken from DUMP."""
    out = {}
    with Server() as s:
        r = s.client()
        for family, calls in SEEDS.items():
            r.flushall()
            for call in calls:
                r.execute_command(*call)
                time.sleep(0.002)
            payload = r.dump("k")
            out[family] = payload[:-10]  # drop the RDB version and CRC64
    return out


def rdb_file(value):
    """An RDB file with one key `k` in db 0, of the server's RDB version;
    checksum 0 means "not checked"."""
    return rdb_file_magic() + b"\xfe\x00" + value[:1] + b"\x01k" + value[1:] + b"\xff" + b"\0" * 8


def start_on(path_dir):
    port = free_port()
    # crash-memcheck-enabled no: after its crash report, a panicking server
    # runs a "fast memory test" over its anonymous mappings before it
    # aborts, and that test itself dies by SIGSEGV now and then (about one
    # panic in 400 here, more often on a loaded machine, as when the suite
    # runs on several workers), which reads as a crash (signal 11) where
    # Redis's own deliberate panic (SIGABRT) is expected. The memory test
    # says nothing about floodgate; the crash report before it stays.
    proc = subprocess.Popen(
        [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1",
         "--dir", path_dir, "--dbfilename", "dump.rdb", "--save", "", "--appendonly", "no",
         "--crash-memcheck-enabled", "no",
         "--loadmodule", MODULE, "--logfile", os.path.join(path_dir, "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
    deadline = time.time() + 10
    while time.time() < deadline:
        if proc.poll() is not None:
            return proc, None
        try:
            client.ping()
            return proc, client
        except redis.ConnectionError:
            time.sleep(0.01)
    proc.kill()
    raise AssertionError("server neither started nor exited")


def load_and_check(tmp_path, family, value):
    (tmp_path / "dump.rdb").write_bytes(rdb_file(value))
    (tmp_path / "redis.log").unlink(missing_ok=True)
    proc, client = start_on(str(tmp_path))
    try:
        if client is None:
            log = (tmp_path / "redis.log").read_text(errors="replace")
            assert "floodgate.so" not in log.split("STACK TRACE", 1)[-1] or \
                "STACK TRACE" not in log, log[-3000:]
            if proc.returncode in (0, 1):
                assert "Internal error in RDB" in log or "rdb file reading failure" in log, \
                    log[-3000:]
            else:
                assert proc.returncode == -6 and "Guru Meditation" in log and "rdb.c" in log, \
                    "server died by signal %d; its crash report:\n%s" % (
                        -proc.returncode, log[log.find("BUG REPORT START"):][:4000])
            return "refused"
        for command in (CHECKS[family], ("FG.INSPECT", "k"), ("FG.RESET", "k")):
            try:
                client.execute_command(*command)
            except redis.ResponseError:
                pass
        assert client.ping()
        return "loaded"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("family", list(SEEDS))
def test_intact_file_loads(tmp_path, values, family):
    assert load_and_check(tmp_path, family, values[family]) == "loaded"


@pytest.mark.parametrize("family", list(SEEDS))
def test_every_truncation_is_refused(tmp_path, values, family):
    value = values[family]
    for cut in range(1, len(value)):
        assert load_and_check(tmp_path, family, value[:cut]) == "refused", cut


@pytest.mark.parametrize("family", list(SEEDS))
def test_damaged_values_never_crash(tmp_path, values, family):
    rng = random.Random(family)
    value = bytearray(values[family])
    for _ in range(25 * SCALE):
        damaged = bytearray(value)
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(1, len(damaged))
            damaged[pos] = rng.choice([0x00, 0xff, 0x80, 0x7f, rng.randrange(256)])
        load_and_check(tmp_path, family, bytes(damaged))

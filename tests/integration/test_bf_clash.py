"""floodgate next to RedisBloom, which has the same BF.* command names
(bundled with Redis 8): floodgate loads in either order, leaves BF.* to
RedisBloom when RedisBloom has them (floodgate.bf-commands auto or yes), or
lets RedisBloom load after it (no); its other commands and its policies'
Bloom lists work throughout (docs/bloom.md "Next to RedisBloom").

These tests load a RedisBloom module built outside the repository, named by
FLOODGATE_REDISBLOOM (the path of its .so); without it they are skipped.
test_command_families.py makes clashes without RedisBloom."""

import os

import pytest
import redis

from harness import MODULE, Server, s
from test_command_families import (FAMILIES, assert_bloom_lists_work, family_fields,
                                   level_of, log_lines, works)
from topology import assert_no_crash

REDISBLOOM = os.environ.get("FLOODGATE_REDISBLOOM", "")

pytestmark = pytest.mark.skipif(
    not os.path.isfile(REDISBLOOM),
    reason="FLOODGATE_REDISBLOOM does not name a RedisBloom module (.so): set it to run "
           "floodgate next to the real RedisBloom")

FLOODGATE_FILTER = "fg-bloomf"
REDISBLOOM_FILTER = "MBbloom--"   # RedisBloom's Bloom filter type


def loaded(c):
    return sorted(s(dict(zip(*[iter(m)] * 2))[b"name"]) for m in c.execute_command("MODULE", "LIST"))


def module_load(c, path, *config):
    args = ["MODULE", "LOADEX", path] + (["CONFIG", *config] if config else [])
    assert c.execute_command(*args) in (b"OK", True)


def assert_redisbloom_answers_bf(c):
    assert int(c.execute_command("BF.ADD", "rb", "x")) == 1
    assert int(c.execute_command("BF.EXISTS", "rb", "x")) == 1
    assert s(c.execute_command("TYPE", "rb")) == REDISBLOOM_FILTER


def assert_floodgate_without_bf(c, reason):
    fields = family_fields(c)
    expected = {"status": "left_out", "reason": reason}
    if reason == "name_taken":
        expected["command"] = "bf.reserve"
    assert fields["bloom"] == expected
    for family in FAMILIES:
        if family != "bloom":
            assert fields[family] == {"status": "registered"}, family
            assert works(c, family), family
    assert_redisbloom_answers_bf(c)
    assert_bloom_lists_work(c)


# --------------------------------------------------------------------------
# at startup (loadmodule)

@pytest.mark.parametrize("mode,level", [("auto", "*"), ("yes", "#")])
def test_redisbloom_first_then_floodgate(mode, level):
    args = ["--loadmodule", REDISBLOOM, "--loadmodule", MODULE]
    if mode != "auto":
        args += ["--floodgate.bf-commands", mode]
    with Server(args, module=False) as srv:
        c = srv.client()
        assert loaded(c) == ["bf", "floodgate"]
        assert_floodgate_without_bf(c, "name_taken")
        lines = log_lines(srv, "the bloom commands are left out: bf.reserve is already a command")
        assert len(lines) == 1 and level_of(lines[0]) == level
        assert_no_crash(srv)


def test_floodgate_first_with_bf_commands_no_then_redisbloom():
    args = ["--loadmodule", MODULE, "--floodgate.bf-commands", "no",
            "--loadmodule", REDISBLOOM]
    with Server(args, module=False) as srv:
        c = srv.client()
        assert loaded(c) == ["bf", "floodgate"]
        assert_floodgate_without_bf(c, "configured")
        assert_no_crash(srv)


def test_filters_of_both_modules_load_from_one_file():
    """A file holding floodgate's filters loads next to RedisBloom (the data
    type registers without the commands) and comes back whole to a server
    with floodgate's BF.*. RedisBloom's BF.ADD refuses floodgate's filters
    (a WRONGTYPE error)."""
    with Server() as alone:
        c = alone.client()
        c.execute_command("BF.ADD", "fg", "x")
        c.execute_command("SAVE")
        alone.stop()
        both = Server(["--loadmodule", REDISBLOOM, "--loadmodule", MODULE], module=False,
                      dir=alone.dir)
        with both:
            b = both.client()
            assert s(b.execute_command("TYPE", "fg")) == FLOODGATE_FILTER
            with pytest.raises(redis.ResponseError, match="wrong kind of value"):
                b.execute_command("BF.ADD", "fg", "y")
            b.execute_command("BF.ADD", "rb", "y")
            b.execute_command("DEBUG", "RELOAD")
            assert s(b.execute_command("TYPE", "fg")) == FLOODGATE_FILTER
            assert s(b.execute_command("TYPE", "rb")) == REDISBLOOM_FILTER
            b.execute_command("DEL", "rb")   # floodgate alone cannot load it
            b.execute_command("SAVE")
        alone.start()
        assert int(alone.client().execute_command("BF.EXISTS", "fg", "x")) == 1


# --------------------------------------------------------------------------
# at runtime (MODULE LOAD)

def test_module_load_floodgate_next_to_redisbloom():
    with Server(["--loadmodule", REDISBLOOM], module=False) as srv:
        c = srv.client()
        module_load(c, MODULE)
        assert loaded(c) == ["bf", "floodgate"]
        assert_floodgate_without_bf(c, "name_taken")
        assert_no_crash(srv)


def test_module_load_redisbloom_next_to_floodgate_with_bf_commands_no():
    with Server(module=False) as srv:
        c = srv.client()
        module_load(c, MODULE, "floodgate.bf-commands", "no")
        module_load(c, REDISBLOOM)
        assert loaded(c) == ["bf", "floodgate"]
        assert_floodgate_without_bf(c, "configured")
        assert_no_crash(srv)


def test_redisbloom_cannot_load_after_floodgate_with_its_bf_commands():
    # Why floodgate.bf-commands no exists: the names are floodgate's, so
    # RedisBloom's load fails, and floodgate goes on answering BF.*.
    with Server() as srv:
        c = srv.client()
        with pytest.raises(redis.ResponseError):
            module_load(c, REDISBLOOM)
        assert loaded(c) == ["floodgate"]
        assert family_fields(c)["bloom"] == {"status": "registered"}
        assert works(c, "bloom")
        assert_no_crash(srv)

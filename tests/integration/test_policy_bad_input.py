"""Every policy command refuses bad input with an error that changes nothing
(docs/policies.md, "Errors"): FG.POLICY SET/DEL/GET/LIST/ALLOW/DENY/UNLIST,
FG.CHECK, FG.PLSTATE, and RESTORE of fg-plstat values.

"Nothing" is checked three ways after each refusal: DEBUG DIGEST (the
keys), every policy as FG.POLICY GET shows it, counters included (the
registry, which the digest does not see), and the server still answering.
The numbers of a LIMIT rule must be refused with the very message the
command of the same algorithm gives for them (FG.TOKEN, FG.GCRA, ...).

Payloads nobody wrote -- corrupted FG.PLSTATE payloads and RESTORE values
of fg-plstat with their checksum recomputed -- are refused, or accepted only
when they are states this code could have written (FG.PLSTATE's payload
comes back from DUMP byte for byte), and never crash the server.
"""

import pytest
import redis

import rdbpayload
from harness import T0, RawClient, Server, s
from topology import assert_no_crash, digest

NOT_INTEGERS = ["abc", "", "1x", " 1", "1 ", "inf", "-inf", "nan", "0x10", "1e400", "1.5", "--1"]
OVERFLOWS = ["9223372036854775808", "-9223372036854775809", "99999999999999999999999"]
NOT_NUMBERS = ["abc", "", "1x", " 1", "inf", "-inf", "+inf", "nan", "NaN", "0x10", "1e400",
               "1,5", "--1", "1e", "."]
POLICY_NAME = "ERR policy name must be 1 to 64 letters, digits, '_', '-', '.' or '/'"
BAD_NAMES = ["", "x" * 65, "a b", "a:b", "a,b", "\xe9", "a\n", "a*", "\x00"]


@pytest.fixture(scope="module")
def srv():
    """DUMP writes strings raw (no LZF), so a payload can be taken apart;
    FG.PLSTATE is validated as a repair tool meets it."""
    with Server(["--floodgate.explicit-time", "yes", "--rdbcompression", "no",
                 "--floodgate.enable-effect-commands", "yes"]) as server:
        yield server
        assert_no_crash(server)


@pytest.fixture
def c(srv):
    """A client on a dataset that holds policies, their lists and states."""
    rc = RawClient(srv.port)
    rc.execute("FLUSHALL")
    for name in rc.execute("FG.POLICY", "LIST"):
        rc.execute("FG.POLICY", "DEL", name)
    rc.execute("FG.POLICY", "SET", "p", "LIMIT", "TOKEN", "10", "1", "LIMIT", "FIXED", "100",
               "60000", "PENALTY", "60000", "AFTER", "3", "DENYLIST", "BLOOM", "0.01", "100")
    rc.execute("FG.POLICY", "SET", "q", "LIMIT", "SLIDING", "5", "1000", "SHADOW")
    rc.execute("FG.POLICY", "ALLOW", "p", "vip", "friend")
    rc.execute("FG.POLICY", "DENY", "p", "bad")
    rc.execute("FG.CHECK", "p", "k", "COST", "4", "AT", str(T0))
    rc.execute("FG.CHECK", "p", "k", "COST", "40", "AT", str(T0))    # a denial counted
    rc.execute("FG.CHECK", "q", "kq", "AT", str(T0))
    rc.execute("SET", "str", "x")
    rc.execute("RPUSH", "list", "x")
    rc.execute("FG.TOKEN", "bucket", "5", "1")
    # a state that expires (the bucket refills in a second) would change the
    # digest between two snapshots of a slow run, refused or not
    for key in rc.execute("KEYS", "*"):
        rc.execute("PERSIST", key)
    yield rc
    rc.close()


def snapshot(c):
    names = c.execute("FG.POLICY", "LIST")
    return (s(c.execute("DEBUG", "DIGEST")), names,
            [c.execute("FG.POLICY", "GET", n) for n in names])


def refused(c, argv, match=None):
    """argv fails (its message matching `match` from its start) and changes
    nothing; returns the message."""
    before = snapshot(c)
    msg = c.error_of(*argv)
    if match is not None:
        assert msg.startswith(match), (argv, msg, match)
    assert snapshot(c) == before, argv
    return msg


# --------------------------------------------------------------------------
# FG.POLICY SET

VALID = ["LIMIT", "TOKEN", "5", "1"]


def test_set_arity_and_names(c):
    for argv in (["FG.POLICY"], ["FG.POLICY", "SET"], ["FG.POLICY", "SET", "p"]):
        refused(c, argv, "ERR wrong number of arguments")
    for name in BAD_NAMES:
        assert refused(c, ["FG.POLICY", "SET", name] + VALID) == POLICY_NAME
    refused(c, ["FG.POLICY", "NOPE", "p"], "ERR unknown subcommand")


def test_set_rules(c):
    cases = [
        (["SHADOW"], "ERR a policy needs 1 to 8 LIMIT rules"),
        (VALID * 9, "ERR a policy needs 1 to 8 LIMIT rules"),
        (VALID + ["FOO"], "ERR unknown rule 'FOO'"),
        (VALID + ["LIMITS"], "ERR unknown rule 'LIMITS'"),
        (VALID + ["5"], "ERR unknown rule '5'"),
        (["LIMIT"], "ERR LIMIT needs an algorithm"),
        (["LIMIT", "SLIDELOG", "5", "1000"],
         "ERR unknown algorithm 'SLIDELOG' (TOKEN, LEAKY, GCRA, FIXED, SLIDING)"),
        (["LIMIT", "BUCKET", "5", "1000"],
         "ERR unknown algorithm 'BUCKET' (TOKEN, LEAKY, GCRA, FIXED, SLIDING)"),
        (["LIMIT", "TOKEN", "5"], "ERR LIMIT TOKEN needs capacity refill_per_sec"),
        (["LIMIT", "GCRA", "5", "1"], "ERR LIMIT GCRA needs capacity count period_ms"),
        (["LIMIT", "FIXED"], "ERR LIMIT FIXED needs limit window_ms"),
        (VALID + ["PENALTY"], "ERR PENALTY needs ban_ms"),
        (VALID + ["PENALTY", "1000", "AFTER"], "ERR AFTER needs a value"),
        (VALID + ["PENALTY", "1000", "WITHIN"], "ERR WITHIN needs a value"),
        (VALID + ["PENALTY", "1000", "AFTER", "2", "AFTER", "3"], "ERR AFTER given twice"),
        (VALID + ["PENALTY", "1000", "WITHIN", "2", "WITHIN", "3"], "ERR WITHIN given twice"),
        (VALID + ["AFTER", "2"], "ERR unknown rule 'AFTER'"),
        (VALID + ["PENALTY", "1000", "PENALTY", "1000"], "ERR PENALTY given twice"),
        (VALID + ["SHADOW", "SHADOW"], "ERR SHADOW given twice"),
        (VALID + ["ALLOWLIST", "EXACT", "ALLOWLIST", "EXACT"], "ERR ALLOWLIST given twice"),
        (VALID + ["DENYLIST", "EXACT", "DENYLIST", "BLOOM", "0.1", "5"],
         "ERR DENYLIST given twice"),
        (VALID + ["ALLOWLIST"], "ERR ALLOWLIST takes EXACT or BLOOM error capacity"),
        (VALID + ["DENYLIST", "HASH"], "ERR DENYLIST takes EXACT or BLOOM error capacity"),
        (VALID + ["DENYLIST", "BLOOM", "0.01"], "ERR DENYLIST BLOOM needs error capacity"),
    ]
    for rules, msg in cases:
        for name in ("p", "new"):            # replacing, and creating
            assert refused(c, ["FG.POLICY", "SET", name] + rules, msg).startswith(msg), rules
    # a Bloom list the machine cannot hold (p keeps its Bloom deny list: no new one)
    refused(c, ["FG.POLICY", "SET", "new"] + VALID + ["DENYLIST", "BLOOM", "1e-9", str(2 ** 40)],
            "ERR the Bloom list cannot be made")
    # every rule word is case-insensitive, and rules may come in any order
    c.execute("FG.POLICY", "SET", "ok", "shadow", "penalty", "1000", "within", "5",
              "after", "2", "limit", "fixed", "1", "1", "denylist", "bloom", "0.5", "1")


# LIMIT rules: the command of the same algorithm, and where its numbers are
LIMITS = {
    "TOKEN": ("FG.TOKEN", ["10", "1"]),
    "LEAKY": ("FG.LEAKY", ["10", "1"]),
    "GCRA": ("FG.GCRA", ["10", "2", "1000"]),
    "FIXED": ("FG.FIXED", ["10", "1000"]),
    "SLIDING": ("FG.SLIDING", ["10", "1000"]),
}
BAD_PARAMS = NOT_NUMBERS + OVERFLOWS + ["0", "-1", "-0.5", "1e10", "1e13", "1e-9", "1.5",
                                        "9223372036854775807", "1e19"]


def test_limit_numbers_refused_as_their_commands_refuse_them(c):
    n = 0
    for algo, (command, params) in LIMITS.items():
        for i in range(len(params)):
            for bad in BAD_PARAMS:
                args = list(params)
                args[i] = bad
                try:
                    c.execute(command, "cmdkey", *args, "COST", "0")
                    continue                       # a value the command accepts
                except Exception as e:             # noqa: BLE001 - the message
                    want = str(e)
                finally:
                    c.execute("DEL", "cmdkey")  # an accepted 1.5 ms window's, expiring
                assert want.startswith("ERR "), want
                got = refused(c, ["FG.POLICY", "SET", "p", "LIMIT", algo] + args)
                assert got == want, (algo, args, got, want)
                n += 1
    assert n > 150, n


def test_penalty_and_list_numbers(c):
    for bad in NOT_NUMBERS + ["0", "-1", "1e13", "0.0001"]:
        refused(c, ["FG.POLICY", "SET", "p"] + VALID + ["PENALTY", bad], "ERR ban_ms ")
        refused(c, ["FG.POLICY", "SET", "p"] + VALID + ["PENALTY", "1000", "WITHIN", bad],
                "ERR WITHIN ")
    for bad in NOT_INTEGERS + OVERFLOWS + ["0", "-1", "1000001"]:
        refused(c, ["FG.POLICY", "SET", "p"] + VALID + ["PENALTY", "1000", "AFTER", bad],
                "ERR AFTER must be")
    assert s(c.execute("FG.POLICY", "SET", "p2", *VALID, "PENALTY", "1000", "AFTER",
                       "1000000")) == "OK"
    c.execute("FG.POLICY", "DEL", "p2")
    for bad in NOT_NUMBERS + ["0", "1", "-0.1", "2", "1e-10"]:
        refused(c, ["FG.POLICY", "SET", "p"] + VALID + ["ALLOWLIST", "BLOOM", bad, "100"],
                "ERR error must be")
    for bad in NOT_INTEGERS + OVERFLOWS + ["0", "-1", str(2 ** 40 + 1)]:
        refused(c, ["FG.POLICY", "SET", "p"] + VALID + ["DENYLIST", "BLOOM", "0.01", bad],
                "ERR capacity must be")


# --------------------------------------------------------------------------
# the other subcommands

def test_other_subcommands(c):
    arity = "ERR wrong number of arguments"
    for argv in (["FG.POLICY", "DEL"], ["FG.POLICY", "DEL", "p", "q"], ["FG.POLICY", "GET"],
                 ["FG.POLICY", "GET", "p", "q"], ["FG.POLICY", "LIST", "p"],
                 ["FG.POLICY", "ALLOW", "p"], ["FG.POLICY", "DENY", "p"],
                 ["FG.POLICY", "UNLIST", "p", "ALLOW"]):
        refused(c, argv, arity)
    for name in BAD_NAMES:
        for argv in (["DEL", name], ["GET", name], ["ALLOW", name, "x"], ["DENY", name, "x"],
                     ["UNLIST", name, "ALLOW", "x"]):
            assert refused(c, ["FG.POLICY"] + argv) == POLICY_NAME
    for argv in (["GET", "none"], ["ALLOW", "none", "x"], ["DENY", "none", "x"],
                 ["UNLIST", "none", "DENY", "x"]):
        assert refused(c, ["FG.POLICY"] + argv) == "ERR no such policy 'none'"
    assert c.execute("FG.POLICY", "DEL", "none") == 0
    for which in ("", "ALLOWLIST", "BOTH", "0"):
        assert refused(c, ["FG.POLICY", "UNLIST", "p", which, "vip"]) == \
            "ERR UNLIST takes ALLOW or DENY"
    assert refused(c, ["FG.POLICY", "UNLIST", "p", "DENY", "bad"]) == \
        "ERR a Bloom list cannot remove items"


def test_unknown_subcommands_point_to_a_help_that_answers(c):
    """The server's error for an unknown subcommand says to try FG.POLICY
    HELP, which lists every subcommand with its arguments, as the server's
    own HELP subcommands do: status lines, each subcommand's arguments and
    then, indented, what it does."""
    for argv in (["FG.POLICY", "BOGUS"], ["FG.POLICY", "BOGUS", "p"]):
        assert refused(c, argv) == "ERR unknown subcommand 'BOGUS'. Try FG.POLICY HELP."
    before = snapshot(c)
    c.sock.sendall(c.encode(["FG.POLICY", "HELP"]))
    header = c._line()
    lines = [c._line() for _ in range(int(header[1:]))]
    assert header[:1] == b"*" and all(x[:1] == b"+" for x in lines), lines  # status replies
    lines = [s(x[1:]) for x in lines]
    assert [s(x) for x in c.execute("FG.POLICY", "help")] == lines
    assert snapshot(c) == before
    assert lines[0] == "FG.POLICY <subcommand> [<arg> ...]. Subcommands are:"
    usages, does = lines[1::2], lines[2::2]
    assert len(usages) == len(does) and all(d.startswith("    ") and d[4] != " " for d in does)
    subs = {s(x[0]).split("|")[1] for x in c.execute("COMMAND", "INFO", "FG.POLICY")[0][9]}
    assert [u.split()[0] for u in usages] == \
        ["SET", "DEL", "GET", "LIST", "ALLOW", "DENY", "UNLIST", "HELP"]
    assert set(u.split()[0] for u in usages) == subs
    assert "UNLIST <name> <ALLOW|DENY> <item> [<item> ...]" in usages
    refused(c, ["FG.POLICY", "HELP", "x"], "ERR wrong number of arguments")


# --------------------------------------------------------------------------
# FG.CHECK

def test_check_arguments(c):
    at = str(T0)
    arity = "ERR wrong number of arguments"
    refused(c, ["FG.CHECK"], arity)
    refused(c, ["FG.CHECK", "p"], arity)
    for name in BAD_NAMES:
        assert refused(c, ["FG.CHECK", name, "k"]) == POLICY_NAME
    assert refused(c, ["FG.CHECK", "none", "k"]) == "ERR no such policy 'none'"
    for bad in NOT_INTEGERS + OVERFLOWS + ["-1"]:
        refused(c, ["FG.CHECK", "p", "k", "COST", bad, "AT", at], "ERR COST must be")
    for bad in NOT_INTEGERS + OVERFLOWS + ["0", "-1", "86400001"]:
        refused(c, ["FG.CHECK", "p", "k", "WAIT", bad], "ERR WAIT must be")
    for bad in NOT_INTEGERS + OVERFLOWS + ["-1", "9223372036854776"]:
        refused(c, ["FG.CHECK", "p", "k", "AT", bad], "ERR AT must be")
    for opts in (["WAIT", "100", "AT", at], ["AT", at, "COST", "1", "WAIT", "100"]):
        assert refused(c, ["FG.CHECK", "p", "k"] + opts) == "ERR WAIT and AT cannot be combined"
    for opts in (["FOO", "1"], ["COSTS", "1"], ["1"], ["ID", "x", "EXTRA"]):
        refused(c, ["FG.CHECK", "p", "k"] + opts, "ERR syntax error")
    for word in ("COST", "ID", "WAIT", "AT"):
        assert refused(c, ["FG.CHECK", "p", "k", word]) == "ERR %s needs a value" % word
    for key in ("str", "list", "bucket"):
        refused(c, ["FG.CHECK", "p", key, "AT", at], "WRONGTYPE")
    assert refused(c, ["FG.CHECK", "q", "k", "AT", at]) == \
        "ERR key holds the state of policy 'p'"
    # the boundaries are accepted
    c.execute("FG.CHECK", "p", "k2", "COST", "0", "AT", "0")
    c.execute("FG.CHECK", "p", "k2", "COST", "9223372036854775807", "AT", "9223372036854775")


def test_at_disabled(r):
    r.execute_command("FG.POLICY", "SET", "p", "LIMIT", "TOKEN", "1", "1")
    try:
        d = digest(r)
        with pytest.raises(redis.ResponseError, match="^AT is disabled"):
            r.execute_command("FG.CHECK", "p", "k", "AT", T0)
        assert digest(r) == d
    finally:
        r.execute_command("FG.POLICY", "DEL", "p")


# --------------------------------------------------------------------------
# FG.PLSTATE and RESTORE

def payload_of(c, key):
    """The FG.PLSTATE payload of a key: the string of its DUMP."""
    body, _, _ = rdbpayload.split(c.execute("DUMP", key))
    strings = [f for f in rdbpayload.parse_module_value(body) if f.kind == "string"]
    assert len(strings) == 1
    return strings[0].value


def test_plstate_arguments(c):
    good = payload_of(c, "k")
    arity = "ERR wrong number of arguments"
    refused(c, ["FG.PLSTATE"], arity)
    refused(c, ["FG.PLSTATE", "x"], arity)
    refused(c, ["FG.PLSTATE", "x", good, "PXAT"], arity)
    refused(c, ["FG.PLSTATE", "x", good, "PXAT", "1", "2"], arity)
    refused(c, ["FG.PLSTATE", "x", good, "EXAT", "1"], "ERR syntax error")
    for bad in NOT_INTEGERS + OVERFLOWS + ["-1", "9223372036854776"]:
        refused(c, ["FG.PLSTATE", "x", good, "PXAT", bad], "ERR PXAT must be")
    for key in ("str", "list", "bucket"):
        refused(c, ["FG.PLSTATE", key, good], "WRONGTYPE")
    # the good payload round-trips, with and without an expiry
    assert c.execute("FG.PLSTATE", "copy", good, "PXAT", "4102444800000") == b"OK"
    assert payload_of(c, "copy") == good and c.execute("PEXPIRETIME", "copy") == 4102444800000
    assert c.execute("FG.PLSTATE", "copy", good) == b"OK"
    assert c.execute("PTTL", "copy") == -1


def payload_variants(good):
    out = {}
    for i in range(len(good)):
        out["trunc%d" % i] = good[:i]
        out["xor%d" % i] = good[:i] + bytes([good[i] ^ 0xFF]) + good[i + 1:]
        out["bit%d" % i] = good[:i] + bytes([good[i] ^ 1]) + good[i + 1:]
    out["extra"] = good + b"\x00"
    out["version"] = b"\x02" + good[1:]
    out["namelen0"] = good[:1] + b"\x00" + good[2:]
    out["namelen+"] = good[:1] + bytes([good[1] + 1]) + good[2:]
    out["badname"] = good[:2] + b":" + good[3:]
    return {k: v for k, v in out.items() if v != good}


def test_corrupted_plstate_payloads(c, srv):
    good = payload_of(c, "k")
    refusals = set()
    for label, bad in payload_variants(good).items():
        before = snapshot(c)
        try:
            c.execute("FG.PLSTATE", "victim", bad)
        except Exception as e:  # noqa: BLE001 - the refusal
            assert str(e) == "ERR invalid policy state payload", (label, e)
            assert snapshot(c) == before, label
            refusals.add(label)
            continue
        # a state this code could have written (a flipped count, say): whole
        assert payload_of(c, "victim") == bad, label
        c.execute("DEL", "victim")
    must = {"trunc%d" % i for i in range(len(good))} | {
        "extra", "version", "namelen0", "namelen+", "badname", "xor0", "xor1"}
    assert must <= refusals, sorted(must - refusals)
    assert_no_crash(srv)


def test_corrupted_restore_payloads(c, srv):
    dumped = c.execute("DUMP", "k")
    body, version, _ = rdbpayload.split(dumped)
    cases = rdbpayload.variants(body, seed=4242, random_cases=200)
    assert len(cases) > 500
    refusals = 0
    for label, vb in cases:
        try:
            c.execute("RESTORE", "fz", "0", rdbpayload.make(vb, version))
        except Exception as e:  # noqa: BLE001 - the refusal
            assert "payload version or checksum" not in str(e), label
            refusals += 1
            continue
        # accepted (as a state, or as another type the damage made): it decides
        if s(c.execute("TYPE", "fz")) != "fg-plstat":
            c.execute("DEL", "fz")
            continue
        try:
            c.execute("FG.CHECK", "p", "fz", "AT", str(T0))
        except Exception as e:  # noqa: BLE001 - another policy's state, say
            assert str(e).startswith(("ERR key holds", "ERR overflow")), (label, e)
        c.execute("DEL", "fz")
    assert refusals > len(cases) // 2
    assert c.execute("DEBUG", "RELOAD") == b"OK"
    assert_no_crash(srv)

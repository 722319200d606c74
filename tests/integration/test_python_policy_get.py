"""policy_get's definition is the one set, and policy_set takes it again as
the same policy: a server's FG.POLICY GET tells a Bloom list's error and
capacity (it told its kind and entries only, which the library read as 0.0
and 0, which no policy_set takes), and keeps the list's filter when a
policy is replaced with the list's kind unchanged, so get -> set is the
same policy, its entries included, on a server as on mem:.

Exact lists read back too, on a stock server and a stock cluster as well
(backends.py), whose scripts keep exact lists only: the Bloom ones stay
the module's."""

import pytest

import floodgate as fg
from backends import STOCK, target


@pytest.fixture(params=["mem", "server"])
def client(request, server, r):
    if request.param in STOCK:
        url = target(request.param).url  # flushed: its policies with it
    else:
        url = "mem:" if request.param == "mem" else "redis://127.0.0.1:%d" % server.port
    with fg.Client(url) as c:
        yield c
    for name in r.execute_command("FG.POLICY", "LIST"):
        if name.startswith(b"pyget."):
            r.execute_command("FG.POLICY", "DEL", name)


def definition(allowlist, denylist):
    return fg.PolicyDef([fg.token_bucket(20, 5), fg.fixed_window(1000, 3600000)],
                        ban_ms=60000, ban_after=5, ban_within_ms=10000,
                        allowlist=allowlist, denylist=denylist)


EXACT = (fg.ListSpec("exact"), fg.ListSpec("exact"))


@pytest.mark.parametrize("client, lists", [
    (where, lists) for where in ("mem", "server") for lists in [
        (fg.ListSpec("exact"), fg.ListSpec("bloom", 0.01, 500)),
        (fg.ListSpec("bloom", 0.001, 100000), fg.ListSpec("bloom", 0.05, 20)),
        (fg.ListSpec("bloom", 0.001, 100000), fg.ListSpec("exact"))]] +
    [(where, EXACT) for where in ("mem", "server") + STOCK],
    indirect=["client"], scope="function")
def test_get_then_set_is_the_same_policy(client, lists):
    api = definition(*lists)
    client.policy_set("pyget.api", api)
    client.policy_deny("pyget.api", ["203.0.113.9", "203.0.113.10"])
    client.policy_allow("pyget.api", ["198.51.100.4"])
    before = client.policy_get("pyget.api")
    client.policy_set("pyget.api", before.definition)  # was InvalidError: ERR error must be ...
    after = client.policy_get("pyget.api")
    assert after.definition == before.definition
    assert (after.allow_entries, after.deny_entries) == (before.allow_entries,
                                                        before.deny_entries) == (1, 2)
    # the same lists: what they held still decides
    assert client.policy_check("pyget.api", "k", identity="203.0.113.9").decided_by == \
        "denylist"
    assert client.policy_check("pyget.api", "k", identity="198.51.100.4").decided_by == \
        "allowlist"
    assert before.definition == api


def test_read_back_definition_makes_a_new_policy(client):
    """Set under another name (or after a delete), a Bloom list read back
    is made with the error and capacity it was set with."""
    client.policy_set("pyget.src", definition(fg.ListSpec("exact"),
                                              fg.ListSpec("bloom", 0.01, 500)))
    copy = client.policy_get("pyget.src").definition
    client.policy_set("pyget.copy", copy)
    client.policy_deny("pyget.copy", "192.0.2.7")
    assert client.policy_check("pyget.copy", "k", identity="192.0.2.7").decided_by == "denylist"
    got = client.policy_get("pyget.copy").definition
    assert got == copy
    assert got.denylist == fg.ListSpec("bloom", 0.01, 500)
    with fg.Client("mem:") as mem:
        mem.policy_set("pyget.copy", copy)
        assert mem.policy_get("pyget.copy").definition == copy

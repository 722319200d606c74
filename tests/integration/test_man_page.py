"""docs/man/floodgate.7, the module's section-7 man page: it names every
command the module registers (FG.POLICY's subcommands too), and groff reads
it without a warning."""

import os
import re
import shutil
import subprocess

import pytest

from harness import RawClient, s

PAGE = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "man", "floodgate.7")


def documented():
    """The commands the page gives an entry (a .TP/.TQ heading or .B line)."""
    with open(PAGE) as f:
        text = f.read().replace("\\-", "-")
    heads = re.findall(r"^\.(?:BI|B|BR) \"?([A-Z][A-Z.]+(?: [A-Z]+)?)", text, re.M)
    return {h.upper() for h in heads}


def test_every_command_has_an_entry(server):
    with RawClient(server.port) as c:
        names = {s(n).upper().replace("|", " ")   # FG.POLICY's subcommands too
                 for n in c.execute("COMMAND", "LIST", "FILTERBY", "MODULE", "floodgate")}
        names |= {s(x[0]).upper().replace("|", " ")
                  for x in c.execute("COMMAND", "INFO", "FG.POLICY")[0][9]}
    missing = names - documented() - {"FG.POLICY"}
    assert not missing, sorted(missing)
    assert len(names) >= 50 and "FG.POLICY HELP" in names


@pytest.mark.skipif(shutil.which("groff") is None, reason="no groff")
def test_groff_reads_it_without_warnings():
    out = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", PAGE], capture_output=True,
                         text=True, timeout=60, env=dict(os.environ, LC_ALL="C.UTF-8"))
    assert out.returncode == 0 and out.stderr == "", out.stderr

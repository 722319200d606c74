"""Every example in README.md and docs/ (docs/managed/ too) runs as
written, in the order written, README first and then docs/ by name, all on one fresh `make run`
server, whatever today's date: a document
that drifts from the code fails here (doc_runner.py says what runs and
how; a block that is only to be read says why in a mark).

They run in a network namespace of their own, where 127.0.0.1:6379 is free for the `make run` server the examples talk to, and C examples are
built through pkg-config against a staged `make install`.
"""

import glob
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from harness import REPO

DOCUMENTS = ["README.md"] + sorted(os.path.relpath(p, REPO)
                                   for p in glob.glob(os.path.join(REPO, "docs", "*.md")) +
                                   glob.glob(os.path.join(REPO, "docs", "managed", "*.md")))
RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "doc_runner.py")


def namespace_command():
    """How to enter a network namespace of our own, or None."""
    for command in (["unshare", "--net"], ["unshare", "--net", "--map-root-user"]):
        probe = subprocess.run(command + ["true"], capture_output=True)
        if probe.returncode == 0:
            return command
    return None


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """A `make install` under a scratch prefix, for pkg-config."""
    prefix = str(tmp_path_factory.mktemp("prefix"))
    subprocess.run(["make", "-s", "-C", REPO, "install", "PREFIX=" + prefix], check=True,
                   stdout=subprocess.DEVNULL)
    return prefix


def test_every_example_runs_in_order(staged):
    enter = namespace_command()
    if enter is None:
        pytest.skip("no network namespace here: the examples need 127.0.0.1:6379 to themselves")
    work = tempfile.mkdtemp(prefix="floodgate-doc-")
    try:
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(staged, "lib", "pkgconfig"))
        proc = subprocess.run(
            enter + ["sh", "-c", 'ip link set lo up && exec "$0" "$@"', sys.executable, RUNNER,
                     work] + [os.path.join(REPO, d) for d in DOCUMENTS],
            env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr + proc.stdout
        ran = [line for line in proc.stdout.splitlines() if ": examples ran: " in line]
        assert len(ran) == len(DOCUMENTS), proc.stdout
    finally:
        shutil.rmtree(work, ignore_errors=True)

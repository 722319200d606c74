"""The Python package as pip installs it (docs/python.md, "Installation"):
`pip install --no-build-isolation --no-index ./bindings/python` into a
virtual environment, offline, with the setuptools and wheel of Debian's
python3-setuptools and python3-wheel; then the environment's python finds
libfloodgate through $FLOODGATE_LIBRARY, the system's loader (a staged
`make install PREFIX=...` lib directory on LD_LIBRARY_PATH) and the
environment's own prefix (sys.prefix/lib), and decides on mem:.

pip builds from a copy of bindings/python in a temporary directory, so
nothing (build/, floodgate.egg-info) is written into the work tree; the
test checks that too. No server is needed."""

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(ROOT, "bindings", "python")
BUILT = os.path.join(ROOT, "build", "libfloodgate.so.0")
PYTHON = "/usr/bin/python3"

# Run by the environment's python: where the package and the library are,
# and one decision on mem:.
PROBE = r"""
import importlib.metadata, json, floodgate
client = floodgate.Client("mem:")
limit = floodgate.token_bucket(2, 1)
decisions = [client.check("k", limit).allowed for _ in range(3)]
client.close()
loaded = [line.split()[-1] for line in open("/proc/self/maps") if "libfloodgate" in line]
print(json.dumps({"package": floodgate.__file__, "library_path": floodgate.library_path,
                  "loaded": sorted(set(loaded)), "decisions": decisions,
                  "version": floodgate.__version__,
                  "metadata_version": importlib.metadata.version("floodgate"),
                  "license": importlib.metadata.metadata("floodgate")["License"]}))
"""


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "FLOODGATE_LIBRARY", "LD_LIBRARY_PATH",
                        "VIRTUAL_ENV")}
    env["PIP_NO_CACHE_DIR"] = "1"  # nothing written to ~/.cache
    env.update(extra)
    return env


def run(cmd, cwd, env=None, timeout=120):
    p = subprocess.run(cmd, cwd=cwd, env=env or clean_env(), capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, "%s failed:\n%s\n%s" % (cmd, p.stdout, p.stderr)
    return p


def tree_extras():
    """What a build in place would leave in bindings/python."""
    return sorted(n for n in os.listdir(SOURCE) if n in ("build", "dist") or
                  n.endswith(".egg-info"))


@pytest.fixture(scope="module")
def venv():
    if not os.path.exists(BUILT):
        pytest.skip("make library first")
    before = tree_extras()
    tmp = tempfile.mkdtemp(prefix="floodgate-venv-")
    try:
        src = os.path.join(tmp, "src")
        shutil.copytree(SOURCE, src, ignore=shutil.ignore_patterns(
            "__pycache__", "*.pyc", "build", "dist", "*.egg-info"))
        env_dir = os.path.join(tmp, "venv")
        # --system-site-packages: the build needs Debian's wheel (bdist_wheel),
        # which ensurepip does not put in the environment.
        run([PYTHON, "-m", "venv", "--system-site-packages", env_dir], tmp)
        python = os.path.join(env_dir, "bin", "python")
        run([python, "-m", "pip", "install", "--no-build-isolation", "--no-index", "./src"], tmp)
        prefix = os.path.join(tmp, "prefix")
        run(["make", "--no-print-directory", "-s", "install", "PREFIX=" + prefix], ROOT,
            timeout=300)
        yield {"dir": tmp, "python": python, "venv": env_dir, "prefix": prefix}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert tree_extras() == before, "pip wrote into the work tree"


def probe(v, **env):
    import json
    p = run([v["python"], "-c", PROBE], v["dir"], clean_env(**env))
    out = json.loads(p.stdout)
    # the package is the environment's, not the source tree's or the system's
    assert out["package"].startswith(os.path.join(v["venv"], "lib")), out
    assert out["decisions"] == [True, True, False]
    assert out["version"] == out["metadata_version"] == "0.1.0"
    assert out["license"] == "BSD-3-Clause"
    return out


def test_installed_without_the_tree(venv):
    assert tree_extras() == []
    site = os.path.dirname(probe(venv, FLOODGATE_LIBRARY=BUILT)["package"])
    assert sorted(n for n in os.listdir(site) if n.endswith(".py")) == sorted(
        n for n in os.listdir(os.path.join(SOURCE, "floodgate")) if n.endswith(".py"))
    assert not any(n.endswith(".so") or ".so." in n for n in os.listdir(site))


def test_floodgate_library(venv):
    out = probe(venv, FLOODGATE_LIBRARY=BUILT)
    assert out["library_path"] == BUILT
    assert out["loaded"] == [os.path.realpath(BUILT)]


def test_staged_make_install_on_the_loader_path(venv):
    lib = os.path.join(venv["prefix"], "lib")
    out = probe(venv, LD_LIBRARY_PATH=lib)
    assert out["library_path"] == "libfloodgate.so.0"  # the system's loader found it
    assert out["loaded"] == [os.path.realpath(os.path.join(lib, "libfloodgate.so.0"))]


def test_library_in_the_environment_prefix(venv):
    """A library installed into the environment (make install PREFIX=venv
    puts it in venv/lib) is found there with no variable set."""
    staged = os.path.join(venv["prefix"], "lib")
    lib = os.path.join(venv["venv"], "lib")
    names = [n for n in os.listdir(staged) if n.startswith("libfloodgate.so")]
    for n in names:
        src = os.path.join(staged, n)
        if os.path.islink(src):
            os.symlink(os.readlink(src), os.path.join(lib, n))
        else:
            shutil.copy2(src, os.path.join(lib, n))
    try:
        out = probe(venv)
        assert out["library_path"] == os.path.join(lib, "libfloodgate.so.0")
        assert out["loaded"] == [os.path.realpath(os.path.join(lib, "libfloodgate.so.0"))]
        # an explicit path still comes first
        assert probe(venv, FLOODGATE_LIBRARY=BUILT)["library_path"] == BUILT
    finally:
        for n in names:
            os.unlink(os.path.join(lib, n))


def test_not_found_says_where_it_looked(venv):
    import ctypes.util
    if ctypes.util.find_library("floodgate"):
        pytest.skip("a libfloodgate is installed on the system")
    p = subprocess.run([venv["python"], "-c", "import floodgate"], cwd=venv["dir"],
                       env=clean_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "libfloodgate not found; tried" in p.stderr
    assert os.path.join(venv["venv"], "lib", "libfloodgate.so.0") in p.stderr
    assert "FLOODGATE_LIBRARY" in p.stderr


def test_one_version():
    """The version is __init__.py's alone: pyproject.toml reads it."""
    with open(os.path.join(SOURCE, "pyproject.toml")) as f:
        text = f.read()
    assert 'dynamic = ["version"]' in text and 'attr = "floodgate.__version__"' in text
    assert "\nversion =" not in text.replace("\nversion = {attr", "")
    sys.path.insert(0, SOURCE)
    try:
        import floodgate
        assert floodgate.__version__ == "0.1.0"
    finally:
        sys.path.remove(SOURCE)

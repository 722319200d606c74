"""The Python binding's tests once more, on libfloodgate built with
AddressSanitizer and UndefinedBehaviorSanitizer (build/asan/): a buffer the
binding hands the library too short, freed too early or read past its end
fails here even where the plain build happens to survive it.

The sanitizers are preloaded into a Python of their own (they must come
first in the process); the servers the tests start do not inherit them
(harness.py). Python's own allocations are not leak-checked: the
interpreter keeps much of its memory until exit by design.
"""

import os
import subprocess
import sys

import pytest

from harness import REPO

ASAN_LIB = os.path.join(REPO, "build", "asan", "libfloodgate.so.0")
# test_python_threads.py among them: a use after free that the plain build
# survives by luck (a client closed on its own renewal thread) fails here.
TESTS = ["test_python.py", "test_python_locks.py", "test_python_data.py", "test_python_threads.py",
         "test_python_ranges.py"]


def runtime(name):
    return subprocess.run(["gcc", "-print-file-name=" + name], capture_output=True,
                          text=True, check=True).stdout.strip()


@pytest.fixture
def env():
    if not os.path.exists(ASAN_LIB):
        pytest.skip("build/asan/libfloodgate.so.0 is not built (make integration builds it)")
    # PYTHONMALLOC=malloc: Python's buffers come from malloc, where ASan
    # sees their ends, not from its own arenas
    return dict(os.environ,
                LD_PRELOAD=" ".join(runtime(n) for n in ("libasan.so", "libubsan.so")),
                ASAN_OPTIONS="detect_leaks=0:abort_on_error=0",
                UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
                PYTHONMALLOC="malloc", FLOODGATE_LIBRARY=ASAN_LIB,
                PYTHONPATH=os.path.join(REPO, "bindings", "python"))


def test_a_short_buffer_is_caught(env):
    """The set-up can fail: a buffer shorter than the length the library is
    told is reported, in the sanitized library, loaded from its path."""
    script = (
        "import ctypes, floodgate\n"
        "from floodgate import _native as N\n"
        "assert floodgate.library_path == %r, floodgate.library_path\n"
        "c = floodgate.Client()\n"
        "c.check('k', floodgate.token_bucket(5, 1))\n"
        "N.inspect(c._h, b'k', ctypes.create_string_buffer(8), 4096, None)\n" % ASAN_LIB)
    p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0
    assert "AddressSanitizer: heap-buffer-overflow" in p.stderr, p.stderr[-3000:]


def test_the_binding_under_the_sanitizers(env):
    here = os.path.dirname(os.path.abspath(__file__))
    files = [os.path.join(here, t) for t in TESTS if os.path.exists(os.path.join(here, t))]
    # the cluster test adds a minute of cluster setup and no library path
    # the other tests do not already take
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-k", "not cluster"] + files,
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    out = p.stdout + p.stderr
    assert "AddressSanitizer" not in out and "runtime error:" not in out, out[-6000:]
    assert p.returncode == 0, out[-6000:]

"""The servers of the lock tests that run on the module and without it
(test_client_locks.py, test_python_locks.py import these): `target`, the
session's module server flushed or the shared stock one, and `r`, redis-py
on it, whose FG.* lock commands are lock.lua's on the stock server."""

import pytest

import backends


@pytest.fixture(params=("module", "stock"))
def target(request, server):
    return backends.module_or_stock(request.param, server)


@pytest.fixture
def r(target):
    c = backends.script_client(target.server)
    yield c
    c.close()

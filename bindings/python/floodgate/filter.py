"""An in-process Bloom filter: the server's filter in the caller's memory,
with no client and no key (fg_filter). fg_filter is not thread-safe; its
calls keep the GIL (_native.pylib), so threads may share a filter and take
turns."""

from ctypes import byref

from . import _native as N
from . import errors


class Filter(N.Owned):
    """Filter(error_rate=0.01, capacity=100, expansion=2): expansion 0 is
    non-scaling (adds beyond capacity raise InvalidError). `item in f`
    asks; add() answers True for a new item."""

    _what = "filter"

    def __init__(self, error_rate=0.01, capacity=100, expansion=2):
        super().__init__()
        opts = N.fill(N.BloomOptions(), error_rate=error_rate, capacity=capacity,
                      expansion=expansion)
        err = N.Error()
        h = N.filter_new(byref(opts), byref(err))
        if not h:
            raise errors.of(err)
        self._h = h
        # fg_filter_add answers -1 for both; the options tell which, and the
        # message is the server's for the same add (client.bf_add's).
        self._refusal = ("ERR non scaling filter is full" if expansion == 0 else
                         "ERR problem inserting into filter")

    def add(self, item):
        """True when added, False when maybe present already."""
        item = N.as_bytes(item)
        rc = self._call(N.filter_add, item, len(item))
        if rc < 0:  # full, or no level more (the last one, or no memory)
            raise errors.InvalidError(self._refusal)
        return rc == 1

    def __contains__(self, item):
        item = N.as_bytes(item)
        return self._call(N.filter_contains, item, len(item))

    def cardinality(self):
        """The items added, estimated."""
        return self._call(N.filter_cardinality)

    __len__ = cardinality

    def bytes(self):
        """Memory the filter holds."""
        return self._call(N.filter_bytes)

    def _free(self, h):
        N.filter_free(h)

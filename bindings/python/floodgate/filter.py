"""An in-process Bloom filter: the server's filter in the caller's memory,
with no client and no key (fg_filter). Not thread-safe, as in C: one thread
at a time, or a lock around it."""

from ctypes import byref

from . import _native as N
from . import errors


class Filter(N.Owned):
    """Filter(error_rate=0.01, capacity=100, expansion=2): expansion 0 is
    non-scaling (adds beyond capacity raise InvalidError). `item in f`
    asks; add() answers True for a new item."""

    _what = "filter"

    def __init__(self, error_rate=0.01, capacity=100, expansion=2):
        opts = N.BloomOptions(error_rate, capacity, expansion)
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
        rc = N.filter_add(self._handle(), item, len(item))
        if rc < 0:  # full, or no level more (the last one, or no memory)
            raise errors.InvalidError(self._refusal)
        return rc == 1

    def __contains__(self, item):
        item = N.as_bytes(item)
        return N.filter_contains(self._handle(), item, len(item))

    def cardinality(self):
        """The items added, estimated."""
        return N.filter_cardinality(self._handle())

    __len__ = cardinality

    def bytes(self):
        """Memory the filter holds."""
        return N.filter_bytes(self._handle())

    def _free(self, h):
        N.filter_free(h)

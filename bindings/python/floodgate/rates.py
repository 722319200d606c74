"""Rate strings as the `limits` package writes them: "10/second",
"100 per minute", "5/2 seconds", "1000/hour"; parse_limit gives the Limit,
parse_limits several ("10/second;1000/hour").

The grammar is limits' (limits.parse, limits.parse_many): a count, "/" or
"per", an optional multiplier and a unit (second, minute, hour, day, month
or year, singular or plural), case-insensitive, spaces allowed around each
part; several are separated by ";", "," or "|". A month is 30 days and a
year 12 of them, as in limits.

Which algorithm enforces "count per window" is the caller's choice; the
default is a fixed window, limits' own default strategy:

  fixed_window    fixed_window(count, window_ms)           (the default)
  sliding_window  sliding_window(count, window_ms)         limits' sliding window counter
  sliding_log     sliding_log(count, window_ms)            limits' moving window
  token_bucket    token_bucket(count, count / window_s)    a burst of count, refilled over the window
  leaky_bucket    leaky_bucket(count, count / window_s)
  gcra            gcra(count, count, window_ms)            count per window, count at once
"""

import re

from .errors import InvalidError
from .limits import (fixed_window, gcra, leaky_bucket, sliding_log, sliding_window,
                     token_bucket)

_UNIT_MS = {"second": 1000, "minute": 60000, "hour": 3600000, "day": 86400000,
            "month": 30 * 86400000, "year": 12 * 30 * 86400000}
_UNITS = ", ".join(_UNIT_MS)
_INT64_MAX = 2**63 - 1
_MAX_WINDOW_MS = 10**12  # the library's longest duration (core/params.h)
_SEPARATORS = re.compile(r"[;,|]")
# count, "/" or "per", [multiplier], unit[s]; ASCII digits and letters only
# (a minus sign is read to say that the number must be positive)
_RATE = re.compile(r"\s*(-?[0-9]+)\s*(?:/|per)\s*(?:(-?[0-9]+)\s*)?([a-z]+)\s*",
                   re.IGNORECASE | re.ASCII)
_QUOTED_MAX = 64  # characters of a bad string quoted in its error


_ALGORITHMS = {
    "fixed_window": lambda n, ms: fixed_window(n, ms),
    "sliding_window": lambda n, ms: sliding_window(n, ms),
    "sliding_log": lambda n, ms: sliding_log(n, ms),
    "token_bucket": lambda n, ms: token_bucket(n, n * 1000.0 / ms),
    "leaky_bucket": lambda n, ms: leaky_bucket(n, n * 1000.0 / ms),
    "gcra": lambda n, ms: gcra(n, n, ms),
}


def _integer(digits):
    # past 20 digits it is out of every range here (and int() of a few
    # thousand digits would raise ValueError)
    sign = -1 if digits.startswith("-") else 1
    digits = digits.lstrip("-").lstrip("0") or "0"
    return sign * (int(digits) if len(digits) <= 20 else 10**20)


def _refuse(text, why):
    if len(text) > _QUOTED_MAX:
        text = text[:_QUOTED_MAX] + "..."
    raise InvalidError("ERR invalid rate limit %r: %s" % (text, why))


def parse_rate(text):
    """(count, window_ms) of one rate string, or InvalidError."""
    if not isinstance(text, str):
        raise TypeError("a rate limit is a string such as '10/second', not %r" % (text,))
    m = _RATE.fullmatch(text)
    if m is None:
        _refuse(text, "expected 'count/[n] unit' or 'count per [n] unit', count and n "
                "positive integers, unit one of " + _UNITS)
    count, multiplier, unit = _integer(m.group(1)), m.group(2), m.group(3).lower()
    if unit not in _UNIT_MS and unit.endswith("s"):
        unit = unit[:-1]  # plural
    if unit not in _UNIT_MS:
        _refuse(text, "unknown unit %r (%s)" % (m.group(3), _UNITS))
    if not 1 <= count <= _INT64_MAX:
        _refuse(text, "the count must be from 1 to %d" % _INT64_MAX)
    multiplier = 1 if multiplier is None else _integer(multiplier)
    if multiplier < 1:
        _refuse(text, "the number of %ss must be at least 1" % unit)
    window_ms = multiplier * _UNIT_MS[unit]
    if window_ms > _MAX_WINDOW_MS:
        _refuse(text, "the window must be at most %d ms" % _MAX_WINDOW_MS)
    return count, window_ms


def parse_limit(text, algorithm="fixed_window"):
    """The Limit of a rate string ("10/second", "100 per minute", "5/2
    seconds"), enforced by algorithm: "fixed_window" (the default),
    "sliding_window", "sliding_log", "token_bucket", "leaky_bucket" or
    "gcra". A string that is not a rate raises InvalidError."""
    make = _ALGORITHMS.get(algorithm)
    if make is None:
        raise InvalidError("ERR unknown algorithm %r for a rate limit (%s)"
                           % (algorithm, ", ".join(_ALGORITHMS)))
    return make(*parse_rate(text))


def parse_limits(text, algorithm="fixed_window"):
    """The Limits of rate strings separated by ";", "," or "|"
    ("10/second;1000/hour"), in order, each as parse_limit makes it."""
    if not isinstance(text, str):
        raise TypeError("rate limits are a string such as '10/second;1000/hour', not %r"
                        % (text,))
    return [parse_limit(part, algorithm) for part in _SEPARATORS.split(text)]

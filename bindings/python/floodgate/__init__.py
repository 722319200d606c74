"""floodgate for Python: distributed rate limits, locks, Bloom filters and
unique counting, over libfloodgate (docs/python.md).

    import floodgate
    client = floodgate.Client("redis://127.0.0.1:6379")
    result = client.check("user:42", floodgate.token_bucket(10, 2))
    if not result.allowed:
        ...  # result.retry_after_ms, result.headers()
"""

from ._native import library_path
from .client import (DAYS, HOURS, MINUTES, SECONDS, Client, Request, Stats, Window, between,
                     last, owner_id, request_key)
from .errors import (Error, InvalidError, IOError, LockNotAcquired, NoMemError,
                     NotDurableError, ProtocolError, ServerError, UnsupportedError,
                     WrongTypeError)
from .filter import Filter
from .limits import (Limit, Result, Source, fixed_window, gcra, leaky_bucket, sliding_log,
                     sliding_window, token_bucket)
from .locks import (Lock, LockGrant, LostReason, MultiLock, Redlock, RedlockGrant, RedlockLock,
                    Semaphore)
from .policies import ListSpec, PolicyDef, PolicyInfo, PolicyResult
from .rates import parse_limit, parse_limits

__version__ = "0.1.0"

__all__ = [
    "Client", "Request", "Stats", "Window", "between", "last", "owner_id", "request_key",
    "SECONDS", "MINUTES", "HOURS", "DAYS",
    "Limit", "Result", "Source", "fixed_window", "sliding_window", "sliding_log",
    "token_bucket", "leaky_bucket", "gcra", "parse_limit", "parse_limits",
    "Lock", "Semaphore", "MultiLock", "LockGrant", "LostReason",
    "Redlock", "RedlockLock", "RedlockGrant",
    "Filter", "PolicyDef", "ListSpec", "PolicyInfo", "PolicyResult",
    "Error", "InvalidError", "WrongTypeError", "IOError", "ProtocolError", "ServerError",
    "NoMemError", "NotDurableError", "UnsupportedError", "LockNotAcquired",
    "library_path",
]

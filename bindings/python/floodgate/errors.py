"""The library's errors as exceptions: one class per fg_code, all under
floodgate.Error, each carrying the code's name and the library's message."""

import builtins


class Error(Exception):
    """An error of floodgate. `code` is the fg_code's name ("invalid", "io",
    ...), or None for LockNotAcquired, `message` the library's text."""

    code = None

    def __init__(self, message):
        super().__init__(message)
        self.message = message


class InvalidError(Error, ValueError):
    """An argument out of range (what the server answers ERR to)."""
    code = "invalid"


class WrongTypeError(Error, TypeError):
    """The key holds another kind of state."""
    code = "wrongtype"


class IOError(Error, builtins.ConnectionError):  # noqa: A001 - named after FG_CODE_IO
    """The server cannot be reached, timed out, or dropped the connection."""
    code = "io"


class ProtocolError(Error):
    """A reply the library did not expect (is the module loaded?)."""
    code = "protocol"


class ServerError(Error):
    """Any other error reply from the server."""
    code = "server"


class NoMemError(Error, MemoryError):
    code = "nomem"


class NotDurableError(Error):
    """A lock grant reached fewer replicas than asked; it was released."""
    code = "not_durable"


class UnsupportedError(Error):
    """The backend cannot do this (a lock on a cluster URL, ...)."""
    code = "unsupported"


class LockNotAcquired(Error):
    """A `with` block's lock was not granted (busy, or the wait ran out)."""

    def __init__(self, message, grant=None):
        super().__init__(message)
        self.grant = grant


# In the order of enum fg_code (FG_CODE_OK is 0).
BY_CODE = (None, InvalidError, WrongTypeError, IOError, ProtocolError, ServerError,
           NoMemError, NotDurableError, UnsupportedError)


def from_code(code, message):
    cls = BY_CODE[code] if 0 < code < len(BY_CODE) else Error
    return cls(message)


def of(err):
    """The exception of a filled fg_error."""
    return from_code(err.code, err.message.decode(errors="replace"))

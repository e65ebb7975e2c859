"""loupe's errors as Python exceptions: one class per loupe error code.

Every error loupe raises is a :class:`loupe.Error` carrying loupe's own ``message`` (the input,
the position, what was expected) and ``hint`` (what to try next). The compiled module raises
them through :func:`from_code`; bad input never crashes the interpreter.

Example::

    try:
        loupe.diff(np.zeros(3), np.zeros(4))
    except loupe.InputError as error:
        print(error.message)   # comparing 'tensor' (...): shapes differ: A [3] vs B [4]
"""

from __future__ import annotations


class Error(Exception):
    """Any loupe error: ``code`` ("usage", "config", "input", "subject", "internal"),
    ``message`` and ``hint``.

    Example::

        except loupe.Error as error:
            print(error.code, error.message, error.hint)
    """

    code = "internal"

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message if not hint else "%s\nhint: %s" % (message, hint))
        self.message = message
        self.hint = hint


class UsageError(Error, ValueError):
    """A bad argument: an unknown metric, axis or option. Also a ValueError."""

    code = "usage"


class ConfigError(Error):
    """A configuration that says something invalid."""

    code = "config"


class InputError(Error, ValueError):
    """Input that cannot be compared or read: differing shapes, an unreadable file, an unknown
    dtype. Also a ValueError."""

    code = "input"


class SubjectError(Error):
    """A subject (a probe body) failed."""

    code = "subject"


class InternalError(Error):
    """A broken invariant inside loupe: please report it."""

    code = "internal"


_BY_CODE = {cls.code: cls for cls in (UsageError, ConfigError, InputError, SubjectError,
                                      InternalError)}


def from_code(code: str, message: str, hint: str = "") -> Error:
    """The exception for loupe error ``code`` (what the compiled module raises)."""
    return _BY_CODE.get(code, InternalError)(message, hint)


def native():
    """The compiled module loupe._loupe, or an ImportError that says how to get it (the
    pure-Python parts, such as the probe runtime, work without it)."""
    try:
        from . import _loupe
    except ImportError as error:
        raise ImportError(
            "loupe's compiled module _loupe is missing (%s): build it with `make build` and use "
            "PYTHONPATH=build/release/python, or `pip install --no-build-isolation ./python`; it "
            "is built for Debian's /usr/bin/python3" % error) from None
    return _loupe

"""Exceptions: one class per dk_status, each carrying libdakit's sentence.

Each also derives from the built-in exception a Python caller would expect
(ValueError for bad input, NotImplementedError for a missing algorithm or
variant, MemoryError, OSError), so `except ValueError` works as usual.
"""


class Error(Exception):
    """A dakit call failed. `status` is the C library's dk_status name
    ("DK_ERR_INVALID_ARGUMENT", ...); str(error) is its sentence."""

    status = "DK_ERR"

    def __init__(self, message):
        super().__init__(message)
        self.message = message


class InvalidArgumentError(Error, ValueError):
    """A parameter or the data is not acceptable (DK_ERR_INVALID_ARGUMENT)."""
    status = "DK_ERR_INVALID_ARGUMENT"


class NoBackendError(Error, RuntimeError):
    """The requested backend is absent or was refused (DK_ERR_NO_BACKEND)."""
    status = "DK_ERR_NO_BACKEND"


class NotImplementedByBackendError(Error, NotImplementedError):
    """The backend lacks this algorithm, variant or kind of memory (DK_ERR_NOT_IMPLEMENTED)."""
    status = "DK_ERR_NOT_IMPLEMENTED"


class BackendError(Error, RuntimeError):
    """The backend or its device failed (DK_ERR_BACKEND)."""
    status = "DK_ERR_BACKEND"


class OutOfMemoryError(Error, MemoryError):
    """Host or device memory ran out (DK_ERR_OUT_OF_MEMORY)."""
    status = "DK_ERR_OUT_OF_MEMORY"


class FileError(Error, OSError):
    """A file could not be opened, read or written (DK_ERR_IO)."""
    status = "DK_ERR_IO"


class FormatError(Error, ValueError):
    """A file is malformed or of an unsupported kind (DK_ERR_FORMAT)."""
    status = "DK_ERR_FORMAT"


_BY_STATUS = {
    1: InvalidArgumentError,
    2: NoBackendError,
    3: NotImplementedByBackendError,
    4: BackendError,
    5: OutOfMemoryError,
    6: FileError,
    7: FormatError,
}


def raise_status(status, message):
    cls = _BY_STATUS.get(int(status), Error)
    raise cls(message or "dakit: status %d without a message" % int(status))


def invalid(message):
    """The exception for bad input found before calling C (a dtype, a
    layout, a kind of array the call cannot take)."""
    return InvalidArgumentError(message)

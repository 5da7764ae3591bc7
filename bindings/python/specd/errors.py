"""SpecdError: a failed specd call, with specd's status name and message."""
import ctypes

from . import _lib


class SpecdError(RuntimeError):
    """A specd call failed. `status` is the specd_status value, `name` its constant name
    ("SPECD_E_INVALID_ARG"), `message` the text specd wrote into specd_error."""

    def __init__(self, status, name, message):
        super().__init__(f"{name}: {message}")
        self.status, self.name, self.message = status, name, message


def status_name(status):
    return _lib.load().specd_status_name(int(status)).decode()


def new_error():
    return _lib.Error()


def check(status, err, what=""):
    """Raises SpecdError when status is not SPECD_OK."""
    if status != 0:
        msg = err.message.decode("utf-8", "replace") if err is not None else ""
        raise SpecdError(status, status_name(status), msg or what)


def byref(err):
    return ctypes.byref(err)


# specd_status names in enum order (specd/status.h), for errors that arrive over the wire from a
# daemon when libspecd itself is not loaded (tests check them against specd_status_name).
STATUS_NAMES = ("SPECD_OK", "SPECD_E_INVALID_ARG", "SPECD_E_NOMEM", "SPECD_E_IO",
                "SPECD_E_FORMAT", "SPECD_E_UNSUPPORTED", "SPECD_E_NUMERIC", "SPECD_E_MISMATCH",
                "SPECD_E_PROTOCOL", "SPECD_E_TIMEOUT", "SPECD_E_PEER", "SPECD_E_STATE",
                "SPECD_E_INTERNAL")


def status_name_static(status):
    return STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else f"SPECD_STATUS_{status}"

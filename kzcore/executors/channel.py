"""The message channel from a worker to the pool: bounded reads and an unpickler that builds only kzcore's
own types, since candidate code in the worker can reach the pipe. Neighbours: `executors.worker` writes the
messages; `executors.local` and `executors.lifecycle` read them with `receive`."""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import socket
import struct

MAX_MESSAGE_BYTES = 64 << 20  # a result is a few KB; anything longer is not one of ours
READ_TIMEOUT_S = 5.0  # a message that has begun must arrive whole within this


class ChannelError(Exception):
    """What came over a worker's pipe is not a message of ours (a candidate wrote into it or closed it)."""


class _MessageUnpickler(pickle.Unpickler):
    """Builds only kzcore's own value types: the pipe is reachable from candidate code, and unpickling
    arbitrary classes would run a candidate's code in this process."""

    ALLOWED = {
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "complex"),
        ("torch.torch_version", "TorchVersion"),  # a str
        ("numpy", "dtype"),  # numpy scalars that slip into a result's numbers
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
    }

    def find_class(self, module, name):
        if module == "kzcore.types" or (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a worker message")


def _bound_reads(conn) -> None:
    """A read that has begun gives up after READ_TIMEOUT_S (a message header with no body, written by a
    candidate, must not hang the pool)."""
    try:
        sock = socket.socket(fileno=os.dup(conn.fileno()))
    except OSError:  # not a socket (another platform): reads stay unbounded
        return
    try:
        with contextlib.suppress(OSError):  # best effort: without the option, reads stay unbounded as above
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(READ_TIMEOUT_S), 0))
    finally:
        sock.close()


def receive(conn) -> tuple:
    """One message from a worker. EOFError when the worker's end is closed; ChannelError when what came is
    not a message of ours (too long, cut short, not a tuple, classes it may not hold)."""
    try:
        data = conn.recv_bytes(MAX_MESSAGE_BYTES)
    except (EOFError, ConnectionResetError):  # the worker's end is gone (reset: it died with data unread)
        raise EOFError from None
    except OSError as exc:  # too long ("bad message length"), or cut short past the read timeout
        raise ChannelError(f"{type(exc).__name__}: {exc}") from None
    try:
        message = _MessageUnpickler(io.BytesIO(data)).load()
    except Exception as exc:
        raise ChannelError(f"unreadable message ({type(exc).__name__}: {exc})"[:300]) from None
    if not isinstance(message, tuple) or not message or message[0] not in ("ready", "failed", "started", "result"):
        raise ChannelError(f"unexpected message of type {type(message).__name__}")
    return message

"""The output of every rank on the controller's terminal (issue 15).

A worker's sys.stdout and sys.stderr (print, tracebacks, and the logging
handlers that write to them) become streams whose lines go to the
controller (crown/debug/logs.h), which prints them as "[rank 3] ...", the
same line from many ranks within a window once: "[ranks 0-15] ...".
Writes to the file descriptors themselves (C code, a crash's dump) still go
straight to the launcher, so nothing is lost when a process dies.

Settings, read on every rank at init (pass them with ``mpirun -x``):
    CROWN_LOG_FORWARD=on|off    off: each worker writes to its own file
    CROWN_LOG_WINDOW=3          seconds of the merge window (0: at once)
    CROWN_LOG_DIR=crown-logs    where those files go
ProcMesh.logging_option() changes them while the job runs.

A ``logging`` record made inside an actor (its endpoints, its __init__, its
async tasks) carries the actor, as Monarch's do: its message starts with
``[actor=<module.Class name{point}>] `` (Monarch's qualified name of the
actor, without its creators) and ``record.actor_prefix`` holds that text.
Records made elsewhere (the controller's main, a worker's startup, threads
an actor started) carry none, nor do empty messages (torch.compile's
structured ones). On the forwarded streams the tag drops its point, so the
same line from many actors of a mesh still merges: "[ranks 1-7]
[actor=<__main__.Talker talkers>] ...".
"""

import io
import logging
import os
import sys
import threading
from typing import Optional

from . import _context, _crown, _endpoints
from ._endpoints import Actor, endpoint
from ._values import Point

DEFAULT_WINDOW = 3.0  # Monarch's aggregate_window_sec


def _log_dir() -> str:
    return os.path.abspath(os.environ.get("CROWN_LOG_DIR", "crown-logs"))


def _actor_tags():
    """(full, short) log tags of the actor this code runs for, or None
    outside actors: "[actor=<module.Class name{point}>]" and the same without
    the point. Kept on the instance once it is built."""
    instance = _context.current_instance()
    if instance is not None:
        tags = instance.__dict__.get("_crown_log_tags")
        if tags is not None:
            return tags
        name, cls = instance.__dict__.get("_crown_actor_name"), type(instance)
    else:  # in cls.__init__, from spawn
        name = getattr(_endpoints._spawning, "name", None)
        cls = getattr(_endpoints._spawning, "cls", None)
    here = _context.here()
    if name is None or here is None:
        return None
    actor = f"{cls.__module__}.{cls.__qualname__} {name}"
    tags = (f"[actor=<{actor}{Point(*here)}>]", f"[actor=<{actor}>]")
    if instance is not None:
        instance.__dict__["_crown_log_tags"] = tags
    return tags


_factory = None  # the record factory before ours


def _actor_record(*args, **kwargs) -> logging.LogRecord:
    """The record factory: a record made inside an actor gets its tag
    (Monarch's _ActorFilter, here once per record, whatever its handlers)."""
    record = _factory(*args, **kwargs)
    try:
        tags = _actor_tags()
    except Exception:  # noqa: BLE001 - a log record is never lost to its tag
        tags = None
    if tags is not None:
        prefix = record.actor_prefix = tags[0] + " "
        if record.msg:  # torch.compile's structured records are empty: left so
            record.msg = (prefix.replace("%", "%%") if record.args else prefix) + str(record.msg)
    return record


def _tag_records() -> None:
    global _factory
    if _factory is None:
        _factory = logging.getLogRecordFactory()
        logging.setLogRecordFactory(_actor_record)


class _Bytes:
    """sys.stdout.buffer of a forwarded stream: bytes as UTF-8 text."""

    def __init__(self, text: "_Forwarded"):
        self._text = text

    def write(self, data) -> int:
        self._text.write(bytes(data).decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        pass


class _Forwarded(io.TextIOBase):
    """A text stream whose lines go to the controller."""

    def __init__(self, stream: int, original):
        super().__init__()
        self._stream = stream
        self._original = original
        self.buffer = _Bytes(self)

    @property
    def encoding(self) -> str:
        return "utf-8"

    @property
    def errors(self) -> str:
        return "replace"

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if text:
            if "[actor=<" in text:  # the same line from every actor of a mesh merges
                tags = _actor_tags()
                if tags is not None:
                    text = text.replace(*tags)
            try:
                _crown.forward_output(self._stream, text)
            except Exception:  # noqa: BLE001 - crown is gone (the very end): the launcher's stream
                self._original.write(text)
        return len(text)

    def fileno(self) -> int:
        return self._original.fileno()  # faulthandler and C code write there themselves

    def isatty(self) -> bool:
        return False


class _ActorsForwarded(_Forwarded):
    """The controller's stream while a client is attached to its served job
    (_attach_server.py): what its actors print goes with the workers' lines
    (to the client); its main thread's (a console's code) where it went."""

    def write(self, text) -> int:
        if threading.current_thread() is threading.main_thread():
            return self._original.write(text)
        return super().write(text)

    def flush(self) -> None:
        self._original.flush()


def forward_actors(on: bool) -> None:
    """On a served job's controller: its actors' output joins the workers'
    forwarded lines (on), or goes to its own streams again (off)."""
    if on and not isinstance(sys.stdout, _ActorsForwarded):
        sys.stdout = _ActorsForwarded(1, sys.stdout)
        sys.stderr = _ActorsForwarded(2, sys.stderr)
    elif not on and isinstance(sys.stdout, _ActorsForwarded):
        sys.stdout.flush()
        sys.stdout, sys.stderr = sys.stdout._original, sys.stderr._original


# This rank's state: the streams before forwarding, the file of "off", and
# the descriptors it replaced.
_originals = None
_log_file: Optional[str] = None
_saved_fds = None


def _forward() -> None:
    global _originals, _log_file
    if _log_file is not None:  # back from a file of its own: the launcher's descriptors again
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(_saved_fds[0], 1)
        os.dup2(_saved_fds[1], 2)
        _log_file = None
    if isinstance(sys.stdout, _Forwarded):
        return
    _originals = (sys.stdout, sys.stderr)
    sys.stdout = _Forwarded(1, sys.stdout)
    sys.stderr = _Forwarded(2, sys.stderr)


def _to_file(directory: str) -> str:
    """Points this rank's stdout and stderr, the descriptors too, at its own
    file; returns its name."""
    global _log_file, _saved_fds
    _stop_forwarding()
    os.makedirs(directory, exist_ok=True)
    path = os.path.abspath(os.path.join(directory, f"rank-{_crown.rank()}.log"))
    if _log_file != path:
        sys.stdout.flush()
        sys.stderr.flush()
        if _saved_fds is None:
            _saved_fds = (os.dup(1), os.dup(2))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        _log_file = path
    return path


def _stop_forwarding() -> None:
    global _originals
    if _originals is not None:
        sys.stdout.flush()
        sys.stdout, sys.stderr = _originals
        _originals = None


def _window_of_env() -> float:
    text = os.environ.get("CROWN_LOG_WINDOW", str(DEFAULT_WINDOW))
    try:
        window = float(text)
    except ValueError:
        raise ValueError(f"CROWN_LOG_WINDOW={text!r}: expected seconds, such as 3 or 0.5") from None
    if window < 0:
        raise ValueError(f"CROWN_LOG_WINDOW={text!r}: the window cannot be negative")
    return window


def _forward_of_env() -> bool:
    text = os.environ.get("CROWN_LOG_FORWARD", "on")
    if text not in ("on", "off"):
        raise ValueError(f"CROWN_LOG_FORWARD={text!r}: expected on or off")
    return text == "on"


def install(rank: int) -> None:
    """At init: the controller sets its window; a worker forwards its
    output, or writes it to its own file (CROWN_LOG_FORWARD=off). On
    every rank, records made inside actors get the actor's tag."""
    _tag_records()
    if rank == 0:
        _crown.set_log_window(_window_of_env())
    elif _forward_of_env():
        _forward()
    else:
        _to_file(_log_dir())


def apply(forward: bool, level: int, directory: str) -> Optional[str]:
    """On every proc of a mesh (logging_option): the level of its root
    logger, and forwarding or its own file (whose name comes back). The
    controller's own output stays on its terminal."""
    logging.getLogger().setLevel(level)
    if _crown.rank() == 0:
        return None
    if forward:
        _forward()
        return None
    return _to_file(directory)


def flush() -> None:
    """On the controller: every line the ranks wrote so far is printed."""
    sys.stdout.flush()
    sys.stderr.flush()
    _crown.flush_logs(2.0)


def check_options(stream_to_client: bool, aggregate_window_sec, level) -> None:
    if not isinstance(level, int) or not 0 <= level <= 255:
        raise ValueError(f"logging_option: level={level!r} is not a logging level "
                         f"(an int from 0 to 255, such as logging.INFO)")
    if aggregate_window_sec is not None:
        if not stream_to_client:
            raise ValueError("logging_option: aggregate_window_sec needs stream_to_client=True "
                             "(lines that stay on their ranks are not merged)")
        if aggregate_window_sec < 0:
            raise ValueError(f"logging_option: aggregate_window_sec={aggregate_window_sec!r} "
                             f"cannot be negative")


class LogControl(Actor):
    """On every proc of a mesh: logging_option's remote half."""

    @endpoint
    def apply(self, forward: bool, level: int, directory: str) -> Optional[str]:
        return apply(forward, level, directory)


def logging_option(procs, stream_to_client: bool, aggregate_window_sec, level: int) -> None:
    check_options(stream_to_client, aggregate_window_sec, level)
    flush()  # what came under the old options prints under them
    if stream_to_client:
        _crown.set_log_window(float(aggregate_window_sec or 0))
    control = procs.spawn("crown-logging", LogControl)
    files = [name for name in control.apply.call(stream_to_client, level, _log_dir()).get()
             .values() if name]
    control.stop()
    if files:
        print(f"crown: the ranks' output goes to their own files: {files[0]}"
              + (f" ... ({len(files)} files in {os.path.dirname(files[0])})"
                 if len(files) > 1 else ""), file=sys.stderr, flush=True)

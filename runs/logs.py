"""The server log: text for people, or one JSON object per line for a log pipeline
(``OVERSIGHT_LOG_FORMAT=json``), each line naming the run, operation and checkpoint it
is about, the web request it was logged in (``request_id``: the proxy's ``X-Request-ID``
or one made for it, ``oversight/request_ids.py``) and the worker that logged it.

What the engine is working on is bound with ``about()``: every line logged meanwhile, by
any module, carries its ids, and the operation's argument strings are cut out of the
message and the traceback in the forms an error quotes them (a path resolved, a URL's
host), while the rest of an error's text stays for the operator (the workspace's
folder, a misconfigured mail backend's path). Secrets and tokens are never logged.
Imports nothing from Django or the models: the logging configuration loads it first.
"""

import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlsplit

IDS = ("run_id", "operation_id", "checkpoint_id")
WHO = ("request_id", "worker")
ACCESS = ("status", "duration_ms", "by")  # an access line's (oversight/request_ids.py)
# Too short to cut without mangling words, ids and numbers around it.
SHORTEST_HIDDEN = 4
HIDDEN = "[argument]"


@dataclass(frozen=True)
class Bound:
    ids: dict = field(default_factory=dict)
    hidden: tuple[str, ...] = ()


_bound: ContextVar[Bound] = ContextVar("oversight_log_bound", default=Bound())  # noqa: B039
_request_id: ContextVar[str | None] = ContextVar("oversight_request_id", default=None)
# A worker process is one worker (``manage.py runworker``): its name, for all its threads.
_worker: str | None = None


def current_request_id() -> str | None:
    return _request_id.get()


def set_worker(name: str) -> None:
    global _worker
    _worker = name


@contextmanager
def in_request(request_id: str) -> Iterator[None]:
    """Lines logged in the ``with`` body name this web request."""
    token = _request_id.set(request_id)
    try:
        yield
    finally:
        _request_id.reset(token)


@contextmanager
def about(*, run_id: int, operation_id: int, arguments=None) -> Iterator[None]:
    """Lines logged in the ``with`` body name this run and operation, and never show
    the string values in ``arguments``."""
    token = _bound.set(Bound({"run_id": run_id, "operation_id": operation_id}, strings(arguments)))
    try:
        yield
    finally:
        _bound.reset(token)


def strings(value) -> tuple[str, ...]:
    """The string values in ``value`` (JSON; keys are the action's names, not data) long
    enough to cut, with the forms an error may quote them in (a path normalised, a URL's
    host and path), longest first so that a value containing another is cut whole."""
    found = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            found |= {item, os.path.normpath(item)}
            if "://" in item:
                parts = urlsplit(item)
                found |= {parts.netloc, parts.hostname or "", parts.path}
    return tuple(sorted((s for s in found if len(s) >= SHORTEST_HIDDEN), key=len, reverse=True))


def cut(text: str, hidden: tuple[str, ...]) -> str:
    for value in hidden:
        text = text.replace(value, HIDDEN)
    return text


class Context(logging.Filter):
    """Adds the bound ids to each record and cuts the bound argument values out of its
    message and traceback (before any formatter sees them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        bound = _bound.get()
        who = {"request_id": _request_id.get(), "worker": _worker}
        for name, value in (*bound.ids.items(), *who.items()):
            if getattr(record, name, None) is None:
                setattr(record, name, value)
        if bound.hidden:
            record.msg, record.args = cut(record.getMessage(), bound.hidden), ()
            if record.exc_info:
                traceback = logging.Formatter().formatException(record.exc_info)
                record.exc_text = cut(traceback, bound.hidden)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the ids known, and the
    traceback if any (newlines escaped: a line is always one event)."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in (*IDS, *WHO, *ACCESS, "event"):
            if getattr(record, name, None) is not None:
                line[name] = getattr(record, name)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    """The message, then the web request or worker it came from, in brackets."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        said = [f"{name}={getattr(record, name)}" for name in WHO if getattr(record, name, None)]
        if not said:
            return text
        message, newline, rest = text.partition("\n")
        return f"{message} [{' '.join(said)}]{newline}{rest}"


class Repeats:
    """A failure that repeats, logged once per kind per ``interval``: the first time with
    its traceback, then one line per interval with how many more there were, and one
    when it works again. A worker whose database is down fails at every step, twice a
    second: its log shows one traceback and a count a minute, not 7,200 tracebacks an
    hour. One per thread (the worker's loop, its notifications lane)."""

    def __init__(self, logger: logging.Logger, interval: float = 60, clock=time.monotonic):
        self.logger, self.interval, self.clock = logger, interval, clock
        self.seen: dict[tuple[str, str], list] = {}  # (what, kind): [since, more, last]

    def failed(self, what: str, error: BaseException) -> None:
        key, now = (what, type(error).__name__), self.clock()
        if (seen := self.seen.get(key)) is None:
            self.seen[key] = [now, 0, error]
            self.logger.error("%s failed", what, exc_info=error)
            return
        seen[1], seen[2] = seen[1] + 1, error
        if now - seen[0] >= self.interval:
            self._more(what, key, now)
            self.seen[key] = [now, 0, error]

    def worked(self, what: str) -> None:
        """``what`` went through: say so if it had been failing."""
        failing = [key for key in self.seen if key[0] == what]
        if not failing:
            return
        now = self.clock()
        for key in failing:
            self._more(what, key, now)
            del self.seen[key]
        self.logger.warning("%s works again", what)

    def _more(self, what: str, key: tuple[str, str], now: float) -> None:
        since, more, last = self.seen[key]
        if more:
            self.logger.error(
                "%s failed %d more times in %d s, the last: %s: %s",
                what,
                more,
                round(now - since),
                key[1],
                last,
            )

"""The server log: text for people, or one JSON object per line for a log pipeline
(``OVERSIGHT_LOG_FORMAT=json``), each line naming the run, operation and checkpoint it
is about.

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
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlsplit

IDS = ("run_id", "operation_id", "checkpoint_id")
# Too short to cut without mangling words, ids and numbers around it.
SHORTEST_HIDDEN = 4
HIDDEN = "[argument]"


@dataclass(frozen=True)
class Bound:
    ids: dict = field(default_factory=dict)
    hidden: tuple[str, ...] = ()


_bound: ContextVar[Bound] = ContextVar("oversight_log_bound", default=Bound())  # noqa: B039


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
        for name, value in bound.ids.items():
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
        for name in (*IDS, "event"):
            if getattr(record, name, None) is not None:
                line[name] = getattr(record, name)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, default=str)

"""JSON from outside (agents' API bodies, a reviewer's edited arguments, page links),
parsed and checked before anything stores, hashes or shows it.

Python's ``json`` module accepts what JSON does not (``NaN``, ``Infinity``, numbers that
overflow to infinity) and what neither database stores (a lone surrogate such as
``"\\ud800"`` is not text; PostgreSQL's text and jsonb refuse U+0000); and it recurses,
so a value nested thousands deep crashes whatever walks it next. Each of these is
refused here with the field at fault, before the canonical hash or the database sees it.

Numbers are read in their canonical form (``runs.canonical``: -0.0 as 0.0, 1e16 as the
integer 10000000000000000), the form PostgreSQL gives back, so that a hash taken now
still matches the stored row. An integer with more digits than Python reads back
(``sys.get_int_max_str_digits()``) could be stored but never read: it is refused too.
"""

import json
import math
import sys
from typing import Any

from django.conf import settings

from runs.canonical import canonical_float, canonical_json

# The largest id or seq either database stores (a signed 64-bit integer).
MAX_ROW_ID = 2**63 - 1


class Refused(ValueError):
    """Input refused: ``field`` is the request field at fault, ``status`` the HTTP status
    the API answers (400 for text that is not JSON, 422 otherwise), ``code`` its error."""

    code = "invalid"

    def __init__(self, field: str, reason: str, status: int = 422) -> None:
        super().__init__(reason)
        self.field, self.status = field, status


class LimitExceeded(Refused):
    """Over a limit: too large (413) or nested too deep (422)."""

    code = "limit_exceeded"


def max_depth() -> int:
    return settings.OVERSIGHT_API_MAX_DEPTH


class LongInteger:
    """Where ``parse`` met an integer too long to read (``int()`` refuses it): it stands
    in the parsed value until ``check_tree`` refuses it, naming where it was."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _integer(text: str) -> int | LongInteger:
    digits = len(text.lstrip("-"))
    if digits > sys.get_int_max_str_digits():
        return LongInteger(digits)
    return int(text)


def _float(text: str) -> float | int:
    return canonical_float(float(text))


def parse(raw: bytes | str, *, field: str) -> Any:
    """The JSON value in ``raw`` (UTF-8 if bytes), its numbers canonical; ``Refused`` for
    text that is not UTF-8 or not JSON, or nested deeper than the parser can follow.
    NaN, the infinities, integers too long to read back and odd strings still parse:
    ``check_tree`` refuses them where it can name the field."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise Refused(field, f"not UTF-8 text (byte {error.start})", 400) from None
    try:
        return json.loads(raw, parse_int=_integer, parse_float=_float)
    except RecursionError:
        raise LimitExceeded(field, f"nested deeper than {max_depth()} levels") from None
    except ValueError as error:
        raise Refused(field, f"not valid JSON: {error}", 400) from None


def _number_problem(number: float | LongInteger) -> str | None:
    if isinstance(number, LongInteger):
        most = sys.get_int_max_str_digits()
        return f"an integer of {number.digits} digits could not be read back (at most {most})"
    if math.isnan(number):
        return "NaN is not a JSON number"
    if math.isinf(number):
        return "Infinity (or a number too large, such as 1e999) is not a JSON number"
    return None


def string_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as text (in either database), if it cannot."""
    if "\x00" in text:
        return "contains U+0000 (NUL), which cannot be stored; encode binary data as base64"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"contains a lone surrogate (U+{ord(text[error.start]):04X}), which is not text"
    return None


def check_tree(field: str, value: Any) -> None:
    """Refuse ``value`` if it nests more containers than the depth limit, if a number in
    it is not finite or too long to read back, or if a key or string in it is not
    storable text; the refusal names where (``arguments.note``; for depth, ``field``).
    Walks without recursion: the value may be nested deeper than Python's recursion
    limit."""
    limit = max_depth()
    stack: list[tuple[Any, tuple[str, ...], int]] = [(value, (field,), 0)]
    while stack:
        item, path, level = stack.pop()
        if isinstance(item, str | float | LongInteger):
            check = string_problem if isinstance(item, str) else _number_problem
            if problem := check(item):
                raise Refused(".".join(path), problem)
        elif isinstance(item, dict | list):
            if level >= limit:
                raise LimitExceeded(field, f"nested deeper than {limit} levels")
            if isinstance(item, list):
                stack.extend((child, (*path, str(i)), level + 1) for i, child in enumerate(item))
                continue
            for key, child in item.items():
                if problem := string_problem(key):
                    raise Refused(".".join(path), f"a key {problem}")
                stack.append((child, (*path, key), level + 1))


def check_body(body: Any) -> None:
    """An API request body: each member is held to the limits of a free-form field, so
    that a refusal names the member (``arguments``, ``output``…)."""
    if not isinstance(body, dict):
        check_tree("body", body)
        return
    for name, member in body.items():
        if problem := string_problem(name):
            raise Refused("body", f"a key {problem}")
        check_tree(name, member)


def check_json(field: str, value: Any, *, max_bytes: int) -> None:
    """Refuse a free-form value (arguments, a payload, an output) that ``check_tree``
    refuses or whose canonical form is over ``max_bytes``."""
    check_tree(field, value)
    check_size(field, value, max_bytes=max_bytes)


def check_size(field: str, value: Any, *, max_bytes: int) -> None:
    """Refuse a value ``check_tree`` already passed (every API body member, by the
    API's parser) whose canonical form is over ``max_bytes``."""
    size = len(canonical_json(value))
    if size > max_bytes:
        raise LimitExceeded(field, f"{size} bytes is over the limit of {max_bytes}", status=413)

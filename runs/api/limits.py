"""Limits on what an agent may send, each refused with a reason (400, 413 or 422). The JSON
checks are ``runs.jsonsafe``'s, shared with the reviewer's edit form; the strict parser
here applies them to every request body before any endpoint sees it."""

from typing import Annotated

from ninja import Query
from ninja.parser import Parser
from pydantic import AfterValidator

from runs.jsonsafe import (
    MAX_ROW_ID,
    LimitExceeded,
    Refused,
    check_body,
    check_size,
    parse,
    string_problem,
)

__all__ = [
    "MAX_ROW_ID",
    "LimitExceeded",
    "QueryText",
    "Refused",
    "RowId",
    "StrictParser",
    "check_size",
]


def _storable(text: str) -> str:
    if problem := string_problem(text):
        raise ValueError(problem)
    return text


# Query parameters that reach a database filter: text both databases can compare
# (no NUL, no lone surrogate), and ids within the column's range (422 otherwise).
QueryText = Annotated[str, Query(max_length=200), AfterValidator(_storable)]
RowId = Annotated[int, Query(ge=1, le=MAX_ROW_ID)]


class StrictParser(Parser):
    """ninja's body parser, strict: no NaN or infinities, UTF-8 only, no lone surrogates
    or NUL in any string, each member nested at most ``OVERSIGHT_API_MAX_DEPTH`` deep.
    ninja turns any parser error into a bare 400; the API's handler for that 400 reads
    the ``Refused`` it was raised from and answers with its field and reason."""

    def parse_body(self, request):
        body = parse(request.body, field="body")
        check_body(body)
        return body

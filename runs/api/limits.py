"""Limits on what an agent may send, each refused with a reason (400, 413 or 422). The JSON
checks are ``runs.jsonsafe``'s, shared with the reviewer's edit form; the strict parser
here applies them to every request body before any endpoint sees it."""

from ninja.parser import Parser

from runs.jsonsafe import LimitExceeded, Refused, check_body, check_size, parse

__all__ = ["LimitExceeded", "Refused", "StrictParser", "check_size"]


class StrictParser(Parser):
    """ninja's body parser, strict: no NaN or infinities, UTF-8 only, no lone surrogates
    or NUL in any string, each member nested at most ``OVERSIGHT_API_MAX_DEPTH`` deep.
    ninja turns any parser error into a bare 400; the API's handler for that 400 reads
    the ``Refused`` it was raised from and answers with its field and reason."""

    def parse_body(self, request):
        body = parse(request.body, field="body")
        check_body(body)
        return body

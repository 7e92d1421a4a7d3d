"""The body of every error the agent API answers: what went wrong (``error``, a word a
program can test), why in words (``detail``), the field it is about if any, and the
request's id (its ``X-Request-ID``), which the server's log lines of that request carry
too: an agent's report of a refusal leads an operator straight to them."""

from django.http import JsonResponse

from runs.logs import current_request_id


def problem_body(error: str, detail: str, field: str | None = None) -> dict:
    return {"error": error, "detail": detail, "field": field, "request_id": current_request_id()}


def refusal(status: int, error: str, detail: str, field: str | None = None, **kwargs):
    """A JSON error answered outside the API's own views (its middleware, its waits)."""
    return JsonResponse(problem_body(error, detail, field), status=status, **kwargs)

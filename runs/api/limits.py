"""Limits on what an agent may send, each refused with a reason (413 or 422)."""

from django.conf import settings

from runs.canonical import canonical_json


class LimitExceeded(Exception):
    def __init__(self, field: str, reason: str, status: int = 422) -> None:
        super().__init__(reason)
        self.field, self.status = field, status


def depth(value, level: int = 0) -> int:
    if isinstance(value, dict):
        return max((depth(v, level + 1) for v in value.values()), default=level + 1)
    if isinstance(value, list):
        return max((depth(v, level + 1) for v in value), default=level + 1)
    return level


def check_json(field: str, value, *, max_bytes: int) -> None:
    size = len(canonical_json(value))
    if size > max_bytes:
        raise LimitExceeded(field, f"{size} bytes is over the limit of {max_bytes}", status=413)
    if depth(value) > settings.OVERSIGHT_API_MAX_DEPTH:
        raise LimitExceeded(
            field, f"nested deeper than {settings.OVERSIGHT_API_MAX_DEPTH} levels", status=422
        )

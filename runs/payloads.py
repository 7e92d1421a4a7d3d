"""Schemas for message payloads, versioned so that stored messages stay readable after
the format changes (seed 000: "versionar el formato"). A payload is validated against
its kind and schema version before it is saved; unknown versions are refused."""

from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticError

MAX_TEXT = 100_000


class MessageKind(models.TextChoices):
    USER = "user", "user"
    AGENT = "agent", "agent"
    TOOL = "tool", "tool result"
    SYSTEM = "system", "system"


class TextPayloadV1(BaseModel):
    """Version 1 for every kind: the text people read, plus optional structured data."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str = Field(max_length=MAX_TEXT)
    data: dict[str, Any] | None = None


SCHEMAS: dict[tuple[str, int], type[BaseModel]] = {
    (kind, 1): TextPayloadV1 for kind in MessageKind.values
}
CURRENT_VERSION = 1


def validate_payload(kind: str, schema_version: int, payload: Any) -> dict:
    """Return the payload as it will be stored, or raise ``ValidationError`` saying why."""
    schema = SCHEMAS.get((kind, schema_version))
    if schema is None:
        raise ValidationError(
            f"no payload schema for kind {kind!r} version {schema_version}",
            code="unknown_schema",
        )
    try:
        return schema.model_validate(payload).model_dump(exclude_none=True)
    except PydanticError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, err['loc'])) or 'payload'}: {err['msg']}" for err in exc.errors()
        )
        raise ValidationError(f"invalid {kind} payload: {problems}", code="invalid") from None

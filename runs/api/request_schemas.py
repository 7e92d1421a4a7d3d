"""What goes in and out of the human-request endpoints. Field names are the API's
contract; the limits are the service's (``runs.services.requests``)."""

from datetime import datetime
from typing import Any, Literal

from ninja import Schema
from pydantic import Field

from runs.api.schemas import EXTERNAL_ID
from runs.models import HumanRequest, Run
from runs.services import requests as service

RequestKind = Literal["question", "sign_off", "choice", "data"]


class RequestIn(Schema):
    prompt: str = Field(min_length=1, max_length=service.PROMPT_CHARS)
    kind: RequestKind | None = Field(
        default=None,
        description="What is asked: question (answered in words), sign_off (signed off or "
        "rejected), choice (one of choices) or data (valid against answer_schema). "
        "Default: choice with choices, data with an answer_schema, else sign_off.",
    )
    context: str = Field(
        default="",
        max_length=service.CONTEXT_CHARS,
        description="Markdown shown to reviewers, escaped (a safe subset is rendered).",
    )
    answer_schema: dict[str, Any] | None = Field(
        default=None,
        description="For data: a JSON Schema the answer's data must be valid against. "
        "Refused (422, saying why) unless any answer can be checked against it in bounded "
        "time: $ref only as a JSON Pointer within the schema ('#/$defs/Name'), no $ref "
        f"cycle on one value, at most {service.PATTERNS_MAX} patterns, each without "
        f"lookaround or backreferences, and at most {service.SCHEMA_STEPS_MAX} steps for "
        "one value of the answer, each $ref followed where it is used.",
    )
    choices: list[str] | None = Field(
        default=None,
        min_length=1,
        max_length=service.CHOICES_MAX,
        description="For a choice: distinct strings of 1 to 200 characters, the "
        "reviewer picks one.",
    )
    external_id: str = Field(
        default="", max_length=service.EXTERNAL_ID_CHARS, description=EXTERNAL_ID
    )
    expires_in: int | None = Field(
        default=None,
        ge=service.EXPIRES_IN_MIN,
        le=service.EXPIRES_IN_MAX,
        description="Seconds to answer. Default: the project's decision timeout.",
    )


class AnswerOut(Schema):
    request_kind: RequestKind = Field(description="The kind of the request answered.")
    kind: Literal["approve", "reject", "answer", "choose"] = Field(
        description="What the reviewer did: approve (a sign-off), choose (a choice), answer "
        "(a question or data), or reject (any kind, comment the reason)."
    )
    by: str = Field(description="The reviewer's username.")
    at: datetime
    comment: str
    data: Any = Field(
        default=None,
        description="For answer, a question's text or a data request's data; for choose, "
        "the chosen string; null otherwise.",
    )


class RequestOut(Schema):
    id: int
    run: int
    external_id: str
    prompt: str
    kind: RequestKind
    context: str
    answer_schema: dict[str, Any] | None
    choices: list[str] | None
    status: Literal["open", "answered", "rejected", "expired", "cancelled"]
    answer: AnswerOut | None
    version: int
    expires_at: datetime
    created_at: datetime
    run_version: int

    @staticmethod
    def of(request: HumanRequest) -> "RequestOut":
        answer = service.describe_answer(request)
        return RequestOut(
            **{field: getattr(request, field) for field in FIELDS},
            run=request.run_id,
            answer=AnswerOut(**answer) if answer else None,
            run_version=Run.objects.values_list("version", flat=True).get(pk=request.run_id),
        )


FIELDS = [
    "id",
    "external_id",
    "prompt",
    "kind",
    "context",
    "answer_schema",
    "choices",
    "status",
    "version",
    "expires_at",
    "created_at",
]

"""``http.request``: a mutating HTTP call to an allow-listed host.

Before the call, the worker reads the verify URL (status, the fields the effect should
change, and its ETag) into the intent. The call carries the operation's
``Idempotency-Key``, the attempt's ``Oversight-Fencing-Epoch`` (a target may refuse an
epoch lower than one it has seen for the key) and, when it writes the very resource it
verifies and that resource had an ETag, ``If-Match``. A 4xx answer, or a connection
refused, means nothing was applied. Verification is a follow-up GET: the expected
status and fields are applied; the same status and fields as before the call are
absent; anything else is uncertain. A 2xx answer to the call itself proves nothing.

The rollback is a compensating call when the proposal names one (sent with its own
idempotency key), made only if the target changed since before the call; otherwise an
out-of-band alert. A takeover may call again only on hosts declared to deduplicate
(``OVERSIGHT_HTTP_DEDUPLICATING_HOSTS``).
"""

import json
import urllib.error
import urllib.request
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from django.conf import settings
from pydantic import AfterValidator, Field

from runs.actions.base import (
    Action,
    Arguments,
    Context,
    Effect,
    ExecutionFailed,
    NotApplied,
    NothingToRollBack,
    PreconditionFailed,
)
from runs.models import Operation

FENCING_HEADER = "Oversight-Fencing-Epoch"


def check_url(url: str) -> str:
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise ValueError("must not contain spaces or control characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http(s) URL")
    try:
        parts.port  # noqa: B018 (a bad port raises here, not mid-request)
    except ValueError:
        raise ValueError("has an invalid port") from None
    if parts.netloc not in settings.OVERSIGHT_HTTP_ALLOWED_HOSTS:
        raise ValueError(f"host {parts.netloc} is not in OVERSIGHT_HTTP_ALLOWED_HOSTS")
    return url


Url = Annotated[str, Field(max_length=2000), AfterValidator(check_url)]


class Expectation(Arguments):
    """A GET whose answer must have this status and contain these JSON fields."""

    url: Url
    status: int = Field(default=200, ge=100, le=599)
    json_fields: dict[str, Any] = Field(default_factory=dict, alias="json")

    def seen(self, status: int, body: Any) -> dict:
        """What of an answer this expectation looks at: the status and its fields."""
        fields = body if isinstance(body, dict) else {}
        return {"status": status, "fields": {k: fields.get(k) for k in self.json_fields}}

    def shortfall(self, answer: "Answer") -> str:
        """How ``answer`` falls short of this expectation ("" when it meets it)."""
        if answer.status != self.status:
            return f"GET {self.url} answered {answer.status}, not {self.status}"
        fields = self.seen(answer.status, answer.body)["fields"]
        if fields != self.json_fields:
            return f"GET {self.url} shows {fields}, not {self.json_fields}"
        return ""


class Call(Arguments):
    method: Literal["POST", "PUT", "PATCH", "DELETE"]
    url: Url
    body: dict[str, Any] | None = None


class HttpRequestArguments(Call):
    verify: Expectation
    precondition: Expectation | None = None
    compensate: Call | None = None


class Answer:
    def __init__(self, status: int, raw: bytes, etag: str | None) -> None:
        self.status, self.raw, self.etag = status, raw, etag

    @property
    def body(self) -> Any:
        try:
            return json.loads(self.raw)
        except ValueError:
            return self.raw[:2000].decode(errors="replace")


def send(call: Call, key: str, headers: dict[str, str]) -> Answer:
    """Make the call; a connection refused means the target never saw it."""
    data = None if call.body is None else json.dumps(call.body).encode()
    request = urllib.request.Request(
        call.url,
        data=data,
        method=call.method,
        headers={"Idempotency-Key": key, "Content-Type": "application/json", **headers},
    )
    try:
        return _open(request)
    except ExecutionFailed as failure:
        if isinstance(failure.__cause__, ConnectionRefusedError):
            raise NotApplied(str(failure)) from None
        raise


def fetch(url: str) -> Answer:
    return _open(urllib.request.Request(url, method="GET"))


def _open(request: urllib.request.Request) -> Answer:
    try:
        with urllib.request.urlopen(request, timeout=settings.OVERSIGHT_HTTP_TIMEOUT) as response:
            return Answer(response.status, response.read(), response.headers.get("ETag"))
    except urllib.error.HTTPError as error:
        return Answer(error.code, error.read(), error.headers.get("ETag"))
    except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
        cause = error.reason if isinstance(error, urllib.error.URLError) else error
        failure = ExecutionFailed(f"{request.method} {request.full_url}: {cause}")
        raise failure from cause if isinstance(cause, BaseException) else error


class HttpRequest(Action):
    name = "http.request"
    Arguments = HttpRequestArguments
    rollback_kind = Operation.RollbackKind.OUT_OF_BAND

    def rollback_kind_for(self, args: HttpRequestArguments) -> str:
        if args.compensate:
            return Operation.RollbackKind.COMPENSATING
        return Operation.RollbackKind.OUT_OF_BAND

    def deduplicates(self, args: HttpRequestArguments) -> bool:
        return urlsplit(args.url).netloc in settings.OVERSIGHT_HTTP_DEDUPLICATING_HOSTS

    def describe(self, args: HttpRequestArguments) -> dict[str, str]:
        pre = args.precondition
        return {
            "precondition": f"GET {pre.url} answers {pre.status}" if pre else "None.",
            "rollback": (
                f"{args.compensate.method} {args.compensate.url}"
                if args.compensate
                else "Out-of-band: a failed verification alerts a person."
            ),
        }

    def precondition(self, args: HttpRequestArguments, ctx: Context) -> None:
        try:
            HttpRequestArguments.model_validate(args.model_dump(by_alias=True))
        except ValueError as error:
            raise PreconditionFailed(f"no longer allowed: {error}") from None
        if args.precondition:
            why = args.precondition.shortfall(fetch(args.precondition.url))
            if why:
                raise PreconditionFailed(why)

    def snapshot(self, args: HttpRequestArguments, ctx: Context) -> dict:
        answer = fetch(args.verify.url)
        seen = args.verify.seen(answer.status, answer.body)
        return {"before": {**seen, "etag": answer.etag}}

    def execute(self, args: HttpRequestArguments, key: str, ctx: Context) -> dict:
        headers = {FENCING_HEADER: str(ctx.epoch)}
        etag = ctx.intent.get("before", {}).get("etag")
        if etag and args.url == args.verify.url:
            headers["If-Match"] = etag
        answer = send(args, key, headers)  # The worker confirmed its lease just before.
        if 200 <= answer.status < 300:
            return {"status": answer.status, "body": answer.body}
        if 400 <= answer.status < 500:
            raise NotApplied(f"{args.method} {args.url} was refused: {answer.status}")
        raise ExecutionFailed(f"{args.method} {args.url} answered {answer.status}")

    def verify(self, args: HttpRequestArguments, key: str, ctx: Context) -> Effect:
        answer = fetch(args.verify.url)  # Unreachable: raised, and retried later.
        if not args.verify.shortfall(answer):
            return Effect.APPLIED
        return Effect.ABSENT if self._unchanged(args, answer, ctx) else Effect.UNCERTAIN

    def compensate(self, args: HttpRequestArguments, key: str, ctx: Context) -> None:
        if self._unchanged(args, fetch(args.verify.url), ctx):
            raise NothingToRollBack(f"GET {args.verify.url} shows the state from before the call")
        headers = {FENCING_HEADER: str(ctx.epoch)}
        ctx.confirm_lease()  # Again: the GET above may have taken a while.
        answer = send(args.compensate, f"{key}:compensate", headers)
        if not 200 <= answer.status < 300:
            raise ExecutionFailed(f"compensation {args.compensate.url} answered {answer.status}")

    @staticmethod
    def _unchanged(args: HttpRequestArguments, answer: Answer, ctx: Context) -> bool:
        before = ctx.intent.get("before")
        if before is None:
            return False
        now = args.verify.seen(answer.status, answer.body)
        return now == {"status": before["status"], "fields": before["fields"]}

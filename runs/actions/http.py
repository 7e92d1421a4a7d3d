"""``http.request``: a mutating HTTP call to an allow-listed host.

The request carries the operation's ``Idempotency-Key`` header. Verification is a
follow-up GET whose status (and, optionally, JSON fields) must show the effect; a 2xx
answer to the call itself proves nothing. The rollback is a compensating call when the
proposal names one (sent with its own idempotency key), and otherwise an out-of-band
alert.
"""

import json
import urllib.error
import urllib.request
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from django.conf import settings
from pydantic import AfterValidator, Field

from runs.actions.base import Action, Arguments, Context, ExecutionFailed, PreconditionFailed
from runs.models import Operation


def check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http(s) URL")
    if parts.netloc not in settings.OVERSIGHT_HTTP_ALLOWED_HOSTS:
        raise ValueError(f"host {parts.netloc} is not in OVERSIGHT_HTTP_ALLOWED_HOSTS")
    return url


Url = Annotated[str, Field(max_length=2000), AfterValidator(check_url)]


class Expectation(Arguments):
    """A GET whose answer must have this status and contain these JSON fields."""

    url: Url
    status: int = Field(default=200, ge=100, le=599)
    json_fields: dict[str, Any] = Field(default_factory=dict, alias="json")


class Call(Arguments):
    method: Literal["POST", "PUT", "PATCH", "DELETE"]
    url: Url
    body: dict[str, Any] | None = None


class HttpRequestArguments(Call):
    verify: Expectation
    precondition: Expectation | None = None
    compensate: Call | None = None


def send(call: Call, key: str) -> tuple[int, Any]:
    data = None if call.body is None else json.dumps(call.body).encode()
    request = urllib.request.Request(
        call.url,
        data=data,
        method=call.method,
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
    )
    return _open(request)


def fetch(url: str) -> tuple[int, Any]:
    return _open(urllib.request.Request(url, method="GET"))


def _open(request: urllib.request.Request) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(request, timeout=settings.OVERSIGHT_HTTP_TIMEOUT) as response:
            return response.status, _decode(response.read())
    except urllib.error.HTTPError as error:
        return error.code, _decode(error.read())
    except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
        raise ExecutionFailed(f"{request.method} {request.full_url}: {error}") from None


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw[:2000].decode(errors="replace")


def meets(expectation: Expectation) -> tuple[bool, str]:
    status, body = fetch(expectation.url)
    if status != expectation.status:
        return False, f"GET {expectation.url} answered {status}, not {expectation.status}"
    fields = body if isinstance(body, dict) else {}
    wrong = {k: fields.get(k) for k, v in expectation.json_fields.items() if fields.get(k) != v}
    if wrong:
        return False, f"GET {expectation.url} shows {wrong}, not {expectation.json_fields}"
    return True, ""


class HttpRequest(Action):
    name = "http.request"
    Arguments = HttpRequestArguments
    rollback_kind = Operation.RollbackKind.OUT_OF_BAND

    def rollback_kind_for(self, args: HttpRequestArguments) -> str:
        if args.compensate:
            return Operation.RollbackKind.COMPENSATING
        return Operation.RollbackKind.OUT_OF_BAND

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
            ok, why = meets(args.precondition)
            if not ok:
                raise PreconditionFailed(why)

    def execute(self, args: HttpRequestArguments, key: str, ctx: Context) -> dict:
        status, body = send(args, key)
        if not 200 <= status < 300:
            raise ExecutionFailed(f"{args.method} {args.url} answered {status}")
        return {"status": status, "body": body}

    def verify(self, args: HttpRequestArguments, key: str, ctx: Context) -> bool:
        return meets(args.verify)[0]

    def compensate(self, args: HttpRequestArguments, key: str, ctx: Context) -> None:
        status, _ = send(args.compensate, f"{key}:compensate")
        if not 200 <= status < 300:
            raise ExecutionFailed(f"compensation {args.compensate.url} answered {status}")

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

Every request goes where it was approved, and nowhere else:

- Redirects are never followed: a 3xx is the target's answer. To the call itself it
  means the target received the request (a 303 even says it acted), so verification
  decides, as for a 5xx; to a verify GET it shows nothing of the resource, so the
  effect is uncertain (never "absent") and a compensation is not attempted; to the
  precondition GET it is a failed precondition. Nothing (the ``Idempotency-Key``, the
  fencing epoch, the body) ever reaches a host the URL did not name.
- The host is resolved once per request, and the connection goes to the addresses
  checked (the ``Host`` header, SNI and the certificate check still use the name), so
  a name cannot resolve to one address for the check and another for the call. An
  internal address (loopback, private, link-local, multicast, unspecified, reserved;
  IPv4-mapped IPv6 included) is refused unless the URL names its port and that exact
  ``host:port`` is in ``OVERSIGHT_HTTP_ALLOWED_HOSTS``: a bare ``host`` entry is for
  public services only.
- Proxy environment variables are not used: a proxy would resolve the name itself.

Every request has a budget (``target_budget``), whoever makes it: one deadline over
connecting, sending and the whole answer (``OVERSIGHT_HTTP_DEADLINE``; each wait on the
socket gets the time left, so a target sending a byte now and then cannot stretch it as
it would a timeout per wait), and a cap on the answer's body
(``OVERSIGHT_HTTP_MAX_RESPONSE_BYTES``; reading stops there); a reviewer's preview has at
most a few seconds and a mebibyte (``PREVIEW_BUDGET``), whatever the workers may take. An
answer cut short (``OverBudget``) shows nothing of the target, but the request reached
it: to the call itself it is no refusal (the effect may have happened), so verification
decides; to the verify GET the effect is uncertain; to the precondition GET the
precondition fails; a preview says which limit the target overran. A connection (TLS
handshake included) not made within the deadline sent nothing (``Unsent``); the snapshot
GET, before anything fires, is retried like an unreachable target. Resolving the name is
not counted: the system's resolver bounds it.
"""

import http.client
import ipaddress
import json
import logging
import socket
import ssl
import time
from typing import Annotated, Any, Literal
from urllib.parse import SplitResult, urlsplit

from django.conf import settings
from pydantic import AfterValidator, Field

from runs import jsonsafe
from runs.actions.base import (
    Action,
    Arguments,
    Context,
    Effect,
    ExecutionFailed,
    NotApplied,
    NothingToRollBack,
    PreconditionFailed,
    plain_reason,
    target_answered,
    target_budget,
)
from runs.actions.previews import Exchange
from runs.models import Operation

log = logging.getLogger(__name__)
FENCING_HEADER = "Oversight-Fencing-Epoch"
DEFAULT_PORTS = {"http": 80, "https": 443}


def _host(url: str) -> str:
    """The ``host[:port]`` a URL names, in lower case."""
    return urlsplit(url).netloc.lower()


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
            return f"GET {self.url} answered {answer}, not {self.status}"
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


class Unsent(ExecutionFailed):
    """The request never left Oversight (its name did not resolve, its address was
    refused, the connection failed): the target saw nothing of it."""


class AddressRefused(Unsent):
    """The URL's host resolves to an internal address it may not reach."""


class OverBudget(ExecutionFailed):
    """The answer did not end within the deadline, or its body was larger than the cap:
    it was cut short, after the request had reached the target."""


class Answer:
    def __init__(self, status: int, raw: bytes, etag: str | None, location: str | None) -> None:
        self.status, self.raw, self.etag, self.location = status, raw, etag, location

    @property
    def body(self) -> Any:
        """The answer's JSON, if it is JSON Oversight can store (the target's text is as
        hostile as an agent's: NaN, NUL, nesting thousands deep); else the start of it as
        text, which can always be stored."""
        try:
            value = jsonsafe.parse(self.raw, field="body")
            jsonsafe.check_tree("body", value)
        except jsonsafe.Refused:
            return self.raw[:2000].decode(errors="replace").replace("\x00", "\ufffd")
        return value

    @property
    def redirected(self) -> bool:
        return 300 <= self.status < 400

    def __str__(self) -> str:
        """The status as a person reads it, saying that a redirect was not followed."""
        if not self.redirected:
            return str(self.status)
        location = " ".join((self.location or "").split())[:200]  # One line, however sent.
        to = f" to {location}" if location else ""
        return f"{self.status} (a redirect{to}, which Oversight does not follow)"


def send(call: Call, key: str, headers: dict[str, str]) -> Answer:
    """Make the call; a request that never left Oversight did not reach the target."""
    data = None if call.body is None else json.dumps(call.body).encode()
    headers = {"Idempotency-Key": key, "Content-Type": "application/json", **headers}
    try:
        return exchange(call.method, call.url, data, headers)
    except Unsent as unsent:
        raise NotApplied(str(unsent)) from None


def fetch(url: str) -> Answer:
    return exchange("GET", url)


def resolve(url: str) -> list[tuple]:
    """The addresses of the URL's host (``getaddrinfo`` entries), each checked; raises
    ``AddressRefused`` if any is internal and the URL's ``host:port`` is not allow-listed
    (a name answering both a public and an internal address is refused)."""
    parts = urlsplit(url)
    try:
        found = socket.getaddrinfo(parts.hostname, _port(parts), type=socket.SOCK_STREAM)
    except OSError as error:
        raise Unsent(f"{parts.hostname} does not resolve: {plain_reason(error)}") from error
    if parts.port is not None and parts.netloc in settings.OVERSIGHT_HTTP_ALLOWED_HOSTS:
        return found
    for *_, sockaddr in found:
        if internal(sockaddr[0]):
            raise AddressRefused(
                f"{parts.hostname} resolves to {sockaddr[0]}, an internal address: only a "
                "host:port in OVERSIGHT_HTTP_ALLOWED_HOSTS may be internal"
            )
    return found


def internal(address: str) -> bool:
    """Loopback, private, link-local, multicast, unspecified or reserved (IPv4 or IPv6,
    an IPv4-mapped IPv6 address judged as the IPv4 one)."""
    ip = ipaddress.ip_address(address.partition("%")[0])  # Without an IPv6 zone.
    ip = getattr(ip, "ipv4_mapped", None) or ip
    site_local = ip.version == 6 and ip.is_site_local
    return not ip.is_global or ip.is_multicast or ip.is_reserved or site_local


class _Deadlined:
    """A socket whose every wait (connect, send, receive) gets the time left until
    ``deadline``, a ``time.monotonic()`` instant: a timeout per wait would never fire
    for a target that sends a byte now and then."""

    deadline: float

    def keep_deadline(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the deadline has passed")
        self.settimeout(left)

    def connect(self, *args, **kwargs) -> None:
        self.keep_deadline()
        super().connect(*args, **kwargs)

    def send(self, *args, **kwargs) -> int:
        self.keep_deadline()
        return super().send(*args, **kwargs)

    def sendall(self, *args, **kwargs) -> None:
        self.keep_deadline()
        super().sendall(*args, **kwargs)

    def recv_into(self, *args, **kwargs) -> int:  # What http.client's answer reads through.
        self.keep_deadline()
        return super().recv_into(*args, **kwargs)


class _DeadlinedSocket(_Deadlined, socket.socket):
    """A TCP socket keeping a deadline (its ``sendall`` keeps it for all it sends)."""


class _DeadlinedTLSSocket(_Deadlined, ssl.SSLSocket):
    """Its ``sendall`` sends in pieces through ``send``: each gets the time left."""


class _Pinned(http.client.HTTPConnection):
    """Connects to the addresses ``resolve`` checked (``found``), not to whatever the
    name resolves to by now, before ``deadline``; the Host header still names the host."""

    found: list[tuple]
    deadline: float

    def connect(self) -> None:
        error = OSError(f"{self.host} has no address")
        for family, kind, proto, _, sockaddr in self.found:
            sock = _DeadlinedSocket(family, kind, proto)
            sock.deadline = self.deadline
            try:
                sock.connect(sockaddr)
                sock.keep_deadline()  # The TLS handshake, if any, gets the time left.
            except OSError as refused:
                sock.close()
                error = refused
                continue
            self.sock = sock
            return
        raise error


class _PinnedTLS(http.client.HTTPSConnection, _Pinned):
    """``HTTPSConnection.connect`` wraps the socket ``_Pinned.connect`` opened, with SNI
    and the certificate check for the host's name, in a ``_DeadlinedTLSSocket`` (see
    ``_tls``) that keeps the same deadline."""

    def connect(self) -> None:
        super().connect()
        self.sock.deadline = self.deadline


def _tls() -> ssl.SSLContext:
    """The default context (certificates checked against the system's authorities),
    making sockets that keep a deadline."""
    context = ssl.create_default_context()
    context.sslsocket_class = _DeadlinedTLSSocket
    return context


def _port(parts: SplitResult) -> int:
    return parts.port or DEFAULT_PORTS[parts.scheme]


def exchange(
    method: str, url: str, data: bytes | None = None, headers: dict | None = None
) -> Answer:
    """One request, one answer, within the budget: a redirect is returned, never
    followed. Also for Oversight's own calls out (webhooks, Slack), which keep the
    same rules as an agent's."""
    parts, found = urlsplit(url), resolve(url)
    budget = target_budget()
    seconds, cap = budget.seconds, budget.max_bytes
    if parts.scheme == "https":
        connection = _PinnedTLS(parts.hostname, _port(parts), context=_tls())
    else:
        connection = _Pinned(parts.hostname, _port(parts))
    connection.found, connection.deadline = found, time.monotonic() + seconds
    try:
        try:
            connection.connect()
        except OSError as error:
            target_answered(False)
            raise Unsent(f"{method} {url}: {plain_reason(error)}") from error
        path = parts.path or "/"
        connection.request(
            method, f"{path}?{parts.query}" if parts.query else path, data, headers or {}
        )
        response = connection.getresponse()
        target_answered(response.status < 500)
        raw = response.read(cap + 1)  # One byte past the cap tells that there is more.
        if len(raw) > cap:
            raise OverBudget(f"{method} {url}: the answer is too large (over {cap:,} bytes)")
        return Answer(
            response.status, raw, response.getheader("ETag"), response.getheader("Location")
        )
    except TimeoutError as error:  # Every wait had the time left: the deadline passed.
        target_answered(False)
        raise OverBudget(
            f"{method} {url}: the target did not finish answering within {seconds:g} s"
        ) from error
    except (OSError, http.client.HTTPException) as error:
        target_answered(False)
        raise ExecutionFailed(f"{method} {url}: {plain_reason(error)}") from error
    finally:
        connection.close()


class HttpRequest(Action):
    name = "http.request"
    Arguments = HttpRequestArguments
    rollback_kind = Operation.RollbackKind.OUT_OF_BAND
    rollback_kinds = (Operation.RollbackKind.COMPENSATING, Operation.RollbackKind.OUT_OF_BAND)
    description = (
        "A mutating HTTP call to an allow-listed host, verified by a follow-up GET; "
        "compensated by the call named in compensate, if any (then rollback_kind is "
        "compensating), else out of band."
    )
    checks = (
        "Every URL is still allowed and resolves to an allowed address, and the optional "
        "precondition GET answers its status and JSON fields."
    )

    def rollback_kind_for(self, args: HttpRequestArguments) -> str:
        if args.compensate:
            return Operation.RollbackKind.COMPENSATING
        return Operation.RollbackKind.OUT_OF_BAND

    def deduplicates(self, args: HttpRequestArguments) -> bool:
        return urlsplit(args.url).netloc in settings.OVERSIGHT_HTTP_DEDUPLICATING_HOSTS

    def lane(self, arguments: dict, project_id: int) -> str:
        """The host the call goes to (its precondition and verify URLs are most often
        the same host's)."""
        try:
            return f"{self.name} {_host(arguments['url'])}"
        except (KeyError, TypeError, ValueError):  # Not a URL: the call fails on its own.
            return self.name

    def gist(self, args: HttpRequestArguments) -> str:
        return f"{args.method} {args.url}"

    def target(self, args: HttpRequestArguments) -> str:
        """The host the call goes to, as its lane names it. Calls to one host are listed
        together, but nothing is said of what they do together: Oversight cannot tell
        which of the host's resources each changes, nor how."""
        return f"host {_host(args.url)}"

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

    def preview(self, args: HttpRequestArguments, ctx: Context) -> Exchange:
        """The call as sent, and the verified resource now (a GET of the verify URL: the
        status and the verified fields only, which change only if the resource does)."""
        headers = [
            ["Idempotency-Key", ctx.operation.idempotency_key],
            ["Content-Type", "application/json"],
            [FENCING_HEADER, "the attempt's epoch"],
        ]
        if args.url == args.verify.url:
            headers.append(["If-Match", "the resource's ETag when the call is made, if any"])
        body = "" if args.body is None else json.dumps(args.body, indent=2, sort_keys=True)
        expected = args.verify
        try:
            answer = fetch(expected.url)
        except (ExecutionFailed, AddressRefused) as error:
            now, seen = str(error), {}  # it names the call: "GET <url>: why"
        else:
            now, seen = (
                f"GET {expected.url} answers {answer}",
                expected.seen(answer.status, answer.body)["fields"],
            )
        fields = [
            {"field": name, "now": json.dumps(seen.get(name)), "after": json.dumps(value)}
            for name, value in sorted(expected.json_fields.items())
        ]
        undo = f"{args.compensate.method} {args.compensate.url}" if args.compensate else ""
        return Exchange(args.method, args.url, headers, body, now, fields, undo)

    def precondition(self, args: HttpRequestArguments, ctx: Context) -> None:
        try:
            HttpRequestArguments.model_validate(args.model_dump(by_alias=True))
        except ValueError as error:
            raise PreconditionFailed(f"no longer allowed: {error}") from None
        try:  # Checked again at each connection; refused here, nothing has fired yet.
            for url in self._urls(args):
                resolve(url)
        except AddressRefused as error:
            raise PreconditionFailed(str(error)) from None
        if args.precondition:
            try:
                answer = fetch(args.precondition.url)
            except OverBudget as cut:  # Cut short, it cannot show that the state holds.
                raise PreconditionFailed(str(cut)) from None
            why = args.precondition.shortfall(answer)
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
        raise ExecutionFailed(f"{args.method} {args.url} answered {answer}")

    def verify(self, args: HttpRequestArguments, key: str, ctx: Context) -> Effect:
        try:
            answer = fetch(args.verify.url)  # Unreachable: raised, and retried later.
        except OverBudget as cut:
            # It reached the target and shows nothing of the resource; asked again, the
            # target would most likely overrun again, holding a worker as long.
            log.warning("http.request, operation %s: verification %s", ctx.operation.pk, cut)
            return Effect.UNCERTAIN
        if not args.verify.shortfall(answer):
            return Effect.APPLIED
        return Effect.ABSENT if self._unchanged(args, answer, ctx) else Effect.UNCERTAIN

    def compensate(self, args: HttpRequestArguments, key: str, ctx: Context) -> None:
        answer = fetch(args.verify.url)
        if answer.redirected:
            raise NothingToRollBack(f"GET {args.verify.url} answered {answer}: it shows nothing")
        if self._unchanged(args, answer, ctx):
            raise NothingToRollBack(f"GET {args.verify.url} shows the state from before the call")
        headers = {FENCING_HEADER: str(ctx.epoch)}
        ctx.confirm_lease()  # Again: the GET above may have taken a while.
        answer = send(args.compensate, f"{key}:compensate", headers)
        if not 200 <= answer.status < 300:
            raise ExecutionFailed(f"compensation {args.compensate.url} answered {answer}")

    @staticmethod
    def _urls(args: HttpRequestArguments) -> set[str]:
        calls = [args, args.verify, args.precondition, args.compensate]
        return {call.url for call in calls if call is not None}

    @staticmethod
    def _unchanged(args: HttpRequestArguments, answer: Answer, ctx: Context) -> bool:
        """Whether the verify URL shows the state from before the call. A redirect shows
        nothing of the resource: never "unchanged", so never read as "absent"."""
        before = ctx.intent.get("before")
        if before is None or answer.redirected:
            return False
        now = args.verify.seen(answer.status, answer.body)
        return now == {"status": before["status"], "fields": before["fields"]}

"""What the sync and async clients have in common: their options, the supervised-tool
decorator (its options are ``ToolOptions``), and every method of ``Core`` exposed through
the client's own driver."""

import inspect
import ssl
from collections.abc import Callable
from typing import Any, get_args

from oversight_client.calls import Endpoint
from oversight_client.core import Core
from oversight_client.steps import Steps
from oversight_client.tool_options import ToolOptions, taking_options

# Core's methods that the clients expose, driven (all of its public ones).
METHODS = [name for name in vars(Core) if not name.startswith("_")]


def returning(call: Callable[..., Any], method: Callable[..., Steps[Any]]) -> Callable[..., Any]:
    """``call`` with ``method``'s signature, returning what its steps return (for help())."""
    signature = inspect.signature(method)
    result = (get_args(signature.return_annotation) or [Any])[0]
    call.__signature__ = signature.replace(return_annotation=result)  # type: ignore[attr-defined]
    return call


class Client:
    """A client for one token. ``base_url`` is the server's root (``/api/v1`` is added);
    ``timeout`` is how long one answer may take (beyond a long poll's wait); a request
    failing on the way is retried ``retries`` times, ``backoff`` seconds doubling each
    time; ``wait_timeout`` is how long ``wait``, ``answer`` and tools wait for a person
    before they withdraw and raise ``WaitTimedOut`` (None: as long as it takes);
    ``max_waits`` is how many long polls the client sends at once, the others queueing
    for a turn (keep it below the server's ``OVERSIGHT_API_MAX_WAITS_PER_TOKEN``, 8 by
    default, shared by every client of the token; None: no cap); ``ssl_context``
    verifies an https server (default: the system's CAs)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 35,
        retries: int = 5,
        backoff: float = 0.5,
        wait_timeout: float | None = 900,
        max_waits: int | None = 6,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        base = base_url.rstrip("/")
        api = base if base.endswith("/api/v1") else f"{base}/api/v1"
        self._core = Core(Endpoint(api, token, timeout, retries, backoff), wait_timeout)
        self._transport = self._connect(ssl_context, max_waits)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in METHODS:
            setattr(cls, name, cls._expose(getattr(Core, name)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._core.endpoint.api!r})"

    @property
    def wait_timeout(self) -> float | None:
        """How long a call waits for a person, or for Oversight out of reach (seconds)."""
        return self._core.wait_timeout

    def _connect(self, context: ssl.SSLContext | None, max_waits: int | None) -> Any:
        """The transport this client's driver sends requests with."""
        raise NotImplementedError

    @staticmethod
    def _expose(method: Callable[..., Steps[Any]]) -> Callable[..., Any]:
        """``method`` of Core as this client's method (sync or async)."""
        raise NotImplementedError

    def _supervise(self, fn: Callable[..., Any], options: ToolOptions) -> Callable[..., Any]:
        """``fn`` as a supervised tool of this client (sync or async)."""
        raise NotImplementedError

    @taking_options
    def tool(self, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """A decorator that puts a function under oversight; its keywords are those of
        ``ToolOptions`` (``action``, ``rollback_kind`` and ``risk`` are proposed with
        each call), which every framework adapter's tool decorator takes too.

        The decorated function is called as ``tool(run_id, call_id, **arguments)``: it
        proposes ``action`` with ``arguments`` (``summary``, default the first line of the
        function's docstring, is shown to the reviewer) and waits for the decision
        (raising ``Rejected``, ``Expired``, ``WaitTimedOut``… as ``wait`` does). It
        returns the committed operation's ``output``, whoever executed it: for an action
        Oversight's workers execute, the function is not called.

        Otherwise the agent executes it: the operation is claimed (``executor`` names who,
        in the audit trail; default the token's name), its intent recorded, then
        ``fn(**arguments, idempotency_key=key)`` runs with the approved arguments (a
        reviewer may have edited them) and ``verify(arguments, key)`` re-reads the target,
        whether ``fn`` returned or raised. ``verify`` answers ``"applied"``, ``"absent"``
        (the effect did not happen and cannot happen later; a call that timed out and may
        still land is uncertain), ``"uncertain"``, True (applied), False (uncertain), or
        ``Observed(effect, output=…)`` with the output as read back from the target.

        - applied: reported, and ``fn``'s return value returned (what ``verify`` observed
          if ``fn`` raised: the effect is there all the same);
        - absent: reported, and ``Failed`` raised: nothing is undone, nothing was done;
        - uncertain: reported, then undone with ``undo(arguments, key)`` if given, else
          an alert halts the run for a person, and ``VerificationFailed`` raised.

        With ``AsyncOversight``, ``fn``, ``verify`` and ``undo`` may be coroutine
        functions. The lease (``lease_seconds``) is renewed every third of it while
        ``fn``, ``verify`` or ``undo`` runs (from a thread; with ``AsyncOversight``, from
        a task, which a function blocking the event loop blocks too). A lease lost
        meanwhile (the process was paused past it, Oversight refused the renewal) raises
        ``StaleState`` once the function returns, and nothing more is recorded; the next
        call with the same call_id takes over and verifies.

        Calling again with the same run_id and call_id never repeats an effect: a
        committed operation returns its stored output without calling ``fn``, and if an
        earlier attempt recorded its intent (and may have fired the effect) before it was
        interrupted, ``verify`` is asked first: applied commits with what it observed,
        uncertain goes to the rollback plan as above. Absent runs ``fn`` again under the
        same idempotency key only with ``deduplicates=True``: say so only if the target
        makes a late repeat harmless (it deduplicates on the key), since the earlier
        attempt may be alive, only slow, and still fire. Otherwise, or if the effect is
        still absent after ``fn`` ran again, it is uncertain: an alert halts the run for a
        person, and ``VerificationFailed`` is raised. The same goes for an ``undo`` an
        earlier attempt may still be running. If that attempt's lease still holds, the
        call waits for it to lapse, or for its outcome. If ``verify`` raises, the
        operation stays in flight for such a later call; if none comes, the server alerts
        a person once the lease has lapsed for ``OVERSIGHT_AGENT_GRACE_SECONDS``.
        """

        declared = ToolOptions(**options)

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            options = declared.of(fn)
            tool = self._supervise(fn, options)
            tool.options = options  # What it proposes with, for the framework adapters.
            return tool

        return decorate

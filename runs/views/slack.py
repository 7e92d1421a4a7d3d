"""Slack's side of the app: the interactivity callback (a button pressed in one of
Oversight's messages, a rejection's reason given in its dialog), and a person linking
their Slack user to their account.

A callback is Slack's only if it carries Slack's signature (HMAC-SHA256 with the app's
signing secret over ``v0:<timestamp>:<body>``) and its timestamp is within
``SIGNATURE_WINDOW`` of now: a forged one, or one replayed later, is refused (401) and
decides nothing. The presser is then the Oversight user their Slack user is linked to,
and what they press goes through the same services as the page: their role in the
project, the four-eyes rule, the arguments and the preview the message showed (a
target that changed since: "look again"), an irreversible operation only on its page
(the typed challenge). Whatever is refused, Slack shows the presser alone why (an
ephemeral message through the callback's ``response_url``); the channel's message
changes only once the item is decided (``runs.engine.slack``).

An unlinked presser is offered a link, for them alone and for ``LINK_SECONDS``: opened
while signed in to Oversight, it links that Slack user to that account, once.
"""

import hashlib
import hmac
import json
import logging
import threading
import time

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.core import signing
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from runs.actions import http
from runs.engine.mailtext import link
from runs.engine.slack import call
from runs.errors import OversightError
from runs.models import HumanRequest, SlackIdentity
from runs.models.operations import IRREVERSIBLE
from runs.services.decisions import decide
from runs.services.requests import answer
from runs.views.access import load_operation, load_request

log = logging.getLogger(__name__)
SIGNATURE_WINDOW = 300  # seconds, as Slack's documentation advises
LINK_SALT = "runs.slack.link"
LINK_SECONDS = 15 * 60
VIA = "slack"
REASON_BLOCK = "reason"


class Refusal(Exception):
    """What the presser is told, in Slack, when their press decides nothing."""


@login_not_required
@csrf_exempt  # Slack's signature stands in for the CSRF token: no browser posts here.
@require_POST
def interactivity(request: HttpRequest) -> HttpResponse:
    if not settings.OVERSIGHT_SLACK_SIGNING_SECRET:
        raise Http404
    if (refused := _unsigned(request)) is not None:
        return HttpResponse(refused, status=401, content_type="text/plain")
    try:
        payload = json.loads(request.POST["payload"])
        kind, team, slack_user = payload["type"], payload["team"]["id"], payload["user"]["id"]
    except (KeyError, TypeError, ValueError):
        return HttpResponse("Not a Slack interaction.", status=400, content_type="text/plain")
    identity = (
        SlackIdentity.objects.filter(team=team, slack_user=slack_user, user__is_active=True)
        .select_related("user")
        .first()
    )
    if kind == "block_actions":
        _pressed(payload, identity)
    elif kind == "view_submission":
        return _reason_given(payload, identity)
    return HttpResponse(status=200)


def _unsigned(request: HttpRequest) -> str | None:
    """Why the request is not Slack's, or None if it is."""
    stamp = request.headers.get("X-Slack-Request-Timestamp", "")
    if not stamp.isdigit() or abs(time.time() - int(stamp)) > SIGNATURE_WINDOW:
        return "The timestamp is missing or too old."
    signed = f"v0:{stamp}:".encode() + request.body
    secret = settings.OVERSIGHT_SLACK_SIGNING_SECRET.encode()
    expected = "v0=" + hmac.new(secret, signed, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, request.headers.get("X-Slack-Signature", "")):
        return "The signature is not Slack's."
    return None


def _pressed(payload: dict, identity: SlackIdentity | None) -> None:
    """A button of one of Oversight's messages: decide, or say why not."""
    action = (payload.get("actions") or [{}])[0]
    if action.get("action_id") == "open":  # A link to the page: Slack opens it.
        return
    reply_to = payload.get("response_url", "")
    if identity is None:
        _reply(reply_to, _link_offer(payload["team"]["id"], payload["user"]["id"]))
        return
    try:
        if action.get("action_id") == "reject":
            _ask_reason(payload, identity.user, action.get("value", ""))
            return
        done = _decide(identity.user, action.get("action_id", ""), action.get("value", ""))
    except Refusal as refusal:
        _reply(reply_to, f"Nothing was decided: {refusal}")
    else:
        _reply(reply_to, done)


def _decide(user, action: str, value: str, reason: str = "") -> str:
    """``user``'s press of ``action`` on the item ``value`` names; what was done, or
    ``Refusal``."""
    noun, pk, *seen = value.split(":")
    if not pk.isdigit() or noun not in ("operation", "request"):
        raise Refusal("this button is not one of Oversight's")
    try:
        if noun == "operation":
            return _on_operation(user, int(pk), action, seen, reason)
        return _on_request(user, int(pk), action, seen, reason)
    except Http404:
        raise Refusal(f"no {noun} {pk} in your projects") from None
    except PermissionDenied as error:
        raise Refusal(str(error) or "your role does not allow this") from None
    except (OversightError, ValueError, IndexError) as error:
        raise Refusal(str(error)) from None


def _on_operation(user, pk: int, action: str, seen: list[str], reason: str) -> str:
    operation = load_operation(user, pk, "decide_operation")
    arguments_hash, preview_hash = seen
    if action == "approve" and operation.rollback_kind in IRREVERSIBLE:
        page = link("operation", pk)
        raise Refusal(f"nothing can undo it: approve it on its page, <{page}|operation {pk}>")
    if action not in ("approve", "reject"):
        raise Refusal("this button is not one of Oversight's")
    decide(
        operation=operation,
        reviewer=user,
        kind=action,
        arguments_hash=arguments_hash,
        preview_hash=preview_hash,
        comment=reason,
        via=VIA,
    )
    operation.refresh_from_db()
    if action == "reject":
        return f"You rejected operation {pk}."
    if operation.status == operation.Status.PROPOSED:
        return f"You approved operation {pk}; it waits for another approval."
    return f"You approved operation {pk}."


def _on_request(user, pk: int, action: str, seen: list[str], reason: str) -> str:
    request = load_request(user, pk, "decide_operation")
    version, data = int(seen[0]), None
    kinds = {"sign_off": HumanRequest.AnswerKind.APPROVE, "choose": "choose", "reject": "reject"}
    if action not in kinds:
        raise Refusal("this button is not one of Oversight's")
    if action == "choose":
        data = request.choices[int(seen[1])]
    answer(
        request=request,
        reviewer=user,
        kind=kinds[action],
        version=version,
        data=data,
        comment=reason,
        via=VIA,
    )
    said = {"sign_off": "signed off", "choose": f"chose “{data}” for", "reject": "rejected"}
    return f"You {said[action]} request {pk}."


def _ask_reason(payload: dict, user, value: str) -> None:
    """A rejection needs its reason (the agent reads it): Slack asks for it in a
    dialog, whose submission (``_reason_given``) rejects."""
    noun, _, pk = value.partition(":")
    pk = pk.partition(":")[0]
    private = json.dumps({"value": value, "reply_to": payload.get("response_url", "")})
    view = {
        "type": "modal",
        "callback_id": "reject",
        "private_metadata": private,
        "title": {"type": "plain_text", "text": f"Reject {noun} {pk}"[:24]},
        "submit": {"type": "plain_text", "text": "Reject"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            {
                "type": "input",
                "block_id": REASON_BLOCK,
                "label": {"type": "plain_text", "text": "Reason (required): the agent reads it"},
                "element": {
                    "type": "plain_text_input",
                    "action_id": REASON_BLOCK,
                    "multiline": True,
                    "max_length": 2000,
                },
            }
        ],
    }
    try:
        call("views.open", {"trigger_id": payload.get("trigger_id", ""), "view": view})
    except Exception as error:
        log.warning("Slack: the reason's dialog for %s could not open: %s", value, error)
        raise Refusal("Slack did not open the dialog for the reason; press Reject again") from None


def _reason_given(payload: dict, identity: SlackIdentity | None) -> HttpResponse:
    """The rejection's dialog submitted: reject, or show why not in the dialog."""
    view = payload.get("view") or {}
    try:
        private = json.loads(view.get("private_metadata", ""))
        reason = view["state"]["values"][REASON_BLOCK][REASON_BLOCK]["value"] or ""
    except (KeyError, TypeError, ValueError):
        return HttpResponse("Not Oversight's dialog.", status=400, content_type="text/plain")
    if identity is None:
        return _in_dialog("Your Slack user is not linked to an Oversight account.")
    try:
        done = _decide(identity.user, "reject", private["value"], reason)
    except Refusal as refusal:
        return _in_dialog(str(refusal))
    _reply(private.get("reply_to", ""), done)
    return HttpResponse(status=200)


def _in_dialog(said: str) -> JsonResponse:
    return JsonResponse({"response_action": "errors", "errors": {REASON_BLOCK: said[:150]}})


def _reply(response_url: str, text: str) -> None:
    """Tell the presser alone (an ephemeral message), from a thread: Slack waits at
    most 3 s for the callback's answer, and this is only a courtesy."""
    if not response_url:
        return
    body = json.dumps({"response_type": "ephemeral", "replace_original": False, "text": text})
    headers = {"Content-Type": "application/json"}

    def send() -> None:
        try:
            http.exchange("POST", response_url, body.encode(), headers)
        except Exception as error:
            log.warning("Slack: a reply to a press was not sent: %s", error)

    threading.Thread(target=send, name="slack-reply", daemon=True).start()


def _link_offer(team: str, slack_user: str) -> str:
    token = signing.dumps({"team": team, "user": slack_user}, salt=LINK_SALT)
    minutes = LINK_SECONDS // 60
    return (
        "Your Slack user is not linked to an Oversight account, so nothing was decided. "
        f"<{link('slack-link', token)}|Link it>, signed in to Oversight (the link is yours "
        f"alone and lasts {minutes} minutes), then press again."
    )


@require_http_methods(["GET", "POST"])
def link_identity(request: HttpRequest, token: str) -> HttpResponse:
    """The link Slack offered: the signed-in person confirms that the Slack user is them."""
    try:
        slack = signing.loads(token, salt=LINK_SALT, max_age=LINK_SECONDS)
    except signing.BadSignature:
        context = {"problem": "This link is not valid any more: press a button in Slack again."}
        return render(request, "runs/slack_link.html", context, status=400)
    context = {"slack": slack}
    if request.method == "POST":
        taken = SlackIdentity.objects.filter(team=slack["team"], slack_user=slack["user"])
        if taken.exclude(user=request.user).exists():
            context["problem"] = "This Slack user is linked to another account."
            return render(request, "runs/slack_link.html", context, status=409)
        try:
            with transaction.atomic():
                SlackIdentity.objects.update_or_create(
                    user=request.user,
                    defaults={"team": slack["team"], "slack_user": slack["user"]},
                )
        except IntegrityError:  # Linked to another account a moment ago.
            context["problem"] = "This Slack user is linked to another account."
            return render(request, "runs/slack_link.html", context, status=409)
        messages.success(request, "Your Slack user is linked: its presses act as you.")
        return redirect("preferences")
    return render(request, "runs/slack_link.html", context)


@require_POST
def unlink_identity(request: HttpRequest) -> HttpResponse:
    SlackIdentity.objects.filter(user=request.user).delete()
    messages.success(request, "Your Slack user is unlinked: its presses decide nothing.")
    return redirect("preferences")

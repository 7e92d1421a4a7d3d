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

An unlinked presser is asked, in a dialog, for the one-time code their account page
gives them (``SlackLinkCode``): Slack sends what they type signed with their Slack
user's id, which links that Slack user to the code's account. The proof runs from the
account to Slack: a link made in Slack and opened by another person would let its maker
act as that person.
"""

import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from runs.actions import http
from runs.clock import db_now
from runs.engine.mailtext import link
from runs.engine.slack import call
from runs.errors import OversightError
from runs.models import HumanRequest, SlackIdentity, SlackLinkCode
from runs.models.operations import IRREVERSIBLE
from runs.services.decisions import decide
from runs.services.requests import answer
from runs.views.access import load_operation, load_request
from runs.views.home import preferences_page

log = logging.getLogger(__name__)
SIGNATURE_WINDOW = 300  # seconds, as Slack's documentation advises
LINK_MINUTES = 15
VIA = "slack"
REASON_BLOCK = "reason"
CODE_BLOCK = "code"


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
        if not all(_slack_id(said) for said in (team, slack_user)):
            raise ValueError(team, slack_user)
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
        view = payload.get("view")
        if isinstance(view, dict) and view.get("callback_id") == "link":
            return _code_given(payload, team, slack_user)
        return _reason_given(payload, identity)
    return HttpResponse(status=200)


def _slack_id(said) -> bool:
    """A Slack id as Slack writes them (T…, U…, W…): letters and digits."""
    return isinstance(said, str) and 0 < len(said) <= 32 and said.isascii() and said.isalnum()


def _unsigned(request: HttpRequest) -> str | None:
    """Why the request is not Slack's, or None if it is."""
    stamp = request.headers.get("X-Slack-Request-Timestamp", "")
    fresh = stamp.isascii() and stamp.isdigit() and len(stamp) <= 12
    if not fresh or abs(time.time() - int(stamp)) > SIGNATURE_WINDOW:
        return "The timestamp is missing or not within five minutes of now."
    signed = f"v0:{stamp}:".encode() + request.body
    secret = settings.OVERSIGHT_SLACK_SIGNING_SECRET.encode()
    expected = b"v0=" + hmac.new(secret, signed, hashlib.sha256).hexdigest().encode()
    given = request.headers.get("X-Slack-Signature", "").encode("utf-8", "replace")
    if not hmac.compare_digest(expected, given):
        return "The signature is not Slack's."
    return None


def _pressed(payload: dict, identity: SlackIdentity | None) -> None:
    """A button of one of Oversight's messages: decide, or say why not."""
    reply_to = payload.get("response_url")
    reply_to = reply_to if isinstance(reply_to, str) else ""
    try:
        action_id, value = _action(payload)
        if action_id == "open":  # A link to the page: Slack opens it.
            return
        if identity is None:
            _ask_code(payload)
            return
        if action_id == "reject":
            _ask_reason(payload, value)
            return
        done = _decide(identity.user, action_id, value)
    except Refusal as refusal:
        _reply(reply_to, f"Nothing was decided: {refusal}")
    else:
        _reply(reply_to, done)


def _action(payload: dict) -> tuple[str, str]:
    """The pressed button's ``action_id`` and ``value``, or ``Refusal``."""
    actions = payload.get("actions")
    if not (isinstance(actions, list) and actions and isinstance(actions[0], dict)):
        raise Refusal("this button is not one of Oversight's")
    action_id, value = actions[0].get("action_id"), actions[0].get("value", "")
    if not (isinstance(action_id, str) and isinstance(value, str)):
        raise Refusal("this button is not one of Oversight's")
    return action_id, value


def _decide(user, action: str, value: str, reason: str = "") -> str:
    """``user``'s press of ``action`` on the item ``value`` names; what was done, or
    ``Refusal``."""
    parts = value.split(":")
    noun, pk, seen = parts[0], parts[1] if len(parts) > 1 else "", parts[2:]
    expected = {"operation": 2, "request": 1 + action.startswith("choose-")}.get(noun)
    if not (pk.isascii() and pk.isdigit() and len(pk) <= 18) or len(seen) != expected:
        raise Refusal("this button is not one of Oversight's")
    try:
        if noun == "operation":
            return _on_operation(user, int(pk), action, seen, reason)
        return _on_request(user, int(pk), action, seen, reason)
    except Http404:
        raise Refusal(f"no {noun} {pk} in your projects") from None
    except PermissionDenied as error:
        raise Refusal(str(error) or "your role does not allow this") from None
    except OversightError as error:
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
    if not all(part.isascii() and part.isdigit() and len(part) <= 9 for part in seen):
        raise Refusal("this button is not one of Oversight's")
    version, data = int(seen[0]), None
    if action.startswith("choose-"):
        index = int(seen[1])
        if request.kind != HumanRequest.Kind.CHOICE or index >= len(request.choices):
            raise Refusal("this button is not one of Oversight's")
        kind, data, said = HumanRequest.AnswerKind.CHOOSE, request.choices[index], "chose"
    elif action in ("sign_off", "reject"):
        kind = HumanRequest.AnswerKind.APPROVE if action == "sign_off" else action
        said = "signed off" if action == "sign_off" else "rejected"
    else:
        raise Refusal("this button is not one of Oversight's")
    answer(
        request=request,
        reviewer=user,
        kind=kind,
        version=version,
        data=data,
        comment=reason,
        via=VIA,
    )
    if data is not None:
        return f"You chose “{data}” for request {pk}."
    return f"You {said} request {pk}."


def _ask_reason(payload: dict, value: str) -> None:
    """A rejection needs its reason (the agent reads it): Slack asks for it in a
    dialog, whose submission (``_reason_given``) rejects."""
    noun, pk = [*value.split(":"), ""][:2]
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
    _open_dialog(payload, view, "the reason's dialog")


def _open_dialog(payload: dict, view: dict, what: str) -> None:
    try:
        call("views.open", {"trigger_id": str(payload.get("trigger_id", "")), "view": view})
    except Exception as error:
        log.warning("Slack: %s could not open: %s", what, error)
        raise Refusal(f"Slack did not open {what}; press again") from None


def _reason_given(payload: dict, identity: SlackIdentity | None) -> HttpResponse:
    """The rejection's dialog submitted: reject, or show why not in the dialog."""
    view = payload.get("view")
    try:
        private = json.loads(view["private_metadata"])
        value, reason = private["value"], _typed(view, REASON_BLOCK)
        if not isinstance(value, str):
            raise TypeError(value)
    except (KeyError, TypeError, ValueError):
        return HttpResponse("Not Oversight's dialog.", status=400, content_type="text/plain")
    if identity is None:
        return _in_dialog("Your Slack user is not linked to an Oversight account.")
    try:
        done = _decide(identity.user, "reject", value, reason)
    except Refusal as refusal:
        return _in_dialog(REASON_BLOCK, str(refusal))
    reply_to = private.get("reply_to")
    _reply(reply_to if isinstance(reply_to, str) else "", done)
    return HttpResponse(status=200)


def _typed(view, block: str) -> str:
    """What was typed in the dialog's input ``block`` ("" for nothing); raises
    ``KeyError`` or ``TypeError`` if the dialog is not one of Oversight's."""
    typed = view["state"]["values"][block][block]["value"] or ""
    if not isinstance(typed, str):
        raise TypeError(typed)
    return typed


def _in_dialog(block: str, said: str) -> JsonResponse:
    return JsonResponse({"response_action": "errors", "errors": {block: said[:150]}})


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


def _ask_code(payload: dict) -> None:
    """An unlinked presser: Slack asks them for their account page's one-time code."""
    view = {
        "type": "modal",
        "callback_id": "link",
        "title": {"type": "plain_text", "text": "Link your Slack user"},
        "submit": {"type": "plain_text", "text": "Link"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            {
                "type": "section",
                "text": {
                    "type": "plain_text",
                    "text": "Your Slack user is not linked to an Oversight account, so nothing "
                    "was decided. On your Oversight account page, choose Get a code under "
                    "Slack, type it here, then press again.",
                },
            },
            {
                "type": "input",
                "block_id": CODE_BLOCK,
                "label": {"type": "plain_text", "text": "Code from your account page"},
                "element": {"type": "plain_text_input", "action_id": CODE_BLOCK, "max_length": 20},
            },
        ],
    }
    _open_dialog(payload, view, "the dialog for your code")


def _code_given(payload: dict, team: str, slack_user: str) -> HttpResponse:
    """The code typed in Slack's dialog, signed by Slack with the typer's id: link the
    Slack user to the code's account, and use the code up."""
    try:
        typed = _typed(payload.get("view"), CODE_BLOCK)
    except (KeyError, TypeError):
        return HttpResponse("Not Oversight's dialog.", status=400, content_type="text/plain")
    digest = hashlib.sha256(typed.strip().lower().replace(" ", "").encode()).hexdigest()
    with transaction.atomic():
        code = (
            SlackLinkCode.objects.select_for_update()
            .filter(digest=digest, expires_at__gt=db_now(), user__is_active=True)
            .select_related("user")
            .first()
        )
        if code is None:
            return _in_dialog(CODE_BLOCK, "This code is not valid (or no longer): get another.")
        taken = SlackIdentity.objects.filter(team=team, slack_user=slack_user)
        if taken.exclude(user=code.user).exists():
            return _in_dialog(CODE_BLOCK, "Your Slack user is linked to another account.")
        SlackIdentity.objects.update_or_create(
            user=code.user, defaults={"team": team, "slack_user": slack_user}
        )
        code.delete()
    said = f"Linked: your presses in Slack act as {code.user.get_username()}. Press again."
    return JsonResponse({"response_action": "update", "view": _notice("Linked", said)})


def _notice(title: str, said: str) -> dict:
    return {
        "type": "modal",
        "title": {"type": "plain_text", "text": title},
        "close": {"type": "plain_text", "text": "Close"},
        "blocks": [{"type": "section", "text": {"type": "plain_text", "text": said}}],
    }


@require_POST
def link_code(request: HttpRequest) -> HttpResponse:
    """A one-time code for the signed-in person to type into Slack, shown on this
    answer only (its sha256 is kept, for ``LINK_MINUTES``); any earlier one is void."""
    if not settings.OVERSIGHT_SLACK_BOT_TOKEN:
        raise Http404("Slack is not set up here.")
    code = secrets.token_hex(5)
    SlackLinkCode.objects.update_or_create(
        user=request.user,
        defaults={
            "digest": hashlib.sha256(code.encode()).hexdigest(),
            "expires_at": db_now() + timedelta(minutes=LINK_MINUTES),
        },
    )
    return preferences_page(request, slack_code=code)


@require_POST
def unlink_identity(request: HttpRequest) -> HttpResponse:
    SlackIdentity.objects.filter(user=request.user).delete()
    messages.success(request, "Your Slack user is unlinked: its presses decide nothing.")
    return redirect("preferences")

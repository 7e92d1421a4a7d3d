"""What a waiting operation or request looks like in Slack (Block Kit), and what its
message says once decided.

An operation's message shows its one-line effect, its risk, agent, run goal and
deadline, the preview of its effect as a reviewer's page shows it, and a link. Its
Approve button carries the arguments hash and the preview's hash that the message
shows: a press is decided on exactly that (``runs.views.slack``), and refused with
"look again" if the target has changed since. Where a press may not decide, the
message has a button that opens the page instead: an irreversible operation (its
approval takes the typed challenge), a preview too long for a message, a question or a
data request (answered in a form).

Everything from the agent or the target is escaped for Slack's mrkdwn (``&``, ``<``,
``>``), in the notification's text too, and shown ``verbatim``: Slack would turn
``<…|…>`` into links, ``<!channel>`` into a mention of everyone, and a bare URL into a
link.
"""

import json

from runs.engine.mailtext import link
from runs.models import HumanRequest, Operation, SlackMessage
from runs.models.operations import IRREVERSIBLE
from runs.services.previews import preview_hash, preview_of

# A section's text may hold 3,000 characters; a preview longer than this is not shown
# in part (a press would decide on what was not seen): the message opens the page.
PREVIEW_MOST = 2500
TEXT_MOST = 500  # of a goal, a summary or a prompt: the page has the rest


def escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def quoted(text: str, most: int = TEXT_MOST) -> str:
    cut = text if len(text) <= most else f"{text[: most - 1]}…"
    return escaped(cut)


def waiting(message: SlackMessage) -> dict:
    """The message of an item that waits, with its buttons."""
    item = message.item
    if isinstance(item, Operation):
        return _operation(item)
    return _request(item)


def ended(message: SlackMessage) -> dict:
    """The message once decided: what it was, and how it ended; no buttons."""
    item = message.item
    title = _title(item)
    return {
        "text": f"{title}: {escaped(message.outcome)}",
        "blocks": [
            _section(f"*{_linked(item, title)}*\n{quoted(_gist(item))}"),
            _section(f":white_check_mark: {quoted(message.outcome, 300)}"),
        ],
    }


def _operation(operation: Operation) -> dict:
    run = operation.run
    preview = preview_of(operation)
    shown = _preview_text(preview)
    fits = len(shown) <= PREVIEW_MOST
    blocks = [
        _section(f"*{_linked(operation, _title(operation))}*: {quoted(operation.gist)}"),
        _facts(
            ("Risk", operation.get_risk_display()),
            ("Agent", quoted(run.session.agent, 100)),
            ("Run goal", quoted(run.goal)),
            ("Deadline", _when(operation.expires_at)),
        ),
    ]
    if operation.summary:
        blocks.append(_section(f"> {quoted(operation.summary)}"))
    if shown:
        said = f"```{escaped(shown)}```" if fits else "_The preview is too long for Slack._"
        blocks.append(_section(f"*What it would change*\n{said}"))
    value = f"operation:{operation.pk}:{operation.arguments_hash}:{preview_hash(preview)}"
    if operation.rollback_kind in IRREVERSIBLE or not fits:
        why = "Nothing can undo it" if fits else "Its preview is too long for Slack"
        approve = _open_button("Open to approve", operation)
        blocks.append(_context(f"{why}: approve it on its page."))
    else:
        approve = _button("Approve", "approve", value, style="primary")
    blocks.append(_actions(approve, _button("Reject…", "reject", value, style="danger")))
    return {"text": f"{_title(operation)} waits: {quoted(operation.gist)}", "blocks": blocks}


def _request(request: HumanRequest) -> dict:
    run = request.run
    value = f"request:{request.pk}:{request.version}"
    reject = _button("Reject…", "reject", value, style="danger")
    if request.kind == HumanRequest.Kind.SIGN_OFF:
        buttons = [_button("Sign off", "sign_off", value, style="primary"), reject]
    elif request.kind == HumanRequest.Kind.CHOICE:
        buttons = [
            _button(choice[:75], f"choose-{index}", f"{value}:{index}")
            for index, choice in enumerate(request.choices)
        ] + [reject]
    else:
        buttons = [_open_button("Open to answer", request), reject]
    blocks = [
        _section(f"*{_linked(request, _title(request))}*\n> {quoted(request.prompt)}"),
        _facts(
            ("Agent", quoted(run.session.agent, 100)),
            ("Run goal", quoted(run.goal)),
            ("Deadline", _when(request.expires_at)),
        ),
        *[_actions(*buttons[start : start + 25]) for start in range(0, len(buttons), 25)],
    ]
    return {"text": f"{_title(request)} waits: {quoted(request.prompt, 200)}", "blocks": blocks}


def _preview_text(preview: dict | None) -> str:
    """The preview as text, all of it ("" for none)."""
    if preview is None:
        return ""
    if preview["kind"] == "file":
        return "\n".join(mark + text for mark, text in preview["lines"]) or preview["state"]
    if preview["kind"] == "unavailable":
        return f"No preview: {preview['why']}"
    return json.dumps({k: v for k, v in preview.items() if k != "kind"}, indent=1)


def _title(item: Operation | HumanRequest) -> str:
    if isinstance(item, Operation):
        return f"Operation {item.pk}"
    return f"{item.get_kind_display()} {item.pk}"


def _gist(item: Operation | HumanRequest) -> str:
    return item.gist if isinstance(item, Operation) else item.prompt


def _url(item: Operation | HumanRequest) -> str:
    return link("operation" if isinstance(item, Operation) else "request", item.pk)


def _linked(item: Operation | HumanRequest, text: str) -> str:
    return f"<{_url(item)}|{escaped(text)}>"


def _when(at) -> str:
    """A time each reader sees in their own time zone (Slack's date formatting)."""
    return f"<!date^{int(at.timestamp())}^{{date_short_pretty}} {{time}}|{at.isoformat()}>"


def _mrkdwn(text: str) -> dict:
    """Text in Slack's markup, ``verbatim``: Slack makes no links or mentions of its own
    of what an agent wrote (a bare URL, a channel's name); only ours are links."""
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def _section(text: str) -> dict:
    return {"type": "section", "text": _mrkdwn(text)}


def _facts(*facts: tuple[str, str]) -> dict:
    return {"type": "section", "fields": [_mrkdwn(f"*{name}*\n{said}") for name, said in facts]}


def _context(text: str) -> dict:
    return {"type": "context", "elements": [_mrkdwn(text)]}


def _actions(*elements: dict) -> dict:
    return {"type": "actions", "elements": list(elements)}


def _button(text: str, action: str, value: str, style: str | None = None) -> dict:
    button = {
        "type": "button",
        "text": {"type": "plain_text", "text": text},
        "action_id": action,
        "value": value,
    }
    return button | ({"style": style} if style else {})


def _open_button(text: str, item: Operation | HumanRequest) -> dict:
    button = {"type": "button", "text": {"type": "plain_text", "text": text}}
    return button | {"action_id": "open", "url": _url(item)}

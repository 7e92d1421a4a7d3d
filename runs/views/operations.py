import difflib
import json

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from runs import queue as waiting
from runs.actions.registry import parse
from runs.errors import InvalidInput, OversightError, PreviewChanged
from runs.forms import REJECTING, DecisionForm, EditForm
from runs.models import Decision, Operation
from runs.models.operations import LEASED
from runs.models.workers import WorkerPause
from runs.paused_lanes import PausedLane, operator_pauses, paused_lanes
from runs.permissions import has_project_perm, own_interest
from runs.policies import explain
from runs.preview_changes import digest, what_changed
from runs.services.decisions import decide
from runs.services.previews import preview_hash, preview_of, stored_preview
from runs.services.repeats import made_before
from runs.siblings import waiting_with
from runs.views.access import load_operation
from runs.views.moving_on import move_on
from runs.views.requeues import requeue_links

RECENT_MESSAGES = 10
# The decisions a page offers, one form each: one Reject, whose reason the agent reads
# (#34). A post of kind reply, from a script or a page from before, is still recorded.
DECISION_KINDS = [Decision.Kind.APPROVE, Decision.Kind.EDIT, Decision.Kind.REJECT]
EDITOR_ID = "editor-%s"  # The edit's first step, on a page with the approval of the edit.
# A worker still has these to carry out on the target (the effect, its verification,
# or the rollback after a failed one), so a pause of its lane holds them up.
HELD_BY_A_PAUSE = {
    Operation.Status.APPROVED,
    Operation.Status.IN_FLIGHT,
    Operation.Status.VERIFY_FAILED,
}


@require_GET
def detail(request: HttpRequest, pk: int) -> HttpResponse:
    operation = load_operation(request.user, pk)
    return _render(request, operation)


@require_POST
def decide_view(request: HttpRequest, pk: int) -> HttpResponse:
    operation = load_operation(request.user, pk, "decide_operation")
    form = DecisionForm(
        request.POST, operation=operation, auto_id=_auto_id(request.POST.get("kind"))
    )
    seen = None  # What the reviewer's page showed, if the target shows another now.
    if form.is_valid():
        data = form.cleaned_data
        try:
            decide(
                operation=operation,
                reviewer=request.user,
                kind=data["kind"],
                arguments_hash=data["arguments_hash"],
                comment=data["comment"],
                arguments=data["arguments"],
                preview_hash=data["preview_hash"],
            )
        except PreviewChanged:
            seen = request.POST.get("seen", "")
        except InvalidInput as error:
            for problem in str(error).split("; "):
                form.add_error(_field_of(problem), problem)
        except OversightError as error:
            form.add_error(None, str(error))
        else:
            operation.refresh_from_db()
            return move_on(request, operation, _confirmation(data["kind"], operation))
    edit = (
        _edit_in(request.POST, operation) if form.data.get("kind") == Decision.Kind.EDIT else None
    )
    return _render(request, operation, bound=form, status=400, edit=edit, seen=seen)


@require_POST
def edit_view(request: HttpRequest, pk: int) -> HttpResponse:
    """An edit's first step: the page with the effect of the edited arguments, read
    from the target now, and the form that approves exactly those arguments, bound to
    that preview (what the decision keeps). Nothing is recorded here; an edit the
    action refuses is shown again with the reason."""
    operation = load_operation(request.user, pk, "decide_operation")
    edit = EditForm(request.POST, operation=operation, auto_id=EDITOR_ID)
    return _render(request, operation, status=200 if edit.is_valid() else 400, edit=edit)


def _edit_in(data, operation: Operation) -> EditForm:
    """The edit a refused approval carried, checked again against the operation as it
    is now: previewed anew if it still holds, shown with its reason if not."""
    fields = {"arguments": data.get("arguments", ""), "arguments_hash": operation.arguments_hash}
    return EditForm(fields, operation=operation, auto_id=EDITOR_ID)


@require_GET
def outcome(request: HttpRequest, pk: int) -> HttpResponse:
    """The live status panel, polled by htmx (with the version it shows) until the
    operation reaches an end: an unchanged operation (and pause of its lane) answers
    204, and nothing is swapped or announced."""
    operation = load_operation(request.user, pk)
    paused, held = _paused(operation), _held(operation)
    shown = _panel_version(operation, paused, held)
    if request.GET.get("version") == shown:
        return HttpResponse(status=204)
    context = {"operation": operation, "paused": paused, "held": held, "panel_version": shown}
    return render(request, "runs/operation.html#outcome", context)


def _paused(operation: Operation) -> PausedLane | None:
    """The pause of the lane this operation waits in, if a live worker has it paused
    (the one that tries again soonest); read only for an operation a worker still has
    to carry out: the page of one that waits on no worker pays no query for it."""
    if operation.executor != Operation.Executor.SERVER or operation.status not in HELD_BY_A_PAUSE:
        return None
    return next((pause for pause in paused_lanes() if pause.lane == operation.lane), None)


def _held(operation: Operation) -> WorkerPause | None:
    """The operator's pause that keeps workers from claiming this operation (of every
    lane first, else of its own), if any; read only for an operation of Oversight's
    that a worker would claim: approved, or in flight or rolling back with its lease
    lapsed (to take it over, as after a restore). One a worker holds goes on to its end."""
    if operation.executor != Operation.Executor.SERVER or not _claimable(operation):
        return None
    return next(iter(operator_pauses(WorkerPause.EVERY_LANE, operation.lane)), None)


def _claimable(operation: Operation) -> bool:
    if operation.status == Operation.Status.APPROVED:
        return True
    lapsed = operation.lease_expires_at is not None and operation.lease_expires_at <= timezone.now()
    return operation.status in LEASED and lapsed


def _panel_version(
    operation: Operation, paused: PausedLane | None, held: WorkerPause | None
) -> str:
    """What the status panel shows, as the token it polls with: the operation's version,
    the next trial of its lane's pause, which starts, ends or moves on while the
    operation waits unchanged, and the operator's pause holding it."""
    shown = str(operation.version)
    if paused is not None:
        shown += f"-{paused.retry_at.timestamp():.0f}"
    if held is not None:
        shown += f"-held{held.pk}"
    return shown


def _render(
    request,
    operation: Operation,
    bound: DecisionForm | None = None,
    status: int = 200,
    edit: EditForm | None = None,
    seen: str | None = None,
):
    """The operation's page; ``bound`` is a decision refused, ``edit`` an edit to
    preview (valid) or refused (not), ``seen`` the digest of the preview the refused
    decision was made on, when the target shows another now."""
    run = operation.run
    edited = edit.cleaned_data["arguments"] if edit is not None and edit.is_valid() else None
    if edited is None:
        preview, seen_by = _preview(operation)
    else:  # What the reviewer approves next, if they do.
        preview, seen_by = preview_of(operation, edited), None
    bound_kind, bound_errors = _refusal(bound, None if edited is not None else edit)
    decisions = list(operation.decisions.select_related("reviewer"))
    approvers = list(operation.decisions.counted_approvals().select_related("reviewer"))
    approval_rule, risk_raised_by = explain(operation)
    paused, held = _paused(operation), _held(operation)
    shown = preview_hash(preview) if not seen_by else ""
    context = {
        "operation": operation,
        "paused": paused,
        "held": held,
        "panel_version": _panel_version(operation, paused, held),
        "run": run,
        "messages_recent": list(reversed(run.messages.order_by("-seq")[:RECENT_MESSAGES])),
        "arguments": _folded(operation.arguments),
        "arguments_diff": _diff(operation.proposed_arguments, operation.arguments),
        "plan": _plan(operation),
        "preview": preview,
        "preview_seen_by": seen_by,
        "siblings": waiting_with(operation),
        "approval_rule": approval_rule,
        "risk_raised_by": risk_raised_by,
        "decisions": decisions,
        "approvers": approvers,
        "checkpoints": operation.checkpoints.select_related("actor_user").order_by("seq"),
        **_deciding(request.user, operation, preview, shown, approvers, bound, edit),
        "seen": digest(preview) if not seen_by else "",
        "preview_changed": what_changed(seen, preview) if seen is not None else [],
        "editing": edited is not None,
        "editor": _editor(operation, edit) if edited is not None else None,
        "edit_diff": _diff(operation.arguments, edited) if edited is not None else [],
        "next_operation": waiting.next_waiting(request.user, operation),
        "previous_operation": waiting.next_waiting(request.user, operation, back=True),
        "bound_kind": bound_kind,
        "bound_errors": bound_errors,
        "made_before": made_before(operation),
        **requeue_links(request.user, operation),
    }
    return render(request, "runs/operation.html", context, status=status)


def _deciding(reviewer, operation, preview, shown, approvers, bound, edit) -> dict:
    """What the page offers ``reviewer`` to decide with: the forms (bound to the preview
    ``shown``, its hash), whether they may decide now (the decision bar is shown), the
    approval the bar submits (the same as the page's), and whether the preview says the
    effect cannot be made now (``doomed``: rejecting comes first)."""
    can_decide = has_project_perm(reviewer, operation.project, "decide_operation")
    conflict = own_interest(operation, reviewer)
    already_approved = any(d.reviewer_id == reviewer.pk for d in approvers)
    doomed = _doomed(preview)
    found = _forms(operation, bound, shown, edit, doomed)
    editing = edit is not None and edit.is_valid()
    return {
        "can_decide": can_decide,
        "own_interest": conflict,
        "already_approved": already_approved,
        "forms": found,
        "decidable": operation.status == Operation.Status.PROPOSED
        and can_decide
        and not conflict
        and not already_approved,
        "approval": found[Decision.Kind.EDIT if editing else Decision.Kind.APPROVE],
        "doomed": doomed,
    }


def _refusal(bound: DecisionForm | None, edit: EditForm | None) -> tuple[str | None, list]:
    """Which form was refused (its kind), and why if not for one field: the decision's,
    or else the edit's."""
    if bound is not None:
        return bound.data.get("kind"), bound.non_field_errors()
    if edit is not None:
        return Decision.Kind.EDIT, edit.non_field_errors()
    return None, []


def _preview(operation: Operation) -> tuple[dict | None, Decision | None]:
    """The effect's preview: read from the live target while the operation awaits a
    decision; afterwards, as the last reviewer who decided was shown it (and who)."""
    if operation.status == Operation.Status.PROPOSED:
        return preview_of(operation), None
    decision = operation.decisions.exclude(preview_sha256="").select_related("reviewer").last()
    if decision is None:
        return None, None
    return stored_preview(decision.preview_sha256), decision


def _doomed(preview: dict | None) -> bool:
    """The preview says the effect cannot be made as things stand: it could not be read,
    the source cannot fund the transfer, the file is not the one the write expects, or
    the mail would be refused. Rejecting is then what the page offers first."""
    if preview is None:
        return False
    return (
        preview["kind"] == "unavailable"
        or (preview["kind"] == "balances" and not preview.get("holds", True))
        or (preview["kind"] == "file" and not preview.get("as_expected", True))
        or (preview["kind"] == "message" and bool(preview.get("refused")))
    )


def _forms(
    operation: Operation,
    bound: DecisionForm | None,
    shown: str,
    edit: EditForm | None,
    doomed: bool,
) -> dict[str, forms.Form]:
    """One form per kind of decision, each bound to the arguments and the preview
    (``shown``, its hash) on the page; a form refused is shown again with what the
    reviewer wrote, bound to what the page shows now. An edit is previewed before it
    is approved: its form here is the editor, or, once previewed, the approval of the
    edited arguments alone. Rejecting comes first when the effect is ``doomed``."""
    if edit is not None and edit.is_valid():
        return {Decision.Kind.EDIT: _approve_edit(operation, edit, bound, shown)}
    found = {}
    for kind in DECISION_KINDS:
        initial = {"kind": kind, "arguments_hash": operation.arguments_hash, "preview_hash": shown}
        found[kind] = DecisionForm(initial=initial, operation=operation, auto_id=_auto_id(kind))
    found[Decision.Kind.EDIT] = _editor(operation, edit)
    if bound is not None and bound.data.get("kind") in found.keys() - {Decision.Kind.EDIT}:
        bound.data = bound.data.copy()
        bound.data["preview_hash"] = shown
        found[bound.data["kind"]] = bound
    if doomed:
        found = {Decision.Kind.REJECT: found.pop(Decision.Kind.REJECT), **found}
    return found


def _editor(operation: Operation, edit: EditForm | None = None) -> EditForm:
    """The form that previews an edit: the reviewer's text as they sent it, bound to the
    arguments the page shows now, or the operation's arguments to start from."""
    if edit is None:
        initial = {
            "arguments_hash": operation.arguments_hash,
            "arguments": pretty_json(operation.arguments),
        }
        return EditForm(initial=initial, operation=operation, auto_id=EDITOR_ID)
    edit.data = edit.data.copy()
    edit.data["arguments_hash"] = operation.arguments_hash
    return edit


def _approve_edit(
    operation: Operation, edit: EditForm, bound: DecisionForm | None, shown: str
) -> DecisionForm:
    """The approval of the edited arguments, bound to the preview of their effect
    (``shown``) and to the arguments the edit's diff is shown against, the current
    ones; a refused one is shown again, bound to what the page shows now."""
    if bound is not None and bound.data.get("kind") == Decision.Kind.EDIT:
        bound.data = bound.data.copy()
        bound.data["arguments_hash"] = operation.arguments_hash
        bound.data["preview_hash"] = shown
        return bound
    initial = {
        "kind": Decision.Kind.EDIT,
        "arguments_hash": operation.arguments_hash,
        "preview_hash": shown,
        "arguments": pretty_json(edit.cleaned_data["arguments"]),
    }
    return DecisionForm(initial=initial, operation=operation, auto_id=_auto_id(Decision.Kind.EDIT))


FOLD_CHARS = 240


def _folded(arguments: dict) -> list[dict]:
    """Each top-level argument as pretty JSON; long values get a one-line summary and
    fold away, so the page stays readable and nothing is hidden."""
    rows = []
    for key, value in sorted(arguments.items()):
        text = pretty_json(value)
        long = len(text) > FOLD_CHARS or text.count("\n") > 12
        rows.append(
            {"key": key, "text": text, "summary": text[:80].replace("\n", " ") if long else ""}
        )
    return rows


def _auto_id(kind: str | None) -> str:
    """Several forms share one page: each gets its own element ids."""
    return f"{kind if kind in DECISION_KINDS else 'decision'}-%s"


def _field_of(problem: str) -> str:
    """Where a refusal from the services belongs on the form."""
    if problem.startswith(("arguments", "rollback_kind")):
        return "arguments"
    return "comment"


def _confirmation(kind: str, operation: Operation) -> str:
    if kind in REJECTING:
        return "Rejected; the agent reads your reason."
    if operation.status == Operation.Status.PROPOSED:
        return "Your approval is recorded; another reviewer must approve too."
    return (
        "Approved; a worker carries it out now."
        if operation.executor == "server"
        else ("Approved; the agent carries it out now.")
    )


def pretty_json(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _diff(before: dict, after: dict) -> list[tuple[str, str]]:
    """The reviewer's edit as (kind, line) pairs: "+" added, "-" removed, " " context."""
    if before == after:
        return []
    lines = difflib.unified_diff(
        pretty_json(before).splitlines(), pretty_json(after).splitlines(), lineterm="", n=2
    )
    return [(line[0], line[1:]) for line in list(lines)[2:] if not line.startswith("@@")]


def _plan(operation: Operation) -> dict[str, str]:
    """Who carries the operation out, as stored when it was proposed, and how its
    precondition is checked and its effect rolled back."""
    if operation.executor == Operation.Executor.AGENT:
        return {
            "executor": "the agent itself",
            "precondition": "Checked by the agent before it acts.",
            "rollback": operation.get_rollback_kind_display(),
        }
    parsed = parse(operation.action, operation.arguments)
    if parsed.args is None:
        why = parsed.problem or f"{operation.action} is no longer an action of this server"
        described = {"precondition": f"Arguments no longer valid: {why}", "rollback": ""}
    else:
        described = parsed.action.describe(parsed.args)
    return {"executor": "Oversight's workers", **described}

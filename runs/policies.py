"""Approval policies: the risk of a proposal, how many people must approve it, and how
long decisions stay valid. The agent's own risk is where this starts, never where it
ends.

Which rules: the *base* rule is the action's unconditional rule, else the project
default's (blank action); an action's own rule replaces the default, so that an admin
can loosen a known-safe action ("http.request: auto-approve") or tighten one. The
conditional rules of the action and of the default apply on top of the base: a
condition only ever adds strictness.

When a conditional rule applies: its argument (a dotted path into the arguments,
``to.account``) is compared with its value; numbers, and strings that read as finite
decimals (``"1250.00"``, as the ledger reads them), compare as ``Decimal``; other
values only for (in)equality with a value of the same JSON type. A missing argument,
or one that cannot be compared (text for an ordering operator, a list against a
string), makes the rule apply as if its test had passed, though never to approve
automatically: fail closed, since a rule that an agent could dodge by leaving its
argument out or sending it in another shape would be no rule.

From the rules that apply: the risk is the highest of the agent's and every rule's
``min_risk`` (the agent can raise its risk, never lower it); the count is the highest
of their counts, so auto-approval needs every applying rule to say so; one when no
rule applies (fail closed, never auto); two when the risk is high, whatever the rules
say. The timeouts come from the rule that set the count, else the base rule, else the
settings. A reviewer's edit is judged on every set of arguments the operation has had,
and can only raise the requirement (``stricter``).
"""

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal, InvalidOperation

from django.conf import settings

from runs.canonical import canonical_json
from runs.models import ApprovalPolicy, Decision, Operation, Project

RISKS = list(Operation.Risk.values)  # In order: low < medium < high.
APPROVALS = ApprovalPolicy.Approvals
COMPARE = {
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
    "eq": operator.eq,
    "ne": operator.ne,
}
HIGH_RISK = "high risk: two people"
NO_RULE = "no policy rule applies: one approver"
REQUEUED = "an operator's requeue: one person, whatever the policy"
RAISED_BY = "; risk raised to {risk} by "
RULE_CHARS = Operation._meta.get_field("approval_rule").max_length
POLICY_CHARS = Decision._meta.get_field("policy").max_length
_MISSING = object()


@dataclass(frozen=True)
class Requirement:
    risk: str
    approvals: int
    # Which rule set the count, and which raised the risk if another one did.
    rule: str
    decision_timeout: timedelta
    approval_ttl: timedelta

    @property
    def policy_label(self) -> str:
        """The name an auto-approval is recorded under."""
        return _clip(self.rule, POLICY_CHARS)


@dataclass(frozen=True)
class _Applying:
    policy: ApprovalPolicy
    approvals: int
    untested: str  # Why the rule's test could not run ("amount missing"); blank if it passed.

    @property
    def label(self) -> str:
        return rule_label(self.policy, self.approvals, self.untested)


def rules_for(project: Project, action: str) -> list[ApprovalPolicy]:
    """The project's rules for ``action`` and its default rules, the action's first."""
    return list(
        ApprovalPolicy.objects.filter(project=project, action__in=[action, ""])
        .select_related("project")
        .order_by("-action", "pk")
    )


def requirement_for(
    project: Project, action: str, arguments: dict, proposed_risk: str, *, requeue: bool = False
) -> Requirement:
    """``requeue``: an operator's requeue, which a person approves whatever the rules."""
    rules = rules_for(project, action)
    return requirement(rules, [arguments], proposed_risk, at_least=int(requeue))


def requirement_after_edit(operation: Operation, arguments: dict) -> Requirement:
    """The requirement on every set of arguments ``operation`` has had, ``arguments``
    included: an edit from 10 to 10,000 meets the rule for 10,000, and one back to 10
    does not escape the rule the 10,000 met."""
    edits = operation.decisions.filter(kind=Decision.Kind.EDIT)
    seen = [
        operation.proposed_arguments,
        *edits.values_list("edited_arguments", flat=True),
        arguments,
    ]
    rules = rules_for(operation.project, operation.action)
    return requirement(rules, seen, operation.proposed_risk or operation.risk)


def requirement(
    rules: Sequence[ApprovalPolicy],
    argument_sets: Sequence[dict],
    proposed_risk: str,
    *,
    at_least: int = 0,
) -> Requirement:
    """What ``rules`` require of a proposal with these arguments (a rule applies if it
    applies to any set) and the agent's ``proposed_risk``, and ``at_least`` approvals
    (a requeue's one); see the module docstring."""
    base = next((rule for rule in rules if not rule.when_argument), None)
    conditional = (_applying(rule, argument_sets) for rule in rules if rule.when_argument)
    applying = [a for a in conditional if a is not None]
    if base is not None:
        applying.append(_Applying(base, base.approvals_required, ""))
    # ``max`` keeps the first of equals: an action's conditional rule names the count
    # before the default's, and both before the base rule.
    setter = max(applying, key=lambda a: a.approvals, default=None)
    risk = max([proposed_risk, *(a.policy.min_risk for a in applying)], key=_risk_rank)
    approvals = setter.approvals if setter else APPROVALS.ONE
    floor = ""
    if risk == Operation.Risk.HIGH and approvals < APPROVALS.TWO:
        setter, approvals, floor = None, APPROVALS.TWO, HIGH_RISK
    elif approvals < at_least:
        setter, approvals, floor = None, at_least, REQUEUED
    raiser = _raiser([setter, *applying] if setter else applying, risk, proposed_risk)
    timeouts = [p for p in (setter and setter.policy, base) if p is not None]
    return Requirement(
        risk=risk,
        approvals=approvals,
        rule=_clip(_explanation(setter, raiser, floor, risk), RULE_CHARS),
        decision_timeout=_first(p.decision_timeout for p in timeouts)
        or settings.OVERSIGHT_DECISION_TIMEOUT,
        approval_ttl=_first(p.approval_ttl for p in timeouts) or settings.OVERSIGHT_APPROVAL_TTL,
    )


def stricter(operation: Operation, needed: Requirement) -> dict:
    """The changes that make ``operation`` require ``needed`` where it asks more than
    the operation does: an edit can raise the risk and the count, never lower them."""
    risk = max(operation.risk, needed.risk, key=_risk_rank)
    approvals = max(operation.required_approvals, needed.approvals)
    if (risk, approvals) == (operation.risk, operation.required_approvals):
        return {}
    return {"risk": risk, "required_approvals": approvals, "approval_rule": needed.rule}


def explain(operation: Operation) -> tuple[str, str]:
    """(the rule that set the count, the rule that raised the agent's risk, or blank
    if it stood), read back from ``operation.approval_rule``."""
    counted, _, raised = operation.approval_rule.partition(RAISED_BY.format(risk=operation.risk))
    if not operation.proposed_risk or operation.proposed_risk == operation.risk:
        return counted, ""
    return counted, raised or counted


def rule_label(policy: ApprovalPolicy, approvals: int, untested: str = "") -> str:
    """``acme / ledger.transfer when amount > 1000: two approvers, min risk high``."""
    when = f" when {policy.condition}" if policy.when_argument else ""
    if untested:
        when += f" ({untested})"
    text = f"{policy.project.slug} / {policy.action or 'any action'}{when}"
    text += f": {APPROVALS(approvals).label}"
    return text + (f", min risk {policy.min_risk}" if policy.min_risk else "")


def as_decimal(value) -> Decimal | None:
    """A JSON number, or a string that reads as one, as a finite ``Decimal``."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = Decimal(value) if isinstance(value, int) else Decimal(str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def _applying(rule: ApprovalPolicy, argument_sets: Iterable[dict]) -> _Applying | None:
    outcomes = [_test(rule, arguments) for arguments in argument_sets]
    untested = next((outcome for outcome in outcomes if isinstance(outcome, str)), "")
    if untested:
        return _Applying(rule, max(rule.approvals_required, APPROVALS.ONE), untested)
    return _Applying(rule, rule.approvals_required, "") if any(outcomes) else None


def _test(rule: ApprovalPolicy, arguments: dict) -> bool | str:
    """Whether ``rule``'s test passes on ``arguments``, or why it cannot be run."""
    value = _lookup(arguments, rule.when_argument)
    if value is _MISSING:
        return f"{rule.when_argument} missing"
    compare = COMPARE.get(rule.when_operator)
    if compare is None:
        return f"unknown operator {rule.when_operator!r}"
    left, right = as_decimal(value), as_decimal(rule.when_value)
    if left is not None and right is not None:
        return compare(left, right)
    if rule.when_operator in ApprovalPolicy.ORDERING or _json_type(value) != _json_type(
        rule.when_value
    ):
        return f"{rule.when_argument} not comparable"
    return compare(canonical_json(value), canonical_json(rule.when_value))


def _lookup(arguments: dict, path: str):
    value = arguments
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


def _json_type(value) -> str:
    if isinstance(value, bool):
        return "boolean"
    return "number" if isinstance(value, int | float) else type(value).__name__


def _explanation(setter: _Applying | None, raiser: _Applying | None, floor: str, risk: str) -> str:
    """Which rule set the count (or ``floor``, what raised it above every rule's), then,
    if another one raised the agent's risk, that one (``explain`` reads the two apart)."""
    text = setter.label if setter is not None else floor or NO_RULE
    if raiser is not None and raiser is not setter:
        text += RAISED_BY.format(risk=risk) + raiser.label
    return text


def _raiser(applying: list[_Applying], risk: str, proposed_risk: str) -> _Applying | None:
    if risk == proposed_risk:
        return None
    return next(a for a in applying if a.policy.min_risk == risk)


def _risk_rank(risk: str) -> int:
    return RISKS.index(risk) if risk else -1


def _first(values: Iterable):
    return next((value for value in values if value), None)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"

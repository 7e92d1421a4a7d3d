"""How many approvals an operation needs and how long decisions stay valid."""

from datetime import timedelta

from django.conf import settings

from runs.models import ApprovalPolicy, Operation, Project


def policy_for(project: Project, action: str) -> ApprovalPolicy | None:
    """The row for this action, else the project's default row (blank action)."""
    rows = {
        p.action: p for p in ApprovalPolicy.objects.filter(project=project, action__in=[action, ""])
    }
    return rows.get(action) or rows.get("")


def required_approvals(policy: ApprovalPolicy | None, risk: str) -> int:
    """High risk always needs two different people; otherwise the policy decides, and
    without a policy one person must approve (fail closed, never auto)."""
    if risk == Operation.Risk.HIGH:
        return 2
    return policy.approvals_required if policy else ApprovalPolicy.Approvals.ONE


def policy_label(policy: ApprovalPolicy | None) -> str:
    return f"{policy.project.slug}/{policy.action or '*'}" if policy else "default"


def decision_timeout(policy: ApprovalPolicy | None) -> timedelta:
    return (policy and policy.decision_timeout) or settings.OVERSIGHT_DECISION_TIMEOUT


def approval_ttl(policy: ApprovalPolicy | None) -> timedelta:
    return (policy and policy.approval_ttl) or settings.OVERSIGHT_APPROVAL_TTL

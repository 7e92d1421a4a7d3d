"""The per-run evidence bundle: one zip an auditor can hand on, holding everything
that happened in the run and the means to check it.

``evidence.json`` has the run and its goal, every message with who wrote it, every
proposal with what each reviewer was shown (the arguments and their hash, and the
preview of the effect: of the edited arguments, for an edit) and decided, every
execution (intent, result, verification, rollback), the agent token that opened the
session and proposed each operation (who it acts for, who issued it, when its owner
accepted it), the alerts and who handled them, every checkpoint with its chain hashes,
and the result of verifying the chain when the bundle was made. ``artifacts/<sha256>``
holds the bytes of every artifact version; ``missing_artifacts`` and
``altered_artifacts`` name any whose stored bytes are gone or no longer match their
sha256 (the altered bytes are included as found).

Verifying a bundle also checks four eyes from its content: no decision was made by the
run's owner, nor by the owner or the issuer of the token that proposed the operation.
"""

import json
import tempfile
import zipfile
from datetime import UTC, datetime

from django.db.models import Prefetch

from runs import artifact_store, replica
from runs.canonical import sha256_hex
from runs.chain import GENESIS, document, link_problem, verify_run_chain
from runs.models import Alert, CheckpointArtifact, Decision, Run


def _when(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat() if moment else None


def _username(user) -> str | None:
    return user.get_username() if user else None


def evidence(run: Run, *, user, now: datetime) -> dict:
    return _evidence(run, generated_by=user.get_username(), now=now)


def _evidence(run: Run, *, generated_by: str, now: datetime) -> dict:
    broken = verify_run_chain(run)
    checkpoints = list(run.checkpoints.order_by("seq"))
    operations = (
        run.operations.order_by("pk")
        .select_related("proposed_by_token__owner", "proposed_by_token__issued_by", "requeued_by")
        .prefetch_related(
            Prefetch("decisions", Decision.objects.select_related("reviewer").order_by("pk"))
        )
    )
    alerts = run.alerts.order_by("pk").select_related("acknowledged_by", "resolved_by")
    refs = CheckpointArtifact.objects.filter(checkpoint__run=run).select_related(
        "artifact", "checkpoint"
    )
    return {
        "bundle": {
            "format": 1,
            "generated_at": _when(now),
            "generated_by": generated_by,
        },
        "run": {
            "id": run.pk,
            "project": run.project.slug,
            "session": {
                "id": run.session_id,
                "agent": run.session.agent,
                "owner": _username(run.session.owner),
                "token": _token(run.session.token),
            },
            "goal": run.goal,
            "status": run.status,
            "outcome": run.outcome,
            "retry_of": run.retry_of_id,
            "created_at": _when(run.created_at),
            "version": run.version,
        },
        "messages": [
            {
                "seq": m.seq,
                "kind": m.kind,
                "author": m.author,
                # user, agent, worker or policy; blank for messages older than the field.
                "author_kind": m.author_kind,
                "created_at": _when(m.created_at),
                "payload": m.payload,
            }
            for m in run.messages.order_by("seq")
        ],
        "operations": [_operation(op) for op in operations],
        "alerts": [_alert(alert) for alert in alerts],
        "artifacts": [
            {
                "name": ref.name,
                "checkpoint_seq": ref.checkpoint.seq,
                "sha256": ref.artifact.sha256,
                "size": ref.artifact.size,
                "media_type": ref.media_type,
                "file": f"artifacts/{ref.artifact.sha256}",
            }
            for ref in refs.order_by("checkpoint__seq", "name")
        ],
        # Exactly what each hash covers (runs.chain.document): checkable without us.
        "checkpoints": [document(c) for c in checkpoints],
        "chain": {
            "verified": broken is None,
            "broken_link": str(broken) if broken else None,
            "head": checkpoints[-1].hash if checkpoints else None,
            "length": len(checkpoints),
        },
    }


def _token(token) -> dict | None:
    """An agent token as the bundle names it. ``issued_by`` is null for a token issued
    before issuers were recorded."""
    if token is None:
        return None
    return {
        "name": token.name,
        "prefix": token.prefix,
        "owner": _username(token.owner),
        "issued_by": _username(token.issued_by),
        "accepted_at": _when(token.accepted_at),
    }


def _operation(op) -> dict:
    return {
        "id": op.pk,
        "call_id": op.call_id,
        "action": op.action,
        "risk": op.risk,
        "rollback_kind": op.rollback_kind,
        "executor": op.executor,
        "required_approvals": op.required_approvals,
        "proposed_arguments": op.proposed_arguments,
        "arguments": op.arguments,
        "arguments_hash": op.arguments_hash,
        "idempotency_key": op.idempotency_key,
        "status": op.status,
        "status_reason": op.status_reason,
        "proposed_at": _when(op.created_at),
        "proposed_by_token": _token(op.proposed_by_token),
        **_requeue(op),
        "decisions": [
            {
                # As the decision's checkpoint names it: verification finds it there.
                "id": d.pk,
                "kind": d.kind,
                "by": _username(d.reviewer) or f"policy:{d.policy}",
                "shown_arguments_hash": d.arguments_hash,
                "shown_preview_sha256": d.preview_sha256 or None,
                "edited_arguments": d.edited_arguments,
                "comment": d.comment,
                "at": _when(d.created_at),
            }
            for d in op.decisions.all()
        ],
        "execution": {"intent": op.intent, "result": op.result},
    }


def _requeue(op) -> dict:
    """An operator's requeue: what it repeats, who requeued it and why (nothing else)."""
    if op.requeue_of_id is None:
        return {}
    by = _username(op.requeued_by)
    return {"requeue": {"of": op.requeue_of_id, "by": by, "reason": op.requeue_reason}}


def _alert(alert: Alert) -> dict:
    return {
        "id": alert.pk,
        "operation": alert.operation_id,
        "status": alert.status,
        "summary": alert.summary,
        "state_left": alert.state_left,
        "created_at": _when(alert.created_at),
        "acknowledged_by": _username(alert.acknowledged_by),
        "acknowledged_at": _when(alert.acknowledged_at),
        "resolved_by": _username(alert.resolved_by),
        "resolved_at": _when(alert.resolved_at),
        "resolution_note": alert.resolution_note,
        "deliveries": [
            {
                "channel": d.channel,
                "target": d.target,
                "status": d.status,
                "attempts": d.attempts,
                "last_error": d.last_error,
                "delivered_at": _when(d.delivered_at),
            }
            for d in alert.deliveries.order_by("pk")
        ],
    }


def evidence_files(run: Run, *, generated_by: str, now: datetime) -> tuple[dict, list[str]]:
    """The content of the run's ``evidence.json``, with ``missing_artifacts`` and
    ``altered_artifacts``, and the sha256 of each artifact whose bytes are in the store
    (altered or not): what a bundle holds (and a history archive, for each of its
    runs)."""
    return _with_artifacts_checked(_evidence(run, generated_by=generated_by, now=now))


def _from_replica(run: Run, *, generated_by: str, now: datetime) -> dict:
    """The run's evidence as one moment of the read replica has it, or as the primary
    has it where there is no replica or it has not got the run yet. Either says which,
    under ``bundle.read_from``."""
    if replica.configured():
        with replica.replica_snapshot():
            copy = Run.objects.select_related("project").filter(pk=run.pk).first()
            if copy is not None:
                content = _evidence(copy, generated_by=generated_by, now=now)
                content["bundle"]["read_from"] = "replica"
                return content
    content = _evidence(run, generated_by=generated_by, now=now)
    content["bundle"]["read_from"] = "primary"
    return content


def _with_artifacts_checked(content: dict) -> tuple[dict, list[str]]:
    """Each blob is hashed a chunk at a time, never held whole."""
    found = {}
    for sha256 in sorted({item["sha256"] for item in content["artifacts"]}):
        try:
            found[sha256] = artifact_store.digest_as_stored(sha256)
        except artifact_store.ArtifactMissing:
            found[sha256] = None
    content["missing_artifacts"] = [sha for sha, digest in found.items() if digest is None]
    content["altered_artifacts"] = [
        sha for sha, digest in found.items() if digest not in (None, sha)
    ]
    return content, [sha for sha, digest in found.items() if digest is not None]


def add_artifact(archive: zipfile.ZipFile, sha256: str) -> None:
    """The blob's bytes as stored, as ``artifacts/<sha256>`` in ``archive``, streamed."""
    with archive.open(f"artifacts/{sha256}", "w") as member:
        artifact_store.copy_as_stored(sha256, member)


def evidence_json(content: dict) -> bytes:
    return json.dumps(content, indent=2, ensure_ascii=False, sort_keys=True).encode()


def bundle(run: Run, *, user, now: datetime) -> tempfile.SpooledTemporaryFile:
    """The zip, in a temporary file (spilling to disk past 8 MB), rewound."""
    read = _from_replica(run, generated_by=user.get_username(), now=now)
    content, blobs = _with_artifacts_checked(read)
    # Returned open: the response streams it, then closes it.
    archive_file = tempfile.SpooledTemporaryFile(max_size=8 * 2**20)  # noqa: SIM115
    with zipfile.ZipFile(archive_file, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("evidence.json", evidence_json(content))
        for sha256 in blobs:
            add_artifact(archive, sha256)
    archive_file.seek(0)
    return archive_file


def bundle_problems(archive: zipfile.ZipFile) -> list[str]:
    """Everything wrong with a bundle, checked from its own content alone: each
    checkpoint hashes to its hash and links to the one before, the chain reaches the
    run's version, every artifact listed is the version the chain records, every
    artifact file holds the bytes its sha256 names, and each decision's preview is the
    one the chain records with that decision, and no decision broke four eyes
    (``_own_interests``). Needs no database: a bundle kept for years can be checked
    again."""
    content = json.loads(archive.read("evidence.json"))
    problems, previous_hash = [], GENESIS
    for seq, doc in enumerate(content["checkpoints"], start=1):
        if problem := link_problem(doc, previous_hash, seq):
            problems.append(f"checkpoint {seq}: {problem}")
            break
        previous_hash = doc["hash"]
    if not problems and len(content["checkpoints"]) != content["run"]["version"]:
        problems.append(
            f"the chain has {len(content['checkpoints'])} checkpoints but the run is at "
            f"version {content['run']['version']}"
        )
    names = set(archive.namelist())
    for item in content["artifacts"]:
        if item["file"] not in names:
            problems.append(f"{item['name']}: {item['file']} is not in the bundle")
        elif sha256_hex(archive.read(item["file"])) != item["sha256"]:
            problems.append(f"{item['name']}: {item['file']} does not match its sha256")
    return (
        problems
        + _unchained_artifacts(content)
        + _unchained_previews(content)
        + _own_interests(content)
    )


def _unchained_artifacts(content: dict) -> list[str]:
    """The artifacts listed that are not the version the state of their checkpoint
    records under their name: the list is not hashed, the checkpoints are, so a file
    swapped for another (with its listing) shows here."""
    states = {doc["seq"]: doc["state"] for doc in content["checkpoints"]}
    problems = []
    for item in content["artifacts"]:
        recorded = states.get(item["checkpoint_seq"], {}).get("artifacts", {}).get(item["name"])
        if recorded is None or recorded["sha256"] != item["sha256"]:
            problems.append(
                f"{item['name']}: checkpoint {item['checkpoint_seq']} records another "
                f"version than {item['file']}"
            )
    return problems


def _unchained_previews(content: dict) -> list[str]:
    """The decisions whose preview (what their reviewer was shown) is not the one the
    chain records with the decision, or is not in the bundle. A decision is found in the
    chain by its id; in a bundle made before decisions carried one, among the
    decisions on its operation."""
    by_id, by_operation = {}, {}
    for doc in content["checkpoints"]:
        if decision := doc["state"].get("decision"):
            by_id[decision.get("id")] = decision.get("preview_sha256")
            by_operation.setdefault(doc["operation"], set()).add(decision.get("preview_sha256"))
    listed = {item["sha256"] for item in content["artifacts"]}
    problems = []
    for operation in content["operations"]:
        for decision in operation["decisions"]:
            shown = decision["shown_preview_sha256"]
            if not shown:
                continue
            if "id" in decision:
                chained = {by_id.get(decision["id"])}
            else:
                chained = by_operation.get(operation["id"], set())
            whose = f"operation {operation['id']}: the preview {decision['by']} was shown"
            if shown not in chained:
                problems.append(f"{whose} is not the one the chain records with the decision")
            elif shown not in listed:
                problems.append(f"{whose} is not in the bundle")
    return problems


def _own_interests(content: dict) -> list[str]:
    """The decisions made by someone four eyes bars (``permissions.own_interest``): the
    run's owner, the owner or issuer of the agent token that proposed the operation, or
    the operator who requeued it.
    A bundle made before tokens were in it, or a token whose issuer was not recorded,
    names no one for them."""
    run_owner = content["run"]["session"]["owner"]
    problems = []
    for operation in content["operations"]:
        token = operation.get("proposed_by_token") or {}
        barred = {}
        for who, why in (
            (run_owner, "owns the run"),
            (token.get("owner"), "owns the agent token that proposed it"),
            (token.get("issued_by"), "issued the agent token that proposed it"),
            ((operation.get("requeue") or {}).get("by"), "requeued it"),
        ):
            if who:
                barred.setdefault(who, why)
        for decision in operation["decisions"]:
            if why := barred.get(decision["by"]):
                problems.append(
                    f"operation {operation['id']}: decided ({decision['kind']}) by "
                    f"{decision['by']}, who {why} (four eyes)"
                )
    return problems

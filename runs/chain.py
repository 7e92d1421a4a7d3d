"""The checkpoint hash chain: how a checkpoint's hash is computed, and how a chain is
verified. Tampering with any stored column, removing a row, or reordering rows
breaks the chain at the first affected checkpoint.

A checkpoint's hash is the sha256 of one JSON document (``document``, without its
``hash``) in canonical form: sorted keys, no spaces, UTF-8. The evidence bundle exports
these documents as they are, so anyone can check a bundle's chain without Oversight
(``link_problem`` is the whole rule)."""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC

from runs.canonical import json_hash
from runs.models import AdminCheckpoint, Checkpoint, Run

GENESIS = ""


def checkpoint_hash(checkpoint: Checkpoint) -> str:
    return json_hash(_hashed(checkpoint))


def document(checkpoint: Checkpoint) -> dict:
    """The checkpoint as the chain sees it: what its hash covers, and the hash."""
    return {**_hashed(checkpoint), "hash": checkpoint.hash}


def _hashed(checkpoint: Checkpoint) -> dict:
    """What the hash covers. ``request`` is there only on a human request's
    checkpoints, so the hashes of chains written before requests existed still hold."""
    request = {"request": checkpoint.request_id} if checkpoint.request_id else {}
    return {
        **request,
        "run": checkpoint.run_id,
        "seq": checkpoint.seq,
        "created_at": checkpoint.created_at.astimezone(UTC).isoformat(timespec="microseconds"),
        "actor": [checkpoint.actor_kind, checkpoint.actor_user_id, checkpoint.actor_label],
        "operation": checkpoint.operation_id,
        "event": checkpoint.event,
        "from": checkpoint.from_status,
        "to": checkpoint.to_status,
        "reason": checkpoint.reason,
        "state": checkpoint.state,
        "prev_hash": checkpoint.prev_hash,
    }


@dataclass(frozen=True)
class BrokenLink:
    run_id: int
    seq: int
    checkpoint_id: int | None
    problem: str

    def __str__(self) -> str:
        where = f"checkpoint {self.checkpoint_id}" if self.checkpoint_id else "end of chain"
        return f"run {self.run_id}, seq {self.seq} ({where}): {self.problem}"


def link_problem(doc: dict, previous_hash: str, expected_seq: int) -> str | None:
    """What is wrong with ``doc`` as the link after ``previous_hash``, if anything."""
    if doc["seq"] != expected_seq:
        return f"seq {doc['seq']} found, a gap"
    if doc["prev_hash"] != previous_hash:
        return "prev_hash does not match the previous hash"
    if doc["hash"] != json_hash({k: v for k, v in doc.items() if k != "hash"}):
        return "content does not match its hash (edited)"
    return None


def _walk(run_id: int, version: int, checkpoints: Iterable[Checkpoint]) -> BrokenLink | None:
    previous_hash, expected_seq = GENESIS, 1
    for checkpoint in checkpoints:
        if problem := link_problem(document(checkpoint), previous_hash, expected_seq):
            return BrokenLink(run_id, expected_seq, checkpoint.id, problem)
        previous_hash, expected_seq = checkpoint.hash, expected_seq + 1
    if expected_seq - 1 != version:
        return BrokenLink(
            run_id,
            expected_seq,
            None,
            f"chain ends at seq {expected_seq - 1} but the run is at version {version}",
        )
    return None


def verify_run_chain(run: Run) -> BrokenLink | None:
    return _walk(run.id, run.version, run.checkpoints.order_by("seq").iterator(chunk_size=2000))


def verify_all_chains() -> Iterator[BrokenLink]:
    """Yield the first broken link of every run whose chain is broken, in run order,
    streaming so that memory stays constant however many checkpoints there are."""
    versions = Run.objects.order_by("id").values_list("id", "version").iterator(chunk_size=5000)
    checkpoints = Checkpoint.objects.order_by("run_id", "seq").iterator(chunk_size=2000)
    pending = next(checkpoints, None)
    for run_id, version in versions:
        chain = []
        while pending is not None and pending.run_id <= run_id:
            if pending.run_id == run_id:
                chain.append(pending)
            pending = next(checkpoints, None)
        broken = _walk(run_id, version, chain)
        if broken:
            yield broken


def admin_checkpoint_hash(checkpoint: AdminCheckpoint) -> str:
    return json_hash(_admin_hashed(checkpoint))


def _admin_hashed(checkpoint: AdminCheckpoint) -> dict:
    return {
        "seq": checkpoint.seq,
        "created_at": checkpoint.created_at.astimezone(UTC).isoformat(timespec="microseconds"),
        "actor": [checkpoint.actor_kind, checkpoint.actor_user_id, checkpoint.actor_label],
        "project": checkpoint.project_id,
        "event": checkpoint.event,
        "detail": checkpoint.detail,
        "prev_hash": checkpoint.prev_hash,
    }


def verify_admin_chain() -> str | None:
    """What is wrong with the installation's chain of admin checkpoints, if anything:
    the first broken link, named by its seq."""
    previous_hash, expected_seq = GENESIS, 1
    for checkpoint in AdminCheckpoint.objects.order_by("seq").iterator(chunk_size=2000):
        doc = {**_admin_hashed(checkpoint), "hash": checkpoint.hash}
        if problem := link_problem(doc, previous_hash, expected_seq):
            return f"admin checkpoint seq {expected_seq}: {problem}"
        previous_hash, expected_seq = checkpoint.hash, expected_seq + 1
    return None

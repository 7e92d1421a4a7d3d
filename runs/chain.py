"""The checkpoint hash chain: how a checkpoint's hash is computed, and how a chain is
verified. Tampering with any stored column, removing a row, or reordering rows
breaks the chain at the first affected checkpoint."""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC

from runs.canonical import json_hash
from runs.models import Checkpoint, Run

GENESIS = ""


def checkpoint_hash(checkpoint: Checkpoint) -> str:
    return json_hash(
        {
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
    )


@dataclass(frozen=True)
class BrokenLink:
    run_id: int
    seq: int
    checkpoint_id: int | None
    problem: str

    def __str__(self) -> str:
        where = f"checkpoint {self.checkpoint_id}" if self.checkpoint_id else "end of chain"
        return f"run {self.run_id}, seq {self.seq} ({where}): {self.problem}"


def _walk(run_id: int, version: int, checkpoints: Iterable[Checkpoint]) -> BrokenLink | None:
    previous_hash, expected_seq = GENESIS, 1
    for checkpoint in checkpoints:
        if checkpoint.seq != expected_seq:
            return BrokenLink(
                run_id, expected_seq, checkpoint.id, f"seq {checkpoint.seq} found, a gap"
            )
        if checkpoint.prev_hash != previous_hash:
            return BrokenLink(
                run_id, checkpoint.seq, checkpoint.id, "prev_hash does not match the previous hash"
            )
        if checkpoint.hash != checkpoint_hash(checkpoint):
            return BrokenLink(
                run_id, checkpoint.seq, checkpoint.id, "content does not match its hash (edited)"
            )
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

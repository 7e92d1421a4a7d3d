"""``OversightCheckpointStorage``: a workflow's checkpoints kept in its Oversight run.

A checkpoint is encoded by the framework's own ``FileCheckpointStorage`` (JSON with
pickled values) and uploaded as an artifact of the run; a message of the run, posted
by this token, names it (checkpoint id, workflow, sha256). The server stores the bytes
and never decodes them. Decoding unpickles, which can run code: so a checkpoint is
decoded only from bytes fetched by a sha256 that a message of our own run, written by
our own token, recorded, and that the bytes match. A checkpoint id given by a caller is
only looked up among those messages: no caller can hand this storage bytes to decode."""

import hashlib
import tempfile
from pathlib import Path

from agent_framework import (
    CheckpointID,
    FileCheckpointStorage,
    WorkflowCheckpoint,
    WorkflowCheckpointException,
)

from oversight_client.aio import AsyncOversight
from oversight_client.reach import patiently

MARK = "agent_framework_checkpoint"  # the data key of a message naming a checkpoint
FORGET = "agent_framework_checkpoint_deleted"  # the data key of a message deleting one


class OversightCheckpointStorage:
    """The checkpoints of the workflow that works in Oversight run ``run_id`` (the
    framework's ``CheckpointStorage``). ``allowed_checkpoint_types`` are the types of
    yours its values may hold (``"module:qualname"``), as for ``FileCheckpointStorage``.
    Deleting one forgets it: the run keeps its artifacts, as its audit trail does."""

    def __init__(
        self,
        ovs: AsyncOversight,
        run_id: int,
        *,
        allowed_checkpoint_types: list[str] | None = None,
    ) -> None:
        self.ovs, self.run_id = ovs, run_id
        self.allowed_checkpoint_types = allowed_checkpoint_types
        # Why a save failed, if one did (Oversight refused it, or a value of a type not
        # allowed could not be encoded): the framework logs a failed save and runs on,
        # so whoever runs the workflow must look here.
        self.refused: Exception | None = None

    async def save(self, checkpoint: WorkflowCheckpoint) -> CheckpointID:
        try:
            content = await self._encode(checkpoint)
            # Oversight away is waited for, as long as a call waits for a person.
            await patiently(lambda: self._store(checkpoint, content), self.ovs.wait_timeout)
        except Exception as refused:
            self.refused = refused
            raise
        self.refused = None  # a later save stands for the workflow's state: the last counts
        return checkpoint.checkpoint_id

    async def _store(self, checkpoint: WorkflowCheckpoint, content: bytes) -> None:
        name = f"agent-framework-checkpoint-{checkpoint.checkpoint_id}.json"
        stored = await self.ovs.upload_artifact(self.run_id, name, content, "application/json")
        named = {
            "id": checkpoint.checkpoint_id,
            "workflow": checkpoint.workflow_name,
            "sha256": stored["sha256"],
        }
        text = f"The workflow {checkpoint.workflow_name} saved a checkpoint."
        await self.ovs.message(self.run_id, text, data={MARK: named})

    async def load(self, checkpoint_id: CheckpointID) -> WorkflowCheckpoint:
        named = (await self._named()).get(checkpoint_id)
        if named is None:
            raise WorkflowCheckpointException(f"No checkpoint found with ID {checkpoint_id}")
        content = await self.ovs.fetch_artifact(named["sha256"])
        if hashlib.sha256(content).hexdigest() != named["sha256"]:
            raise WorkflowCheckpointException(f"Checkpoint {checkpoint_id} was altered")
        return await self._decode(checkpoint_id, content)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        return [
            await self.load(id)
            for id in await self.list_checkpoint_ids(workflow_name=workflow_name)
        ]

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        if checkpoint_id not in await self._named():
            return False
        text = "A checkpoint of the workflow was deleted."
        await self.ovs.message(self.run_id, text, data={FORGET: checkpoint_id})
        return True

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        ids = await self.list_checkpoint_ids(workflow_name=workflow_name)
        return await self.load(ids[-1]) if ids else None

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        """In the order they were saved: the last is the latest."""
        return [
            id for id, named in (await self._named()).items() if named["workflow"] == workflow_name
        ]

    async def latest(self) -> WorkflowCheckpoint | None:
        """The run's last checkpoint, whatever its workflow's name."""
        named = await self._named()
        return await self.load(list(named)[-1]) if named else None

    async def _named(self) -> dict[CheckpointID, dict]:
        """The checkpoints our messages name and did not delete, in the order saved. Only
        the agent's own messages count: a person's reply in the run names nothing."""
        named: dict[CheckpointID, dict] = {}
        after = 0
        while page := await self.ovs.messages(self.run_id, after, 100):
            for message in page:
                data = (message.get("payload") or {}).get("data") or {}
                if message.get("author_kind") != "agent":
                    continue
                if isinstance(data.get(MARK), dict):
                    named.pop(data[MARK]["id"], None)  # saved again: it is the latest
                    named[data[MARK]["id"]] = data[MARK]
                if FORGET in data:
                    named.pop(data[FORGET], None)
            after = page[-1]["seq"]
        return named

    def _files(self, folder: str) -> FileCheckpointStorage:
        allowed = self.allowed_checkpoint_types
        return FileCheckpointStorage(folder, allowed_checkpoint_types=allowed)

    async def _encode(self, checkpoint: WorkflowCheckpoint) -> bytes:
        """The checkpoint as the framework's file storage writes it (which also checks
        that it decodes under the allowed types)."""
        with tempfile.TemporaryDirectory() as folder:
            await self._files(folder).save(checkpoint)
            return (Path(folder) / f"{checkpoint.checkpoint_id}.json").read_bytes()

    async def _decode(self, checkpoint_id: CheckpointID, content: bytes) -> WorkflowCheckpoint:
        with tempfile.TemporaryDirectory() as folder:
            path = (Path(folder) / f"{checkpoint_id}.json").resolve()
            if path.parent != Path(folder).resolve():
                raise WorkflowCheckpointException(f"Invalid checkpoint ID: {checkpoint_id}")
            path.write_bytes(content)
            return await self._files(folder).load(checkpoint_id)

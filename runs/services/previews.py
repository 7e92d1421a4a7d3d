"""Previews of operations' effects, as reviewers see them and as their decisions keep
them (see ``runs.actions.previews``)."""

import json
import logging

from runs import artifact_store
from runs.actions.base import Context, plain_reason, previewing
from runs.actions.registry import get_action, parse_arguments
from runs.canonical import canonical_json, json_hash
from runs.errors import PreviewChanged
from runs.logs import about
from runs.models import Artifact, Operation
from runs.services.artifacts import read_artifact, store_artifact
from runs.transitions import ArtifactRef

log = logging.getLogger(__name__)
MEDIA_TYPE = "application/vnd.oversight.preview+json"


def preview_of(operation: Operation, arguments: dict | None = None) -> dict | None:
    """What ``operation`` would change with ``arguments`` (by default its own), read from
    its live target now (None: the action has no preview, or is not Oversight's: the
    arguments say it all). A reviewer's edit is previewed with the edited arguments
    before it is approved. A preview that cannot be made says why instead: it never
    breaks the page. Its reads from targets keep a preview's budget (a reviewer's page
    waits on them), and a file's diff is made once and reused, so that a decision's
    check that the target still shows what its reviewer saw costs a read and a hash."""
    action = get_action(operation.action)
    if action is None:
        return None
    arguments = operation.arguments if arguments is None else arguments
    try:
        with previewing():
            shown = action.preview(parse_arguments(action, arguments), Context(operation))
    except Exception as error:
        with about(run_id=operation.run_id, operation_id=operation.pk, arguments=arguments):
            log.warning("operation %s: no preview: %r", operation.pk, error)
        return {"kind": "unavailable", "why": plain_reason(error)}
    return shown.as_json() if shown is not None else None


def stored_preview(sha256: str) -> dict | None:
    """A preview as a reviewer was shown it (None if its bytes are gone)."""
    artifact = Artifact.objects.filter(sha256=sha256).first()
    if artifact is None:
        return None
    try:
        return json.loads(read_artifact(artifact))
    except (artifact_store.ArtifactMissing, artifact_store.ArtifactDamaged) as gone:
        log.warning("the stored preview %s cannot be shown: %s", sha256, gone)
        return None


def preview_hash(preview: dict | None) -> str:
    """What the decision form carries: the hash of the preview shown ("" for none)."""
    return json_hash(preview) if preview is not None else ""


def seen_preview(operation: Operation, preview: dict | None, shown_hash: str) -> ArtifactRef | None:
    """The preview a reviewer decided on, stored (content-addressed) for their
    decision's checkpoint. Refused if the target shows another now (``preview``, as
    ``preview_of`` read it): the reviewer must look again, as for changed arguments."""
    if preview_hash(preview) != shown_hash:
        raise PreviewChanged(
            f"what operation {operation.pk} would change is no longer what you saw: look again"
        )
    if preview is None:
        return None
    artifact = store_artifact(canonical_json(preview))
    return ArtifactRef(f"previews/operation-{operation.pk}.json", artifact, MEDIA_TYPE)

"""The auditor's pages: search across checkpoints, one checkpoint with its diff, a
run's chain and artifacts, artifact versions, exports and the evidence bundle.

Every member of a project (auditor, reviewer, admin) may read its history here; every
view is GET-only, so nothing on these pages can change what they show.
"""

import re

from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    StreamingHttpResponse,
)
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from graphs.display import CHECKPOINT_ID_LENGTH, graph_state
from runs import artifact_store, replica
from runs.audit import evidence, export
from runs.audit.diff import state_diff, text_diff
from runs.audit.search import AuditFilter, BadCursor, paginate
from runs.canonical import sha256_hex
from runs.chain import GENESIS, checkpoint_hash, verify_run_chain
from runs.models import Checkpoint, CheckpointArtifact, Run
from runs.replica import reads_replica
from runs.views.access import load_artifact_ref, load_checkpoint, load_run, member_projects

# A run's page lists this many checkpoints; the search pages through any number.
RUN_PAGE_CHECKPOINTS = 200
# Larger artifacts are offered for download only, not shown or diffed in the page.
TEXT_VIEW_MAX_BYTES = 512 * 1024


def _filters(request: HttpRequest) -> AuditFilter:
    return AuditFilter(request.GET, projects=list(member_projects(request.user)))


@require_GET
@reads_replica
def search(request: HttpRequest) -> HttpResponse:
    filters = _filters(request)
    checkpoints = filters.checkpoints().select_related("project", "operation")
    error, status = None, 200
    try:
        page = paginate(
            checkpoints,
            filters.ordering,
            after=request.GET.get("after"),
            before=request.GET.get("before"),
        )
    except BadCursor as bad:
        error, status = str(bad), 400
        page = paginate(checkpoints, filters.ordering)
    if not filters.is_valid():
        status = 400
    query = request.GET.copy()
    for key in ("after", "before"):
        query.pop(key, None)
    context = {
        "filters": filters,
        "page": page,
        "query": query.urlencode(),
        "error": error,
        "lag": replica.behind(),
    }
    return render(request, "runs/audit/search.html", context, status=status)


@require_GET
@reads_replica
def export_view(request: HttpRequest, fmt: str) -> HttpResponse:
    filters = _filters(request)
    if not filters.is_valid():
        return render(
            request,
            "runs/audit/search.html",
            {"filters": filters, "page": None, "query": ""},
            status=400,
        )
    now = timezone.now()
    meta = export.header(filters.described(), request.user, now, replica.behind())
    rows = export.records(filters.checkpoints(), filters.ordering)
    lines, content_type = {
        "csv": (export.csv_lines, "text/csv; charset=utf-8"),
        "jsonl": (export.jsonl_lines, "application/jsonl; charset=utf-8"),
    }[fmt]
    chunks = replica.streamed_from_replica(lines(meta, rows))
    response = StreamingHttpResponse(chunks, content_type=content_type)
    filename = f"oversight-checkpoints-{now:%Y%m%d-%H%M%S}.{fmt}"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Oversight-Query"] = meta["query"]
    return response


@require_GET
def checkpoint_detail(request: HttpRequest, pk: int) -> HttpResponse:
    checkpoint = load_checkpoint(request.user, pk)
    neighbours = {
        c.seq: c
        for c in Checkpoint.objects.filter(
            run_id=checkpoint.run_id, seq__in=[checkpoint.seq - 1, checkpoint.seq + 1]
        ).only("id", "seq", "hash")
    }
    previous, following = neighbours.get(checkpoint.seq - 1), neighbours.get(checkpoint.seq + 1)
    against, error = _against(request, checkpoint, previous)
    context = {
        "checkpoint": checkpoint,
        "run": checkpoint.run,
        "previous": previous,
        "following": following,
        "against": against,
        "against_error": error,
        "changes": state_diff(against.state if against else {}, checkpoint.state),
        "refs": checkpoint.artifact_refs.select_related("artifact").order_by("name"),
        "hash_ok": checkpoint_hash(checkpoint) == checkpoint.hash,
        "link_ok": checkpoint.prev_hash == (previous.hash if previous else GENESIS),
    }
    return render(request, "runs/audit/checkpoint.html", context, status=400 if error else 200)


def _number(raw: str) -> int | None:
    """A positive number typed in a URL, or None (for "", "abc", "²", "-1", "0")."""
    return int(raw) if re.fullmatch(r"[0-9]{1,18}", raw) and int(raw) > 0 else None


def _against(request, checkpoint: Checkpoint, previous: Checkpoint | None):
    """The checkpoint of the same run to diff against: ``?against=<seq>``, or the
    previous one. Returns it (None before the first) and an error for a bad ``seq``."""
    raw = request.GET.get("against", "")
    if not raw:
        return previous, None
    if (seq := _number(raw)) and seq <= checkpoint.run.version:
        return Checkpoint.objects.get(run_id=checkpoint.run_id, seq=seq), None
    error = f"There is no checkpoint {raw} in this run (1 to {checkpoint.run.version})."
    return previous, error


@require_GET
def run_audit(request: HttpRequest, pk: int) -> HttpResponse:
    run = load_run(request.user, pk)
    before = request.GET.get("graph_before", "")
    if len(before) > CHECKPOINT_ID_LENGTH or "\x00" in before:
        return HttpResponseBadRequest("graph_before: not a LangGraph checkpoint id")
    return render(request, "runs/audit/run.html", _run_context(run, graph_before=before))


def _run_context(run: Run, graph_before: str = "", **extra) -> dict:
    refs = (
        CheckpointArtifact.objects.filter(checkpoint__run=run)
        .select_related("artifact", "checkpoint")
        .order_by("name", "checkpoint__seq")
    )
    checkpoints = list(
        run.checkpoints.select_related("operation").order_by("seq")[: RUN_PAGE_CHECKPOINTS + 1]
    )
    return {
        "run": run,
        "checkpoints": checkpoints[:RUN_PAGE_CHECKPOINTS],
        "more_checkpoints": len(checkpoints) > RUN_PAGE_CHECKPOINTS,
        "refs": refs,
        "graph": graph_state(run, graph_before),
        **extra,
    }


@require_GET
def verify_chain(request: HttpRequest, pk: int) -> HttpResponse:
    """Recompute the run's chain now and say whether it holds, or where it breaks."""
    run = load_run(request.user, pk)
    result = {"checked": True, "broken": verify_run_chain(run), "checked_at": timezone.now()}
    if request.htmx:
        return render(request, "runs/audit/partials/chain_result.html", {**result, "run": run})
    return render(request, "runs/audit/run.html", _run_context(run, **result))


@require_GET
def evidence_bundle(request: HttpRequest, pk: int) -> FileResponse:
    run = load_run(request.user, pk)  # Who may see it is read from the primary.
    now = timezone.now()
    archive = evidence.bundle(run, user=request.user, now=now)
    return FileResponse(
        archive,
        as_attachment=True,
        filename=f"oversight-run-{run.pk}-evidence-{now:%Y%m%d-%H%M%S}.zip",
        content_type="application/zip",
    )


def _read(ref: CheckpointArtifact) -> bytes | None:
    """The bytes as stored, damaged or not (the page says whether they verify)."""
    try:
        return artifact_store.read_as_stored(ref.artifact.sha256)
    except artifact_store.ArtifactMissing:
        return None


def _text(content: bytes | None) -> str | None:
    if content is None or len(content) > TEXT_VIEW_MAX_BYTES:
        return None
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError:
        return None


@require_GET
def artifact_version(request: HttpRequest, pk: int) -> HttpResponse:
    """One version of a run's artifact: its bytes checked against its sha256, the text
    if it is text, and a line diff against another version of the same name."""
    ref = load_artifact_ref(request.user, pk)
    run = ref.checkpoint.run
    versions = list(
        CheckpointArtifact.objects.filter(checkpoint__run=run, name=ref.name)
        .select_related("artifact", "checkpoint")
        .order_by("checkpoint__seq")
    )
    position = next(i for i, version in enumerate(versions) if version.pk == ref.pk)
    against = _version_against(request, versions, position)
    content = _read(ref)
    text = _text(content)
    diff = None
    if against is not None and text is not None:
        other = _text(_read(against))
        diff = text_diff(other, text) if other is not None else None
    context = {
        "ref": ref,
        "run": run,
        "versions": versions,
        "against": against,
        "missing": content is None,
        "verified": content is not None and sha256_hex(content) == ref.artifact.sha256,
        "text": text,
        "diff": diff,
    }
    return render(request, "runs/audit/artifact.html", context)


def _version_against(request, versions: list[CheckpointArtifact], position: int):
    raw = request.GET.get("against", "")
    chosen = next((v for v in versions if v.pk == _number(raw)), None)
    if raw and chosen is None:
        raise Http404("That is not a version of this artifact.")
    return chosen or (versions[position - 1] if position else None)

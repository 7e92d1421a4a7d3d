"""``file.write``: write a text file inside the sandboxed workspace.

Precondition: the file's current content still has the sha256 the reviewer approved
against (``null``: the file must not exist yet). No path may leave the workspace.
The previous version is kept as an artifact before the write, so the in-band undo
restores it exactly (or removes a file that did not exist).
"""

from pathlib import Path, PurePosixPath

from django.conf import settings
from pydantic import Field, field_validator

from runs.actions.base import Action, Arguments, Context, ExecutionFailed, PreconditionFailed
from runs.canonical import sha256_hex
from runs.models import Artifact, Operation
from runs.services.artifacts import read_artifact, store_artifact, write_durably

MAX_CONTENT = 1_000_000


class FileWriteArguments(Arguments):
    path: str = Field(min_length=1, max_length=500)
    content: str = Field(max_length=MAX_CONTENT)
    expected_sha256: str | None = Field(pattern=r"^[0-9a-f]{64}$")

    @field_validator("path")
    @classmethod
    def stays_inside(cls, path: str) -> str:
        pure = PurePosixPath(path)
        if pure.is_absolute() or ".." in pure.parts or "\\" in path or "\x00" in path:
            raise ValueError("must be a relative path inside the workspace, without '..'")
        return path


def workspace() -> Path:
    return Path(settings.OVERSIGHT_WORKSPACE).resolve()


def resolve(path: str) -> Path:
    """The real location of ``path``; refuses anything (e.g. a symlink) leading outside."""
    root = workspace()
    target = (root / path).resolve()
    if not target.is_relative_to(root) or target == root:
        raise PreconditionFailed(f"{path} leads outside the workspace")
    return target


def current_hash(target: Path) -> str | None:
    return sha256_hex(target.read_bytes()) if target.is_file() else None


class FileWrite(Action):
    name = "file.write"
    Arguments = FileWriteArguments
    rollback_kind = Operation.RollbackKind.IN_BAND

    def describe(self, args: FileWriteArguments) -> dict[str, str]:
        before = (
            f"still has sha256 {args.expected_sha256[:12]}…"
            if args.expected_sha256
            else "still does not exist"
        )
        return {
            "precondition": f"{args.path} {before}",
            "rollback": "Restore the previous version, kept as an artifact (or remove the file "
            "if it did not exist).",
        }

    def precondition(self, args: FileWriteArguments, ctx: Context) -> None:
        found = current_hash(resolve(args.path))
        if found != args.expected_sha256:
            raise PreconditionFailed(
                f"{args.path} has changed since it was approved "
                f"(sha256 {found or 'absent'}, approved against {args.expected_sha256 or 'absent'})"
            )

    def snapshot(self, args: FileWriteArguments, ctx: Context) -> dict:
        target = resolve(args.path)
        if not target.is_file():
            return {"previous": None}
        artifact = store_artifact(target.read_bytes(), "text/plain")
        ctx.artifacts[f"workspace/{args.path}@before"] = artifact
        return {"previous": artifact.sha256}

    def execute(self, args: FileWriteArguments, key: str, ctx: Context) -> dict:
        target = resolve(args.path)
        write_durably(target, args.content.encode())
        return {"path": args.path, "sha256": sha256_hex(args.content.encode())}

    def verify(self, args: FileWriteArguments, key: str, ctx: Context) -> bool:
        return current_hash(resolve(args.path)) == sha256_hex(args.content.encode())

    def undo(self, args: FileWriteArguments, key: str, ctx: Context) -> None:
        target = resolve(args.path)
        previous = ctx.intent.get("previous")
        if previous is None:
            target.unlink(missing_ok=True)
            return
        content = read_artifact(Artifact.objects.get(sha256=previous))
        write_durably(target, content)
        if current_hash(target) != previous:
            raise ExecutionFailed(f"{args.path} could not be restored to {previous}")

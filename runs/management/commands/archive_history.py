from datetime import datetime, time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from runs.actors import Actor
from runs.audit.archive import RETENTION, ArchiveError, Cut, archive_history, selected
from runs.management.operator import operator
from runs.models import Project
from runs.permissions import has_project_perm


class Command(BaseCommand):
    help = (
        "Write the finished runs that ended before --before (or, with --policy, before "
        "their project's history_days) to one zip that verify_archive checks alone, keep "
        "its sha256 and the runs' chain heads in the database, then delete those runs and "
        "what hangs from them. Never a run not finished, with an unresolved alert, or with "
        "an operation or request not in a final state."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--out", required=True, metavar="FILE.zip", help="A new file.")
        cut = parser.add_mutually_exclusive_group(required=True)
        cut.add_argument(
            "--before",
            metavar="DATE",
            help="YYYY-MM-DD (midnight, in TIME_ZONE) or an ISO date and time.",
        )
        cut.add_argument(
            "--policy", action="store_true", help="Each project's history_days (none: skipped)."
        )
        parser.add_argument("--project", metavar="SLUG", help="Only this project's runs.")
        parser.add_argument(
            "--as",
            dest="acting_as",
            help="The Oversight user acting, an admin of every project concerned "
            "(default: the retention policy).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="List what would be archived; change nothing."
        )

    def handle(self, *args, out, before, policy, project, acting_as, dry_run, **options) -> None:
        now = timezone.now()
        scope = _project(project) if project else None
        if policy:
            cut = Cut.by_policy(now=now, project=scope)
        else:
            cut = Cut(now=now, before=_moment(before), project=scope)
        actor = _actor(acting_as, cut) if acting_as else RETENTION
        path = _new_file(out)
        if dry_run:
            self._dry_run(path, cut, actor)
            return
        try:
            done = archive_history(path, cut, actor=actor)
        except (ArchiveError, FileExistsError) as error:
            raise CommandError(str(error)) from None
        self._kept(done.kept)
        written = done.written
        if not written.entries:
            self.stdout.write("nothing to archive: no finished run is due")
            return
        checkpoints = sum(entry.checkpoints for entry in written.entries)
        self.stdout.write(
            f"archived {len(written.entries)} run(s) ({checkpoints} checkpoints) to {path}, "
            f"sha256 {written.sha256}"
        )
        self.stdout.write(
            f"pruned {len(done.pruned)} run(s); removed {len(done.removed_artifacts)} "
            "artifact file(s) no longer named"
        )

    def _dry_run(self, path: Path, cut: Cut, actor: Actor) -> None:
        runs = checkpoints = 0
        for item in selected(cut, by=actor.label):
            if isinstance(item, str):
                self._kept([item])
                continue
            run, content, _ = item
            runs, checkpoints = runs + 1, checkpoints + content["chain"]["length"]
            self.stdout.write(
                f"would archive and prune run {run.pk} ({run.project.slug}, ended "
                f"{run.ended_at:%Y-%m-%d %H:%M}, {content['chain']['length']} checkpoints)"
            )
        if not runs:
            self.stdout.write("nothing to archive: no finished run is due")
            return
        self.stdout.write(
            f"would archive {runs} run(s) ({checkpoints} checkpoints) to {path}; nothing changed"
        )

    def _kept(self, lines: list[str]) -> None:
        for line in lines:
            self.stdout.write(line)


def _project(slug: str) -> Project:
    found = Project.objects.filter(slug=slug).first()
    if found is None:
        raise CommandError(f"--project: no project {slug!r}")
    return found


def _moment(text: str) -> datetime:
    """``--before`` as an aware moment: a date is its first moment in TIME_ZONE."""
    try:
        moment = parse_datetime(text)
        if moment is None and (day := parse_date(text)) is not None:
            moment = datetime.combine(day, time.min)
    except ValueError:
        moment = None
    if moment is None:
        raise CommandError(f"--before: {text!r} is not a date (YYYY-MM-DD) or a date and time")
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment)


def _actor(username: str, cut: Cut) -> Actor:
    """The named user, who must be an admin of every project the cut concerns."""
    user = operator(username)
    for project in cut.projects():
        if not has_project_perm(user, project, "manage_project"):
            raise CommandError(f"--as: {username} is not an admin of project {project.slug!r}")
    return Actor.of_user(user)


def _new_file(out: str) -> Path:
    path = Path(out)
    if path.exists():
        raise CommandError(f"--out: {out} exists already; an archive is never overwritten")
    if not path.parent.is_dir():
        raise CommandError(f"--out: there is no folder {path.parent}")
    return path.absolute()

import json
import sys
import zipfile

from django.core.management.base import BaseCommand, CommandError

from runs.audit.evidence import bundle_problems


class Command(BaseCommand):
    help = (
        "Check a run's evidence bundle (the zip from /audit/runs/<id>/) from its own "
        "content, without the database: every checkpoint hash and link, the chain's "
        "length, every artifact's bytes and version, each decision's preview. Exit 1 "
        "naming what does not hold."
    )
    requires_system_checks = []

    def add_arguments(self, parser) -> None:
        parser.add_argument("path", help="the evidence bundle (.zip)")

    def handle(self, *args, path: str, **options) -> None:
        try:
            with zipfile.ZipFile(path) as archive:
                problems = bundle_problems(archive)
                content = json.loads(archive.read("evidence.json"))
        except (OSError, zipfile.BadZipFile, KeyError, ValueError, TypeError) as error:
            raise CommandError(f"{path} is not an evidence bundle: {error}") from None
        for problem in problems:
            self.stderr.write(f"broken: {problem}")
        if problems:
            sys.exit(1)
        checkpoints = content["checkpoints"]
        head = checkpoints[-1]["hash"] if checkpoints else "(empty)"
        self.stdout.write(
            f"evidence for run {content['run']['id']} verifies: {len(checkpoints)} "
            f"checkpoints, head {head}, {len(content['artifacts'])} artifact version(s)"
        )

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from runs.configuration.files import export
from runs.models import Project


class Command(BaseCommand):
    help = (
        "Write the projects, their members' accounts and roles, policies, alert emails, "
        "Slack channels and webhooks as a configuration file apply_config reads "
        "(docs/operating/configuration.md)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--project", action="append", help="A project's slug (repeatable).")
        parser.add_argument(
            "--out", type=Path, help="The file to write (default: standard output)."
        )

    def handle(self, *args, project: list[str] | None, out: Path | None, **options) -> None:
        if project and (
            missing := set(project)
            - set(Project.objects.filter(slug__in=project).values_list("slug", flat=True))
        ):
            raise CommandError(f"no project {sorted(missing)[0]!r}")
        text, variables = export(project)
        if out is None:
            self.stdout.write(text, ending="")
        else:
            try:
                with out.open("x", encoding="utf-8") as file:
                    file.write(text)
            except OSError as error:
                raise CommandError(f"{out}: {error.strerror}") from None
            self.stdout.write(f"wrote {out}")
        for variable in variables:
            self.stderr.write(f"set {variable}")

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q

from runs.errors import InvalidInput
from runs.models import Project
from runs.services.tokens import issue_token


class Command(BaseCommand):
    help = "Create an agent token for a project and print it (the only time it is shown)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--project", required=True, help="Project slug or name.")
        parser.add_argument("--name", required=True, help="A name for the token (unique).")
        parser.add_argument(
            "--owner",
            default="",
            help="Username of a project member the agent acts for (default: a new user "
            "named after the token, who only reads and never signs in).",
        )

    def handle(self, *args, project: str, name: str, owner: str, **options) -> None:
        found = Project.objects.filter(Q(slug=project) | Q(name=project)).first()
        if found is None:
            raise CommandError(f"no project {project!r}")
        try:
            _, plain = issue_token(project=found, name=name, owner_username=owner)
        except InvalidInput as error:
            raise CommandError(str(error)) from None
        self.stdout.write(plain)

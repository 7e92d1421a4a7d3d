from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from runs.models import AgentToken, Project


class Command(BaseCommand):
    help = "Create an agent token for a project and print it (the only time it is shown)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--project", required=True, help="Project slug or name.")
        parser.add_argument("--name", required=True, help="A name for the token (unique).")
        parser.add_argument(
            "--owner",
            default="",
            help="Username the agent acts for (default: a user named after the token).",
        )

    def handle(self, *args, project: str, name: str, owner: str, **options) -> None:
        found = (
            Project.objects.filter(slug=project).first()
            or Project.objects.filter(name=project).first()
        )
        if found is None:
            raise CommandError(f"no project {project!r}")
        if AgentToken.objects.filter(project=found, name=name).exists():
            raise CommandError(f"project {found.slug} already has a token named {name!r}")
        users = get_user_model().objects
        if owner:
            person = users.filter(username=owner).first()
            if person is None:
                raise CommandError(f"no user {owner!r}")
        else:
            username = f"agent-{found.slug}-{name}"[:150]
            person = users.filter(username=username).first() or users.create_user(username)
        _, plain = AgentToken.issue(project=found, name=name, owner=person)
        self.stdout.write(plain)

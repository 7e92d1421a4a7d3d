from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q

from runs.errors import InvalidInput
from runs.models import Project
from runs.services.tokens import issue_token


class Command(BaseCommand):
    help = (
        "Create an agent token for a project and print it (the only time it is shown). A "
        "token for another member than its issuer acts once that member accepts it."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--project", required=True, help="Project slug or name.")
        parser.add_argument("--name", required=True, help="A name for the token (unique).")
        parser.add_argument(
            "--issued-by",
            required=True,
            help="Username of whoever issues it (you): they may not decide on what its "
            "agent proposes or asks.",
        )
        parser.add_argument(
            "--owner",
            default="",
            help="Username of a project member the agent acts for, once they accept it "
            "on their account page (default: a new user named after the token, who only "
            "reads and never signs in).",
        )

    def handle(self, *args, project: str, name: str, issued_by: str, owner: str, **options) -> None:
        found = Project.objects.filter(Q(slug=project) | Q(name=project)).first()
        if found is None:
            raise CommandError(f"no project {project!r}")
        issuer = get_user_model().objects.filter(username=issued_by, is_active=True).first()
        if issuer is None:
            raise CommandError(f"issued-by: no active user {issued_by!r}")
        try:
            token, plain = issue_token(
                project=found, name=name, issued_by=issuer, owner_username=owner
            )
        except InvalidInput as error:
            raise CommandError(str(error)) from None
        if token.waits:
            self.stderr.write(f"it acts once {token.owner.get_username()} accepts it")
        self.stdout.write(plain)

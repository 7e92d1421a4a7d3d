from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q

from runs.models import Project, WebhookEndpoint, WebhookEvent


class Command(BaseCommand):
    help = (
        "Add a signed webhook to a project and print its secret (the only time it is "
        "shown): its receiver checks each delivery's signature with it "
        "(docs/operating/webhooks.md)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--project", required=True, help="Project slug or name.")
        parser.add_argument("--name", required=True, help="A name for it, e.g. “Teams bot”.")
        parser.add_argument("--url", required=True, help="Where deliveries are POSTed.")
        parser.add_argument(
            "--events",
            required=True,
            help=f"The events it wants, separated by commas: {', '.join(WebhookEvent.Kind)}.",
        )

    def handle(self, *args, project: str, name: str, url: str, events: str, **options) -> None:
        found = Project.objects.filter(Q(slug=project) | Q(name=project)).first()
        if found is None:
            raise CommandError(f"no project {project!r}")
        wanted = [event.strip() for event in events.split(",") if event.strip()]
        try:
            _, secret = WebhookEndpoint.add(project=found, name=name, url=url, events=wanted)
        except ValidationError as error:
            problems = "; ".join(f"{field}: {' '.join(said)}" for field, said in error)
            raise CommandError(problems) from None
        self.stdout.write(secret)

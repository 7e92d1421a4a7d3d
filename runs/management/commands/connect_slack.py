from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q

from runs.models import Project, SlackChannel


class Command(BaseCommand):
    help = (
        "Post a project's waiting operations and requests to a Slack channel (the app's "
        "bot must be in it), or stop with --off (docs/operating/slack.md)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--project", required=True, help="Project slug or name.")
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--channel", help="The channel's id, e.g. C0123456789.")
        group.add_argument("--off", action="store_true", help="Post nothing more.")

    def handle(self, *args, project: str, channel: str | None, off: bool, **options) -> None:
        found = Project.objects.filter(Q(slug=project) | Q(name=project)).first()
        if found is None:
            raise CommandError(f"no project {project!r}")
        if off:
            SlackChannel.objects.filter(project=found).delete()
            self.stdout.write(f"{found.name} posts nothing more to Slack.")
            return
        channel = channel.strip()
        if not SlackChannel.is_channel_id(channel):
            raise CommandError(f"{channel!r} is not a channel id (e.g. C0123456789)")
        SlackChannel.objects.update_or_create(project=found, defaults={"channel": channel})
        self.stdout.write(f"{found.name} posts what waits to Slack channel {channel}.")
        if not settings.OVERSIGHT_SLACK_BOT_TOKEN:
            self.stderr.write(
                "Slack is not set up here yet: nothing is posted until "
                "OVERSIGHT_SLACK_BOT_TOKEN and OVERSIGHT_SLACK_SIGNING_SECRET are set."
            )

from django.core.management.base import BaseCommand

from runs.actors import Actor
from runs.errors import OversightError
from runs.management.operator import add_operator_argument, operator, refused
from runs.services.pauses import pause_workers


class Command(BaseCommand):
    help = (
        "Stop the workers claiming operations: of every lane (a superuser may), or of one "
        "with --lane (an admin of every project using it may), as the user named by --as, "
        "until resume_workers. What a worker already took goes on to its end."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--reason", required=True, help="Why: shown on the pages.")
        parser.add_argument(
            "--lane", default="", help="One lane, as list_operations shows it (default: all)."
        )
        add_operator_argument(parser)

    def handle(self, *args, reason: str, lane: str, acting_as: str, **options) -> None:
        user = operator(acting_as)
        try:
            pause = pause_workers(lane=lane, actor=Actor.of_user(user), reason=reason)
        except OversightError as error:
            raise refused(error) from None
        self.stdout.write(f"{pause.scope} paused by {user.get_username()}")

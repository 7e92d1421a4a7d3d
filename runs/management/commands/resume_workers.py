from django.core.management.base import BaseCommand

from runs.actors import Actor
from runs.errors import OversightError
from runs.management.operator import add_operator_argument, operator, refused
from runs.services.pauses import resume_workers


class Command(BaseCommand):
    help = (
        "End a pause of the workers (of every lane, or of one with --lane) as the user "
        "named by --as, with the right that pausing it needs."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--lane", default="", help="One lane (default: every lane).")
        add_operator_argument(parser)

    def handle(self, *args, lane: str, acting_as: str, **options) -> None:
        user = operator(acting_as)
        try:
            pause = resume_workers(lane=lane, actor=Actor.of_user(user))
        except OversightError as error:
            raise refused(error) from None
        self.stdout.write(f"{pause.scope} resumed by {user.get_username()}")

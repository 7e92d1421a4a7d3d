from django.core.management.base import BaseCommand

from runs.actors import Actor
from runs.errors import OversightError
from runs.management.operator import add_operator_argument, found, operator, refused
from runs.models import Run
from runs.services.runs import cancel_run


class Command(BaseCommand):
    help = (
        "Cancel a run and every operation of it not yet executed, as the user named by "
        "--as (an admin of its project), as the run's page does."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("run", type=int)
        parser.add_argument("--reason", required=True, help="Why: the agent reads it.")
        add_operator_argument(parser)

    def handle(self, *args, run: int, reason: str, acting_as: str, **options) -> None:
        user = operator(acting_as)
        try:
            cancelled = cancel_run(
                run=found(Run.objects, run, "run"), actor=Actor.of_user(user), reason=reason
            )
        except OversightError as error:
            raise refused(error) from None
        self.stdout.write(f"run {cancelled.pk} {cancelled.status} by {user.get_username()}")

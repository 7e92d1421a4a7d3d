from django.core.management.base import BaseCommand

from runs.errors import OversightError
from runs.management.operator import add_operator_argument, found, operator, refused
from runs.models import Operation
from runs.services.requeues import requeue_operation


class Command(BaseCommand):
    help = (
        "Propose again, in its run, an operation whose effect did not happen (failed, "
        "precondition failed or expired), after a fix, as the user named by --as (an "
        "admin of its project): reviewers decide on it again, never that user."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("operation", type=int)
        parser.add_argument(
            "--reason", required=True, help="What was fixed: reviewers and the agent read it."
        )
        add_operator_argument(parser)

    def handle(self, *args, operation: int, reason: str, acting_as: str, **options) -> None:
        user = operator(acting_as)
        ended = found(Operation.objects.select_related("project"), operation, "operation")
        try:
            requeue, new = requeue_operation(operation=ended, user=user, reason=reason)
        except OversightError as error:
            raise refused(error) from None
        said = "requeued" if new else "was already requeued"
        self.stdout.write(
            f"operation {ended.pk} {said} as operation {requeue.pk} ({requeue.status}) "
            f"by {requeue.requeued_by.get_username()}"
        )

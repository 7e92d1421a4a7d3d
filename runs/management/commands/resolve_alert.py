from django.core.management.base import BaseCommand

from runs.errors import OversightError
from runs.management.operator import add_operator_argument, found, operator, refused
from runs.models import Alert
from runs.services.alerts import resolve_alert


class Command(BaseCommand):
    help = (
        "Resolve an alert, saying how, as the user named by --as (an admin of its "
        "project), as the alert's page does; its run goes on if nothing else halts it."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("alert", type=int)
        parser.add_argument("--note", required=True, help="How it was resolved.")
        add_operator_argument(parser)

    def handle(self, *args, alert: int, note: str, acting_as: str, **options) -> None:
        user = operator(acting_as)
        try:
            resolved = resolve_alert(
                alert=found(Alert.objects, alert, "alert"), user=user, note=note
            )
        except OversightError as error:
            raise refused(error) from None
        self.stdout.write(f"alert {resolved.pk} {resolved.status} by {user.get_username()}")

from django.core.management.base import BaseCommand, CommandError

from runs.management.operator import add_operator_argument, operator
from runs.shared_workspace import adopt, workspace_root


class Command(BaseCommand):
    help = (
        "Record this machine's OVERSIGHT_WORKSPACE as file.write's shared workspace, when "
        "the one recorded is lost for good (a superuser may). Workers that do not see "
        "this folder stop running file.write at their next heartbeat."
    )

    def add_arguments(self, parser) -> None:
        add_operator_argument(parser)

    def handle(self, *args, acting_as: str, **options) -> None:
        user = operator(acting_as)
        if not user.is_superuser:
            raise CommandError(f"{user.get_username()} is not a superuser: only one may adopt")
        mark = adopt(f"{user.get_username()} (adopt_workspace)")
        self.stdout.write(f"{workspace_root()} is the shared workspace now (mark {mark[:8]})")

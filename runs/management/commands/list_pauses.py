from django.core.management.base import BaseCommand

from runs.management.operator import add_output_arguments, write_rows
from runs.paused_lanes import operator_pauses


class Command(BaseCommand):
    help = 'List the operators\' pauses of the workers (lane "-": every lane).'

    def add_arguments(self, parser) -> None:
        add_output_arguments(parser)

    def handle(self, *args, json: bool, **options) -> None:
        rows = (
            {
                "lane": pause.lane,
                "paused_by": pause.paused_by_label,
                "created_at": pause.created_at,
                "reason": pause.reason,
            }
            for pause in operator_pauses()
        )
        write_rows(self.stdout, rows, json)

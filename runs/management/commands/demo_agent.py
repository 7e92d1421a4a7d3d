import signal
import threading

from django.core.management.base import BaseCommand, CommandError

from runs.demo.agent import DemoAgent
from runs.models import Project


class Command(BaseCommand):
    help = "Run the demo's scripted agent: a new scenario every few seconds until stopped."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--project", default="demo")
        parser.add_argument("--target", required=True, help="Base URL of the demo target.")
        parser.add_argument("--interval", type=float, default=4.0)
        parser.add_argument("--ticks", type=int, default=0, help="Stop after N ticks (0: never).")

    def handle(self, *args, project: str, target: str, interval: float, ticks: int, **options):
        try:
            agent = DemoAgent(Project.objects.get(slug=project), target)
        except Project.DoesNotExist:
            raise CommandError(f"no project {project!r}: run seed_demo first") from None
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        count = 0
        while not stop.is_set() and (not ticks or count < ticks):
            agent.tick()
            count += 1
            stop.wait(interval)

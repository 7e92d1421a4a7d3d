import os
import signal
import threading

from django.core.management.base import BaseCommand, CommandError

from oversight_client import Oversight, OversightError
from runs.demo.agent import DemoAgent


class Command(BaseCommand):
    help = (
        "Run the demo's scripted agent against Oversight's HTTP API (token in "
        "OVERSIGHT_AGENT_TOKEN): a new scenario every few seconds until stopped."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--api", required=True, help="Oversight's base URL.")
        parser.add_argument("--target", required=True, help="Base URL of the demo target.")
        parser.add_argument("--interval", type=float, default=4.0)
        parser.add_argument("--ticks", type=int, default=0, help="Stop after N ticks (0: never).")

    def handle(self, *args, api: str, target: str, interval: float, ticks: int, **options):
        token = os.environ.get("OVERSIGHT_AGENT_TOKEN", "")
        if not token:
            raise CommandError("OVERSIGHT_AGENT_TOKEN must hold an agent token")
        try:
            agent = DemoAgent(Oversight(api, token), target)
        except OversightError as error:
            raise CommandError(f"cannot reach Oversight at {api}: {error}") from None
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        count = 0
        while not stop.is_set() and (not ticks or count < ticks):
            agent.tick()
            count += 1
            stop.wait(interval)

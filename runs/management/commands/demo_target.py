from django.core.management.base import BaseCommand

from runs.demo.target import make_server


class Command(BaseCommand):
    help = "Serve the demo's HTTP target service (what http.request acts on)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--port", type=int, default=8001)

    def handle(self, *args, port: int, **options) -> None:
        server = make_server(port=port)
        self.stdout.write(f"demo target on http://127.0.0.1:{port}/")
        server.serve_forever()

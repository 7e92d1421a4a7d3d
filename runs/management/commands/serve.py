"""Serve Oversight in production: gunicorn running ``oversight.wsgi`` in threaded worker
processes, static files collected first and served by WhiteNoise.

Why gunicorn's threads: an agent's long-poll (``GET …?wait=N``) holds a thread for up to
``OVERSIGHT_API_MAX_WAIT_SECONDS`` while reviewers' pages must answer at once. Sync
workers give one request per process (a few waits stall every page). Under an ASGI
server (uvicorn, tried for #17) Django runs each request's synchronous middleware and
views on a thread of the request's own, handing over at every middleware: plain API
reads answered at half the rate. Threads are what the views need, and
``bench/long_polls.py --server serve`` measures the pages meanwhile.

A process takes no more connections than it has threads (``worker_connections``), so a
process whose threads all wait leaves new connections in the kernel's queue for one
with a free thread, instead of queueing a page behind waits; no keep-alive (the proxy in
front keeps its own connections to browsers).
"""

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections
from gunicorn.app.base import BaseApplication

# Threads the server keeps beyond the long-polls allowed on this host, for pages.
PAGE_THREADS = 8


class Server(BaseApplication):
    def __init__(self, options: dict) -> None:
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for name, value in self.options.items():
            self.cfg.set(name, value)

    def load(self):
        from oversight.wsgi import application

        return application


class Command(BaseCommand):
    help = (
        "Serve Oversight in production (gunicorn, threaded workers; static files by "
        "WhiteNoise). Run migrations first (bin/upgrade) and runworker beside it."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--bind", default=settings.OVERSIGHT_BIND, help="host:port")
        parser.add_argument("--processes", type=int, default=settings.OVERSIGHT_WEB_PROCESSES)
        parser.add_argument("--threads", type=int, default=settings.OVERSIGHT_WEB_THREADS)

    def handle(self, *args, bind: str, processes: int, threads: int, **options) -> None:
        needed = settings.OVERSIGHT_API_MAX_WAITS + PAGE_THREADS
        if processes < 1 or threads < 1 or processes * threads < needed:
            raise CommandError(
                f"{processes} processes x {threads} threads is fewer than the "
                f"{needed} needed: OVERSIGHT_API_MAX_WAITS ({settings.OVERSIGHT_API_MAX_WAITS})"
                f" long-polls plus {PAGE_THREADS} for pages"
            )
        call_command("collectstatic", interactive=False, verbosity=0)
        connections.close_all()  # The worker processes are forked from this one.
        Server(
            {
                **_json_logs(),
                "bind": bind,
                "workers": processes,
                "worker_class": "gthread",
                "threads": threads,
                "worker_connections": threads,
                "keepalive": 0,
                # A long-poll in hand may finish when the server is asked to stop.
                "graceful_timeout": settings.OVERSIGHT_API_MAX_WAIT_SECONDS + 5,
                # Oversight reads the proxy's headers itself (OVERSIGHT_PROXY_SSL_HEADER,
                # OVERSIGHT_CLIENT_IP_HEADER): gunicorn trusts none.
                "forwarded_allow_ips": "",
                "proc_name": "oversight",
                "errorlog": "-",
            }
        ).run()


def _json_logs() -> dict:
    """With OVERSIGHT_LOG_FORMAT=json, gunicorn's own lines (start, stop, a worker
    restarted) go through Oversight's log handler too: every line one JSON object."""
    if settings.OVERSIGHT_LOG_FORMAT != "json":
        return {}
    gunicorn = {"level": "INFO", "handlers": [], "propagate": True}
    return {
        "logconfig_dict": {
            **settings.LOGGING,
            "loggers": {"gunicorn.error": gunicorn, "gunicorn.access": gunicorn},
        }
    }

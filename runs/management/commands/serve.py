"""Serve Oversight in production: gunicorn keeping worker processes that each run
``oversight.asgi`` under uvicorn, static files collected first and served by
WhiteNoise.

Why: an agent's long-poll (``GET …?wait=N``) may wait ``OVERSIGHT_API_MAX_WAIT_SECONDS``
while reviewers' pages must answer at once. In ``oversight.asgi`` a waiting long-poll
is a coroutine on uvicorn's event loop: it holds no thread and no database connection,
so a host keeps thousands open (threaded workers held a thread per wait, and so
allowed a few dozen). Every other request runs on a fixed pool of threads per process
(``--threads``), as gunicorn's threaded workers ran them.

A long-poll's own reads run on a thread of the request's own that ends with it, so a
database connection kept for the next request would never be used again: every
connection of a web process is given back when its request ends, and on PostgreSQL it
comes from the process's pool of at most ``OVERSIGHT_WEB_DB_CONNECTIONS`` (psycopg's,
through Django). A request that finds them all in use, or PostgreSQL out of reach, waits
``OVERSIGHT_WEB_DB_WAIT_SECONDS`` for one, then is answered 503 (``runs.views.errors``).
"""

import logging
import resource
from collections.abc import Callable

import psycopg
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections
from gunicorn.app.base import BaseApplication
from psycopg_pool import ConnectionPool
from uvicorn_worker import UvicornWorker

# The pool's attempts to connect again back off (1 s, 2 s, 4 s…) and give up after this
# long; the next request short of a connection starts them again. At psycopg's 5
# minutes, a pool whose PostgreSQL was away for a minute next tried half a minute later,
# answering 503s all that time.
RECONNECT_SECONDS = 5
KEEPALIVE_SECONDS = 5


class Server(BaseApplication):
    def __init__(self, options: dict, threads: int) -> None:
        self.options = options
        self.threads = threads
        super().__init__()

    def load_config(self) -> None:
        for name, value in self.options.items():
            self.cfg.set(name, value)

    def load(self):
        _pool_connections()
        from oversight.asgi import Oversight

        return Oversight(threads=self.threads)


def _pool_connections() -> None:
    """In a web process, before its first connection: no connection outlives its
    request, and on PostgreSQL they come from the process's pool."""
    for alias in connections:
        database = connections.settings[alias]
        database["CONN_MAX_AGE"] = 0
        if database["ENGINE"] == "django.db.backends.postgresql":
            database["OPTIONS"]["pool"] = {
                "min_size": 1,
                "max_size": settings.OVERSIGHT_WEB_DB_CONNECTIONS,
                "timeout": settings.OVERSIGHT_WEB_DB_WAIT_SECONDS,
                "check": _checked(alias),
                "reconnect_timeout": RECONNECT_SECONDS,
            }


def _checked(alias: str) -> Callable[[psycopg.Connection], None]:
    """The pool's check of a connection before it lends it (psycopg's, which Django's
    CONN_HEALTH_CHECKS would give: a query of nothing), finding one PostgreSQL dropped.
    PostgreSQL drops them all at once (a restart, a failover, an administrator
    terminating them), and the pool tries the next at once, then after a second, two,
    four: with four dropped, a request waited seven seconds. So the first found dropped
    has the pool check every idle one and connect again in their place: a request meets
    one at most."""

    def check(conn: psycopg.Connection) -> None:
        try:
            ConnectionPool.check_connection(conn)
        except psycopg.Error:
            connections[alias].pool.check()
            raise

    return check


class Command(BaseCommand):
    help = (
        "Serve Oversight in production (gunicorn and uvicorn: long-polls on the event "
        "loop, every other request on a pool of threads; static files by WhiteNoise). "
        "Run migrations first (bin/upgrade) and runworker beside it."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--bind", default=settings.OVERSIGHT_BIND, help="host:port")
        parser.add_argument("--processes", type=int, default=settings.OVERSIGHT_WEB_PROCESSES)
        parser.add_argument("--threads", type=int, default=settings.OVERSIGHT_WEB_THREADS)

    def handle(self, *args, bind: str, processes: int, threads: int, **options) -> None:
        for name, value in (("--processes", processes), ("--threads", threads)):
            if value < 1:
                raise CommandError(f"{name} must be at least 1, not {value}")
        allow_open_files()
        call_command("collectstatic", interactive=False, verbosity=0)
        connections.close_all()  # The worker processes are forked from this one.
        Server(
            {
                **_json_logs(),
                "bind": bind,
                "workers": processes,
                "worker_class": f"{__name__}.Worker",
                # Idle connections kept this long: uvicorn closes one kept 0 s without
                # saying so, which a proxy reusing it would meet as an error.
                "keepalive": KEEPALIVE_SECONDS,
                # A long-poll in hand may finish when the server is asked to stop.
                "graceful_timeout": settings.OVERSIGHT_API_MAX_WAIT_SECONDS + 5,
                # Oversight reads the proxy's headers itself (OVERSIGHT_PROXY_SSL_HEADER,
                # OVERSIGHT_CLIENT_IP_HEADER): the server trusts none.
                "forwarded_allow_ips": "",
                "proc_name": "oversight",
                "errorlog": "-",
            },
            threads=threads,
        ).run()


class Worker(UvicornWorker):
    """uvicorn's worker, whose own lines (an error in a request included) go where
    gunicorn's go: uvicorn gives its loggers gunicorn's handlers and stops them there,
    and with OVERSIGHT_LOG_FORMAT=json gunicorn's have none (they pass their lines on
    to Oversight's handler)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if settings.OVERSIGHT_LOG_FORMAT == "json":
            logging.getLogger("uvicorn.error").propagate = True


def allow_open_files() -> None:
    """Each open long-poll holds its socket and two slot files: allow as many open
    files as the system lets this user (often 1,024 by default, of a far higher hard
    limit). The long-polls bench, whose agents hold a socket each, calls it too."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _json_logs() -> dict:
    """With OVERSIGHT_LOG_FORMAT=json, gunicorn's and uvicorn's own lines (start, stop, a
    worker restarted) go through Oversight's log handler too: every line one JSON object."""
    if settings.OVERSIGHT_LOG_FORMAT != "json":
        return {}
    gunicorn = {"level": "INFO", "handlers": [], "propagate": True}
    return {
        "logconfig_dict": {
            **settings.LOGGING,
            "loggers": {"gunicorn.error": gunicorn, "gunicorn.access": gunicorn},
        }
    }

"""The suite's own OpenID Connect provider as a process, ``python -m tests.oidc_provider.serve``,
started by tests/identity_provider.py with OIDC_PROVIDER_DIR, OIDC_PROVIDER_SETUP_KEY,
OIDC_PROVIDER_CLIENT_ID and OIDC_PROVIDER_CLIENT_SECRET set. It binds its port first, as
the issuer's URL names it, then makes its database and its one client, and says
``listening on PORT`` once it answers."""

import os
import socketserver
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import django
from django.core.handlers.wsgi import WSGIHandler
from django.core.management import call_command


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    """A thread per request: a browser's requests and the relying party's token and
    userinfo calls overlap."""

    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:
        """No line per request: errors are logged by Django (settings.LOGGING)."""


def create_client() -> None:
    """The one relying party: confidential, code flow, no consent page, RS256 ID tokens.
    Its redirect URIs come later (setup_views.setup_client)."""
    from django.conf import settings
    from oauth2_provider.models import get_application_model

    application = get_application_model()
    application.objects.create(
        name="Oversight",
        client_id=settings.OIDC_PROVIDER_CLIENT_ID,
        client_secret=settings.OIDC_PROVIDER_CLIENT_SECRET,
        client_type=application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=application.GRANT_AUTHORIZATION_CODE,
        skip_authorization=True,
        algorithm=application.RS256_ALGORITHM,
    )


def main() -> None:
    server = make_server("127.0.0.1", 0, None, ThreadingWSGIServer, QuietHandler)
    os.environ["OIDC_PROVIDER_ISSUER"] = f"http://127.0.0.1:{server.server_port}/o"
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.oidc_provider.settings"
    django.setup()
    call_command("migrate", run_syncdb=True, verbosity=0)
    create_client()
    server.set_app(WSGIHandler())
    print(f"listening on {server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

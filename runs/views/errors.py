"""What a request that raised is answered (Django's ``handler500``): the agent API's
JSON for anything under /api/, never a page; for people, a plain page. The database
or the artifact store out of reach (``api.out_of_reach``) is a 503 that says to try
again shortly, not a 500. The exception's text goes to the server log, never into the answer."""

import sys

from django.http import HttpResponse
from django.template import loader
from django.views import defaults

from runs.api import api


def server_error(request) -> HttpResponse:
    if request.path.startswith("/api/"):
        return api.server_error(request)
    if (what := api.out_of_reach(sys.exc_info()[1])) is None:
        return defaults.server_error(request)
    # Rendered without the request: its context processors would ask the database.
    page = HttpResponse(loader.render_to_string("503.html", {"what": what}), status=503)
    page["Retry-After"] = str(api.RETRY_AFTER_SECONDS)
    return page

"""``/healthz`` and ``/metrics`` answer whatever ``Host`` their caller sends.

A load balancer checks each backend by its address (``Host: 10.0.3.7:8000``) and
Prometheus scrapes each target by its own, neither of them a name in
``OVERSIGHT_ALLOWED_HOSTS``: Django's check of the host would answer them 400 and the
backend would look down. These two are answered here, before anything reads the host,
and by their own views (``/metrics`` still asks for its bearer token); every other page
keeps the check, which stops links and password resets pointing at a forged host."""

from django.urls import resolve

PROBES = {"/healthz", "/metrics"}


class ProbesAnyHostMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        # Reads only: any other method goes the usual way (and meets the CSRF check).
        if request.path_info in PROBES and request.method in ("GET", "HEAD"):
            found = resolve(request.path_info)
            return found.func(request, *found.args, **found.kwargs)
        return self.get_response(request)

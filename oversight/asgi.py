"""ASGI entry point for Oversight."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oversight.settings")

application = get_asgi_application()

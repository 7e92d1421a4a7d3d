"""WSGI entry point for Oversight."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oversight.settings")

application = get_wsgi_application()

"""Oversight: human oversight and approvals for AI agents.

This package holds the Django project (settings, urls, wsgi/asgi). The agent client is
its own distribution, ``oversight-client`` in ``client/`` (import ``oversight_client``).
"""

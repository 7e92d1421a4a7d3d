"""Oversight: human oversight and approvals for AI agents.

This package holds the Django project (settings, urls, wsgi/asgi). It imports nothing
at package level so that ``oversight.client`` stays importable without Django.
"""

"""The agent API under /api/v1/: per-project bearer tokens, JSON validated against
schemas (django-ninja), an OpenAPI document and locally served docs."""

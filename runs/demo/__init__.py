"""The demo: a target service for http.request, and a scripted agent."""

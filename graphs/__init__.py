"""LangGraph checkpoints stored in Oversight's database.

The models and migrations import only Django, so the app is always installed and the
schema never depends on what else is. Only ``graphs.saver`` (the checkpointer) and
``graphs.decode`` (channel values for the audit page) import LangGraph, from the server's
``langgraph`` extra; the server's core never imports either at start-up.
"""

"""Shared helpers for status fields: every TextChoices column gets a CheckConstraint."""

from django.db import models


def choices_constraint(field: str, choices: type[models.TextChoices], name: str):
    return models.CheckConstraint(condition=models.Q(**{f"{field}__in": choices.values}), name=name)

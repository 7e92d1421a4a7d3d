#!/usr/bin/env python
"""Django's command-line utility for Oversight."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oversight.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as error:  # a setting: one line naming it, not a traceback
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()

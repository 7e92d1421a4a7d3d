"""The server's version, as pyproject.toml writes it: the one place it is set (bumped
with a CHANGELOG.md entry). Shown in every page's footer and in ``/healthz``."""

import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
VERSION: str = tomllib.loads(PYPROJECT.read_text())["project"]["version"]

"""The documentation as the tests read it: the README and every page of the site in
docs/, so that a promise holds wherever it was moved to."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def page(name: str) -> str:
    """One page of the site, e.g. ``operating/settings``."""
    return (DOCS / f"{name}.md").read_text()


def everything() -> str:
    """The README and every page, one after the other."""
    pages = sorted(DOCS.rglob("*.md"))
    return "\n".join(path.read_text() for path in [ROOT / "README.md", *pages])

"""One version for the server, written once (pyproject.toml), shown where people and
monitors look for it, and released in the changelog with the client's version beside it."""

import re

from oversight.version import VERSION
from oversight_client import __version__ as CLIENT_VERSION
from tests.documentation import ROOT


def newest_release() -> tuple[str, str]:
    """The newest release's heading version and its section's text in CHANGELOG.md."""
    changelog = (ROOT / "CHANGELOG.md").read_text()
    found = re.search(
        r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$(.*?)(?=^## |\Z)", changelog, re.M | re.S
    )
    assert found, "no release heading such as '## [1.2.3] - 2026-12-02' in CHANGELOG.md"
    return found.group(1), found.group(2)


def test_the_changelog_releases_this_version_with_the_clients():
    version, section = newest_release()
    assert version == VERSION
    assert f"oversight-client {CLIENT_VERSION}" in section


def test_every_page_shows_the_version_in_its_footer(client, reviewer):
    assert f"Oversight {VERSION}</footer>" in client.get("/accounts/login/").text
    client.force_login(reviewer)
    assert f"Oversight {VERSION}</footer>" in client.get("/approvals/").text


def test_healthz_says_the_version(client, db):
    assert client.get("/healthz?scope=web").json()["version"] == VERSION

"""The documentation site builds in strict mode (a broken link or anchor, or a page in no
table of contents, fails it), and what it draws from the code matches the code."""

import re
import shutil
import subprocess

import pytest

from runs import machines
from tests.documentation import DOCS, ROOT


def sphinx(source, out) -> subprocess.CompletedProcess:
    """``bin/docs build`` without its setup step: strict, with the site's configuration."""
    strict = ("-W", "--keep-going", "-n", "-q", "-b", "dirhtml", "-c", DOCS)
    return subprocess.run(
        [ROOT / ".venv/bin/sphinx-build", *strict, source, out],
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    built = sphinx(DOCS, out)
    assert built.returncode == 0, built.stderr
    return out


def test_the_site_builds_without_a_warning(site):
    assert (site / "index.html").is_file()
    assert (site / "operating" / "settings" / "index.html").is_file()


@pytest.mark.parametrize(
    ("page", "machine"),
    [
        ("concepts/index.html", machines.RUN),
        ("concepts/operations/index.html", machines.OPERATION),
        ("concepts/requests/index.html", machines.REQUEST),
        ("concepts/rollback/index.html", machines.ALERT),
    ],
)
def test_each_state_machine_is_drawn_from_its_table(site, page, machine):
    """Every edge the code allows is in the page's diagram, and no other."""
    html = (site / page).read_text()
    drawn = set(re.findall(r"^\s*(\w+) --&gt; (\w+)$", html, re.MULTILINE))
    allowed = {(a, b) for a, targets in machine.edges.items() for b in targets}
    assert drawn == allowed


def test_no_page_of_the_site_is_left_out_of_the_tables_of_contents(tmp_path):
    """An orphan page fails the strict build: the nav reaches everything written. (A
    copy of the pages, built with the site's own configuration: the suite on the other
    backend may be building the checkout's at the same time.)"""
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "CHANGELOG.md", tmp_path)
    (tmp_path / "docs" / "orphan-probe.md").write_text("# Orphan\n")
    built = sphinx(tmp_path / "docs", tmp_path / "site")
    assert built.returncode != 0
    assert "orphan-probe" in built.stderr and "toctree" in built.stderr

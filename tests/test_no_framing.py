"""docs/operating/security.md: "Pages run under Django's Content Security Policy: ...
no framing." Every page, signed in or not, an error page included, forbids any other
site to frame it: ``frame-ancestors 'none'`` for browsers that read the policy,
``X-Frame-Options: DENY`` for those that do not."""

import pytest

from tests.helpers import sign_in


def policy(response) -> dict[str, str]:
    """The Content-Security-Policy header, by directive."""
    directives = (
        part.strip().split(None, 1) for part in response["Content-Security-Policy"].split(";")
    )
    return {parts[0]: parts[1] if len(parts) > 1 else "" for parts in directives if parts}


def assert_unframeable(response) -> None:
    assert policy(response)["frame-ancestors"] == "'none'"
    assert response["X-Frame-Options"] == "DENY"


@pytest.mark.parametrize("path", ["/accounts/login/", "/no-such-page/"])
def test_pages_cannot_be_framed_before_sign_in(client, db, path):
    assert_unframeable(client.get(path))


@pytest.mark.parametrize("path", ["/", "/approvals/", "/alerts/", "/no-such-page/"])
def test_pages_cannot_be_framed_once_signed_in(client, reviewer, path):
    assert sign_in(client, "reviewer", "pw").status_code == 302
    response = client.get(path)
    assert response.status_code in (200, 404)
    assert_unframeable(response)

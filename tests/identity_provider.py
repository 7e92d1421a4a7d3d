"""The suite's own OpenID Connect provider (tests/oidc_provider/) as a fixture: one process
per test worker, on loopback, started with ``pytest_plugins = ["tests.identity_provider"]``
and the ``identity_provider`` fixture. A test sets the client's redirect URIs and the
people who sign in, with their groups, through the provider's setup endpoints; the
people and URIs stay for the worker's later tests until set again."""

import secrets
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from oversight.env import RoleRule
from oversight.single_sign_on import _discovery
from tests.processes import ROOT, Output, clean_env

LISTENING = r"^listening on (\d+)$"
# Everyone's password at the provider, and the rules Oversight maps their groups by.
PASSWORD = "correct horse battery"
ROLES = (
    RoleRule("payments-reviewers", "acme", "reviewer"),
    RoleRule("payments-auditors", "acme", "auditor"),
    RoleRule("ghost-team", "no-such-project", "admin"),
)


@dataclass(frozen=True)
class IdentityProvider:
    base_url: str
    client_id: str
    client_secret: str
    setup_key: str
    log: Path  # what the provider wrote on stderr: its errors

    @property
    def issuer(self) -> str:
        return f"{self.base_url}/o"

    def register(
        self, redirect_uris: Sequence[str], post_logout_redirect_uris: Sequence[str] = ()
    ) -> None:
        """The client's redirect URIs and post-logout redirect URIs, replacing the last."""
        self._setup(
            "client",
            redirect_uris=list(redirect_uris),
            post_logout_redirect_uris=list(post_logout_redirect_uris),
        )

    def set_user(
        self,
        username: str,
        password: str,
        *,
        email: str,
        groups: Sequence[str],
        name: str = "",
        email_verified: bool = True,
    ) -> str:
        """Creates or updates the person ``username``, their groups replaced; their ``sub``."""
        person = {"username": username, "password": password, "email": email, "name": name}
        return self._setup("user", **person, groups=list(groups), email_verified=email_verified)[
            "sub"
        ]

    def _setup(self, what: str, **body) -> dict:
        answer = requests.post(
            f"{self.base_url}/setup/{what}",
            json=body,
            headers={"X-Provider-Key": self.setup_key},
            timeout=30,
        )
        assert answer.status_code == 200, f"{answer.text}\n{self.log.read_text()[-3000:]}"
        return answer.json()


def started(directory: Path) -> tuple[IdentityProvider, subprocess.Popen]:
    """The provider started with its database in ``directory``, in an environment without
    Oversight's settings, once it listens."""
    log = directory / "provider.log"
    chosen = {
        "OIDC_PROVIDER_SETUP_KEY": secrets.token_urlsafe(32),
        "OIDC_PROVIDER_CLIENT_ID": "oversight",
        "OIDC_PROVIDER_CLIENT_SECRET": secrets.token_urlsafe(32),
    }
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.oidc_provider.serve"],
            cwd=ROOT,
            env={**clean_env(directory), "OIDC_PROVIDER_DIR": str(directory), **chosen},
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        port = Output(process.stdout).wait_for(LISTENING, process)[1]
    except AssertionError as error:
        process.kill()
        raise AssertionError(f"{error}\n{log.read_text()[-3000:]}") from None
    provider = IdentityProvider(
        base_url=f"http://127.0.0.1:{port}",
        client_id=chosen["OIDC_PROVIDER_CLIENT_ID"],
        client_secret=chosen["OIDC_PROVIDER_CLIENT_SECRET"],
        setup_key=chosen["OIDC_PROVIDER_SETUP_KEY"],
        log=log,
    )
    return provider, process


@pytest.fixture(scope="session")
def identity_provider(tmp_path_factory) -> Iterator[IdentityProvider]:
    provider, process = started(tmp_path_factory.mktemp("identity-provider"))
    try:
        yield provider
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def sso(settings, live_server, identity_provider, project):
    """Oversight (the live server) configured for the provider, with role rules for the
    project ``acme``; plain-HTTP cookies, as the live server speaks HTTP."""
    identity_provider.register(
        [f"{live_server.url}/accounts/sso/callback/"], [f"{live_server.url}/accounts/login/"]
    )
    settings.OVERSIGHT_OIDC_ISSUER = identity_provider.issuer
    settings.OIDC_RP_CLIENT_ID = identity_provider.client_id
    settings.OIDC_RP_CLIENT_SECRET = identity_provider.client_secret
    settings.OVERSIGHT_OIDC_NAME = "Example Corp"
    settings.OVERSIGHT_OIDC_ROLES = ROLES
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = False
    _discovery.cache_clear()
    yield identity_provider
    _discovery.cache_clear()

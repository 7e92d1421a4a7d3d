"""The suite's own OpenID Connect provider (tests/identity_provider.py) on its own, spoken
to as a relying party and its user's browser do: discovery, the code flow with PKCE and
a nonce, the ID token checked with the provider's published keys, userinfo, groups that
change between two sign-ins, and RP-initiated logout."""

import base64
import hashlib
import re
import secrets
from urllib.parse import parse_qs, urljoin, urlsplit

import jwt
import pytest
import requests

pytest_plugins = ["tests.identity_provider"]

# The relying party's addresses: never fetched, the test reads the redirects to them.
CALLBACK = "http://127.0.0.1:9/oidc/callback/"
SIGNED_OUT = "http://127.0.0.1:9/signed-out/"
SCOPES = "openid email profile groups"


@pytest.fixture
def provider(identity_provider):
    identity_provider.register([CALLBACK], [SIGNED_OUT])
    return identity_provider


@pytest.fixture
def discovery(provider) -> dict:
    answer = requests.get(f"{provider.issuer}/.well-known/openid-configuration", timeout=30)
    answer.raise_for_status()
    return answer.json()


def s256(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def authorize(
    browser: requests.Session, provider, discovery: dict
) -> tuple[requests.Response, dict]:
    """The authorization request as a relying party sends it, with PKCE and a nonce: the
    provider's answer (not followed) and what the relying party keeps for the callback."""
    kept = {"state": secrets.token_urlsafe(), "nonce": secrets.token_urlsafe()}
    verifier = secrets.token_urlsafe(48)
    params = {
        "response_type": "code",
        "client_id": provider.client_id,
        "redirect_uri": CALLBACK,
        "scope": SCOPES,
        "code_challenge": s256(verifier),
        "code_challenge_method": "S256",
        **kept,
    }
    answer = browser.get(discovery["authorization_endpoint"], params=params, allow_redirects=False)
    return answer, {**kept, "code_verifier": verifier}


def followed(browser: requests.Session, answer: requests.Response) -> requests.Response:
    return browser.get(urljoin(answer.url, answer.headers["Location"]), allow_redirects=False)


def asks_for_password(answer: requests.Response) -> bool:
    return answer.is_redirect and urlsplit(answer.headers["Location"]).path == "/accounts/login/"


def sign_in(browser: requests.Session, asked: requests.Response, username: str, password: str):
    """The sign-in form the authorization request redirected to, filled in and sent, and
    the authorization request it then goes back to."""
    form = followed(browser, asked)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)[1]
    sent = browser.post(
        form.url,
        data={"csrfmiddlewaretoken": csrf, "username": username, "password": password},
        allow_redirects=False,
    )
    return followed(browser, sent)


def code_from(answer: requests.Response, kept: dict) -> str:
    """The authorization code of the redirect to the relying party's callback."""
    assert answer.is_redirect, answer.text
    location = answer.headers["Location"]
    assert location.startswith(f"{CALLBACK}?"), location
    query = parse_qs(urlsplit(location).query)
    assert query["state"] == [kept["state"]]
    return query["code"][0]


def exchange(provider, discovery: dict, code: str, kept: dict, *, basic: bool = False) -> dict:
    """The token request, the client authenticated by ``client_secret_post`` or, with
    ``basic``, by HTTP Basic."""
    client = {"client_id": provider.client_id, "client_secret": provider.client_secret}
    grant = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": CALLBACK,
        "code_verifier": kept["code_verifier"],
    }
    answer = requests.post(
        discovery["token_endpoint"],
        data=grant if basic else {**grant, **client},
        auth=(provider.client_id, provider.client_secret) if basic else None,
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def verified(provider, discovery: dict, id_token: str) -> dict:
    """The ID token's claims, its signature checked with the key published at the JWKS
    URI, its audience and issuer with the client's and the provider's."""
    key = jwt.PyJWKClient(discovery["jwks_uri"]).get_signing_key_from_jwt(id_token)
    return jwt.decode(
        id_token, key, algorithms=["RS256"], audience=provider.client_id, issuer=provider.issuer
    )


def signed_in(provider, discovery, username: str, password: str, *, basic: bool = False):
    """A whole sign-in from a new browser: the browser, the tokens and the ID token's
    claims (its nonce checked)."""
    browser = requests.Session()
    asked, kept = authorize(browser, provider, discovery)
    assert asks_for_password(asked)
    code = code_from(sign_in(browser, asked, username, password), kept)
    tokens = exchange(provider, discovery, code, kept, basic=basic)
    claims = verified(provider, discovery, tokens["id_token"])
    assert claims["nonce"] == kept["nonce"]
    return browser, tokens, claims


def test_discovery_names_the_exact_issuer_and_the_endpoints(provider, discovery):
    assert discovery["issuer"] == provider.issuer == f"{provider.base_url}/o"
    endpoints = ["authorization", "token", "userinfo", "end_session"]
    for url in [*(discovery[f"{name}_endpoint"] for name in endpoints), discovery["jwks_uri"]]:
        assert url.startswith(f"{provider.issuer}/")
    assert set(discovery["scopes_supported"]) == {"openid", "email", "profile", "groups"}
    assert "RS256" in discovery["id_token_signing_alg_values_supported"]
    assert discovery["code_challenge_methods_supported"] == ["S256"]
    assert {"email_verified", "preferred_username", "groups"} <= set(discovery["claims_supported"])


def test_code_flow_gives_a_signed_id_token_and_userinfo_with_the_groups(provider, discovery):
    sub = provider.set_user(
        "ada", "ada-pw", email="ada@example.com", groups=["reviewers", "finance"], name="Ada L"
    )
    _, tokens, claims = signed_in(provider, discovery, "ada", "ada-pw")
    assert claims["sub"] == sub
    assert claims["groups"] == ["finance", "reviewers"]
    assert claims["email"] == "ada@example.com" and claims["email_verified"] is True
    assert (claims["preferred_username"], claims["name"]) == ("ada", "Ada L")
    userinfo = requests.get(
        discovery["userinfo_endpoint"],
        headers={"Authorization": f"Bearer {tokens['access_token']}"},
        timeout=30,
    ).json()
    assert (userinfo["sub"], userinfo["groups"]) == (sub, claims["groups"])
    assert userinfo["email_verified"] is True


def test_a_code_is_refused_without_its_pkce_verifier(provider, discovery):
    provider.set_user("bob", "bob-pw", email="bob@example.com", groups=[])
    browser = requests.Session()
    asked, kept = authorize(browser, provider, discovery)
    code = code_from(sign_in(browser, asked, "bob", "bob-pw"), kept)
    answer = requests.post(
        discovery["token_endpoint"],
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": CALLBACK,
            "code_verifier": secrets.token_urlsafe(48),
            "client_id": provider.client_id,
            "client_secret": provider.client_secret,
        },
        timeout=30,
    )
    assert answer.status_code == 400
    assert answer.json()["error"] == "invalid_grant"


def test_groups_changed_show_in_the_next_sign_in(provider, discovery):
    sub = provider.set_user("grace", "grace-pw", email="grace@example.com", groups=["reviewers"])
    assert signed_in(provider, discovery, "grace", "grace-pw")[2]["groups"] == ["reviewers"]

    again = provider.set_user(
        "grace", "grace-pw", email="grace@example.com", groups=["auditors"], email_verified=False
    )
    _, _, claims = signed_in(provider, discovery, "grace", "grace-pw", basic=True)
    assert again == claims["sub"] == sub
    assert claims["groups"] == ["auditors"]
    assert claims["email_verified"] is False


def test_logout_ends_the_provider_session_and_goes_back_to_the_relying_party(provider, discovery):
    provider.set_user("linus", "linus-pw", email="linus@example.com", groups=["reviewers"])
    browser, tokens, _ = signed_in(provider, discovery, "linus", "linus-pw")
    again, kept = authorize(browser, provider, discovery)
    assert code_from(again, kept), "signed in at the provider: no password asked again"

    logout = {"id_token_hint": tokens["id_token"], "state": "bye"}
    end_session = discovery["end_session_endpoint"]
    elsewhere = {**logout, "post_logout_redirect_uri": "http://127.0.0.1:9/not-registered/"}
    assert browser.get(end_session, params=elsewhere, allow_redirects=False).status_code == 400
    out = browser.get(
        end_session,
        params={**logout, "post_logout_redirect_uri": SIGNED_OUT},
        allow_redirects=False,
    )
    assert out.is_redirect
    assert out.headers["Location"] == f"{SIGNED_OUT}?state=bye"
    assert asks_for_password(authorize(browser, provider, discovery)[0])


def test_setup_endpoints_refuse_without_the_key_and_bad_bodies(provider):
    url = f"{provider.base_url}/setup/client"
    body = {"redirect_uris": [CALLBACK], "post_logout_redirect_uris": []}
    for key in ({}, {"X-Provider-Key": "guessed"}):
        assert requests.post(url, json=body, headers=key, timeout=30).status_code == 403
    key = {"X-Provider-Key": provider.setup_key}
    bad = requests.post(url, json={**body, "redirect_uris": CALLBACK}, headers=key, timeout=30)
    assert (bad.status_code, bad.json()) == (
        400,
        {"error": "bad request: redirect_uris must be a list"},
    )
    assert requests.get(url, headers=key, timeout=30).status_code == 405

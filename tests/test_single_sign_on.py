"""Single sign-on through a real OpenID provider on loopback (tests/oidc_provider/: a
second Django site with django-oauth-toolkit), driven as a browser would be: redirects
followed, the provider's own sign-in form filled in, cookies kept per site."""

import re
import time
from datetime import timedelta
from html import unescape
from urllib.parse import parse_qs, urljoin, urlsplit

import jwt
import pytest
import requests
from axes.models import AccessAttempt
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation

from oversight.env import ROLE_NAMES, RoleRule, env_issuer, env_role_rules
from oversight.single_sign_on import ProviderSignIn
from runs.clock import db_now
from runs.engine.worker import Worker
from runs.models import Membership, Project, ProviderIdentity, Role
from runs.permissions import role_group
from tests.conftest import make_user
from tests.identity_provider import PASSWORD

pytest_plugins = ["tests.identity_provider", "tests.ports"]
pytestmark = pytest.mark.django_db(transaction=True)

User = get_user_model()


def submit_form(web: requests.Session, page: requests.Response, **fields) -> requests.Response:
    """Fill in and send the first form on ``page`` (its hidden inputs kept), as a
    person's browser would, following the redirects after it."""
    form = re.search(r"<form[^>]*>(.*?)</form>", page.text, re.S)
    action = re.search(r'<form[^>]*action="([^"]*)"', page.text)
    hidden = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form.group(1)))
    data = {name: unescape(value) for name, value in hidden.items()} | fields
    url = urljoin(page.url, unescape(action.group(1))) if action and action.group(1) else page.url
    return web.post(url, data=data, headers={"Referer": page.url})


def sign_in(web: requests.Session, base: str, username: str) -> requests.Response:
    """Press "Sign in with …" and, if the provider asks who this is, answer."""
    page = web.get(f"{base}/accounts/sso/start/")
    if 'name="password"' in page.text and urlsplit(page.url).netloc != urlsplit(base).netloc:
        page = submit_form(web, page, username=username, password=PASSWORD)
    return page


def signed_in_as(web: requests.Session, base: str) -> str | None:
    page = web.get(f"{base}/account/", allow_redirects=False)
    if page.status_code != 200:
        return None
    return re.search(r'<div class="who">\s*<a href="[^"]*">([^<]+)</a>', page.text).group(1)


def roles_of(user) -> set[tuple[str, str, bool]]:
    return set(
        Membership.objects.filter(user=user).values_list(
            "project__slug", "role__name", "from_sign_in"
        )
    )


def test_the_login_page_offers_the_provider(sso, live_server):
    page = requests.get(f"{live_server.url}/accounts/login/")

    assert "Sign in with Example Corp" in page.text
    assert 'name="password"' in page.text  # passwords are on too, by default


def test_first_sign_in_makes_an_account_with_the_roles_of_its_groups(sso, live_server):
    sub = sso.set_user(
        "dana", PASSWORD, email="dana@example.com", groups=["payments-reviewers", "ghost-team"]
    )
    web = requests.Session()

    landed = sign_in(web, live_server.url, "dana")

    assert landed.status_code == 200
    assert urlsplit(landed.url).path == "/"
    assert signed_in_as(web, live_server.url) == "dana"
    dana = User.objects.get(username="dana")
    assert not dana.has_usable_password()
    assert dana.email == "dana@example.com"
    assert ProviderIdentity.objects.get(user=dana).subject == sub
    # The ghost team's project does not exist: that rule grants nothing.
    assert roles_of(dana) == {("acme", Role.REVIEWER, True)}
    assert web.get(f"{live_server.url}/approvals/").status_code == 200


def test_a_person_removed_from_the_group_loses_the_role_at_the_next_sign_in(
    sso, live_server, other_project
):
    sso.set_user("erin", PASSWORD, email="erin@example.com", groups=["payments-reviewers"])
    sign_in(requests.Session(), live_server.url, "erin")
    erin = User.objects.get(username="erin")
    # An admin also made her an auditor of another project, by hand.
    other_project.memberships.create(user=erin, role=role_group(Role.AUDITOR))
    sso.set_user("erin", PASSWORD, email="erin@example.com", groups=["payments-auditors"])

    web = requests.Session()
    sign_in(web, live_server.url, "erin")

    assert roles_of(erin) == {("acme", Role.AUDITOR, True), ("other", Role.AUDITOR, False)}
    assert web.get(f"{live_server.url}/approvals/").status_code == 403

    sso.set_user("erin", PASSWORD, email="erin@example.com", groups=[])
    sign_in(requests.Session(), live_server.url, "erin")

    assert roles_of(erin) == {("other", Role.AUDITOR, False)}


def test_signing_in_again_keeps_one_account_and_follows_the_provider(sso, live_server):
    """A sequence, not one call: the second and third sign-ins find the same account by
    its subject, even after the provider renamed the person and changed their address."""
    sso.set_user("fay", PASSWORD, email="fay@example.com", groups=["payments-reviewers"])
    for email in ("fay@example.com", "fay@example.com", "fay.new@example.com"):
        sso.set_user("fay", PASSWORD, email=email, groups=["payments-reviewers"])
        web = requests.Session()
        sign_in(web, live_server.url, "fay")
        assert signed_in_as(web, live_server.url) == "fay"

    assert User.objects.filter(provider_identities__isnull=False).count() == 1
    assert User.objects.get(username="fay").email == "fay.new@example.com"
    assert Membership.objects.filter(user__username="fay").count() == 1


def test_an_existing_account_is_linked_only_by_an_address_the_provider_vouches_for(
    sso, live_server, project
):
    gail = make_user("gail", project, Role.REVIEWER)
    hugo = make_user("hugo", project, Role.REVIEWER)
    sso.set_user("gail.sso", PASSWORD, email="gail@example.com", groups=[])
    sso.set_user("hugo.sso", PASSWORD, email="hugo@example.com", groups=[], email_verified=False)

    as_gail, as_hugo = requests.Session(), requests.Session()
    sign_in(as_gail, live_server.url, "gail.sso")
    sign_in(as_hugo, live_server.url, "hugo.sso")

    assert signed_in_as(as_gail, live_server.url) == "gail"  # her account, her history
    assert ProviderIdentity.objects.get(subject__isnull=False, user=gail)
    assert signed_in_as(as_hugo, live_server.url) == "hugo.sso"  # a new account
    assert not ProviderIdentity.objects.filter(user=hugo).exists()
    assert roles_of(hugo) == {("acme", Role.REVIEWER, False)}


def test_signing_out_ends_the_providers_session_too(sso, live_server):
    sso.set_user("ivan", PASSWORD, email="ivan@example.com", groups=["payments-reviewers"])
    web = requests.Session()
    sign_in(web, live_server.url, "ivan")
    home = web.get(f"{live_server.url}/").text
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', home).group(1)

    out = web.post(
        f"{live_server.url}/accounts/logout/",
        data={"csrfmiddlewaretoken": csrf},
        headers={"Referer": f"{live_server.url}/"},
    )
    # A page that goes on to the provider's sign-out by itself, which comes back here.
    onward = unescape(re.search(r'id="provider-sign-out" href="([^"]+)"', out.text).group(1))
    assert onward.startswith(sso.issuer)
    back = web.get(onward)

    assert back.url == f"{live_server.url}/accounts/login/"
    assert signed_in_as(web, live_server.url) is None
    # The provider forgot them: signing in again asks for the password.
    again = web.get(f"{live_server.url}/accounts/sso/start/")
    assert 'name="password"' in again.text
    assert urlsplit(again.url).netloc == urlsplit(sso.issuer).netloc


def test_a_deactivated_account_is_refused_with_a_reason(sso, live_server):
    sso.set_user("judy", PASSWORD, email="judy@example.com", groups=["payments-reviewers"])
    sign_in(requests.Session(), live_server.url, "judy")
    User.objects.filter(username="judy").update(is_active=False)
    web = requests.Session()

    refused = sign_in(web, live_server.url, "judy")

    assert refused.status_code == 403
    assert "deactivated" in refused.text
    assert signed_in_as(web, live_server.url) is None


def test_password_lockouts_do_not_touch_single_sign_on(sso, live_server, settings):
    """The throttle counts and pauses password tries only: a paused account still gets
    in through the provider, and failed provider returns count for nothing."""
    sso.set_user("kim", PASSWORD, email="kim@example.com", groups=["payments-reviewers"])
    sign_in(requests.Session(), live_server.url, "kim")
    web = requests.Session()
    login = web.get(f"{live_server.url}/accounts/login/")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        submit_form(web, login, username="kim", password="wrong")
    paused = submit_form(web, login, username="kim", password="wrong")
    assert paused.status_code == 429

    assert sign_in(web, live_server.url, "kim").status_code == 200
    assert signed_in_as(web, live_server.url) == "kim"

    attempts = AccessAttempt.objects.count()
    for _ in range(10):
        stale = requests.get(f"{live_server.url}/accounts/sso/callback/?state=forged&code=x")
        assert stale.status_code == 400
    assert AccessAttempt.objects.count() == attempts


def test_with_passwords_off_only_the_break_glass_admin_uses_one(sso, live_server, settings):
    make_user("root", None)
    make_user("lee", None)
    settings.OVERSIGHT_PASSWORD_SIGN_IN = False
    settings.OVERSIGHT_BREAK_GLASS_USERS = ["root"]
    as_lee, as_root = requests.Session(), requests.Session()

    page = as_lee.get(f"{live_server.url}/accounts/login/")
    assert "Break-glass administrator" in page.text
    refused = submit_form(as_lee, page, username="lee", password="pw")
    allowed = submit_form(as_root, as_root.get(page.url), username="root", password="pw")

    assert "didn't match" in refused.text
    assert signed_in_as(as_lee, live_server.url) is None
    assert allowed.status_code == 200
    assert signed_in_as(as_root, live_server.url) == "root"


def test_turning_passwords_off_ends_the_sessions_they_began(sso, live_server, settings):
    make_user("mia", None)
    web = requests.Session()
    submit_form(web, web.get(f"{live_server.url}/accounts/login/"), username="mia", password="pw")
    assert signed_in_as(web, live_server.url) == "mia"

    settings.OVERSIGHT_PASSWORD_SIGN_IN = False

    assert signed_in_as(web, live_server.url) is None


def test_an_account_of_the_provider_has_no_password_to_change_here(sso, live_server):
    sso.set_user("ned", PASSWORD, email="ned@example.com", groups=[])
    web = requests.Session()
    sign_in(web, live_server.url, "ned")

    page = web.get(f"{live_server.url}/accounts/password_change/")

    assert urlsplit(page.url).path == "/account/"
    assert "Your sign-in provider keeps your password" in page.text


def test_what_goes_wrong_on_the_way_back_is_a_page_not_an_error(sso, live_server, settings):
    web = requests.Session()
    started = web.get(f"{live_server.url}/accounts/sso/start/", allow_redirects=False)
    state = parse_qs(urlsplit(started.headers["Location"]).query)["state"][0]
    said = {"error": "access_denied", "error_description": "<b>Not today</b>"}

    refused = web.get(f"{live_server.url}/accounts/sso/callback/", params={**said, "state": state})

    assert refused.status_code == 403
    assert "The sign-in provider said: &lt;b&gt;Not today&lt;/b&gt;" in refused.text

    # A client secret the provider does not know: the code is not exchanged.
    settings.OIDC_RP_CLIENT_SECRET = "not-the-secret"
    sso.set_user("olga", PASSWORD, email="olga@example.com", groups=[])
    wrong = sign_in(web, live_server.url, "olga")
    assert wrong.status_code == 403
    assert "refused this sign-in" in wrong.text
    assert not User.objects.filter(username="olga").exists()


def test_a_callback_this_browser_did_not_start_changes_nothing(sso, live_server):
    """A forged link to the callback, with an error or a code, neither signs the person
    out nor shows its text on Oversight's page."""
    sso.set_user("ruth", PASSWORD, email="ruth@example.com", groups=[])
    web = requests.Session()
    sign_in(web, live_server.url, "ruth")
    forged = {"error": "access_denied", "error_description": "Call IT on 555-0100"}

    page = web.get(f"{live_server.url}/accounts/sso/callback/", params=forged)

    assert page.status_code == 400
    assert "555-0100" not in page.text
    assert signed_in_as(web, live_server.url) == "ruth"


def test_a_look_alike_address_links_no_one(sso, live_server):
    """On PostgreSQL a case-insensitive match takes a dotless i for an i: an address the
    provider verified that only looks like someone's does not reach their account."""
    User.objects.filter(pk=make_user("alice", None).pk).update(email="alice@gmail.com")
    sso.set_user("mallory", PASSWORD, email="al\u0131ce@gma\u0131l.com", groups=[])
    web = requests.Session()

    sign_in(web, live_server.url, "mallory")

    assert signed_in_as(web, live_server.url) == "mallory"


def test_a_break_glass_name_is_never_given_to_a_provider_account(sso, live_server, settings):
    settings.OVERSIGHT_BREAK_GLASS_USERS = ["root"]
    sso.set_user("root", PASSWORD, email="someone@example.com", groups=[])
    web = requests.Session()

    sign_in(web, live_server.url, "root")

    assert signed_in_as(web, live_server.url) == "root-2"


def test_roles_from_groups_end_when_no_sign_in_confirms_them(sso, live_server, settings):
    """Oversight learns of groups only at a sign-in: a role they gave lasts
    OVERSIGHT_OIDC_ROLE_SECONDS after the last one, then a worker takes it back (a Slack
    button or a password would otherwise keep it for ever)."""
    sso.set_user("sam", PASSWORD, email="sam@example.com", groups=["payments-reviewers"])
    sign_in(requests.Session(), live_server.url, "sam")
    sam = User.objects.get(username="sam")
    Project.objects.get(slug="acme").memberships.create(user=sam, role=role_group(Role.AUDITOR))

    Worker("test-worker").housekeeping()
    assert roles_of(sam) == {("acme", Role.REVIEWER, True), ("acme", Role.AUDITOR, False)}

    ProviderIdentity.objects.filter(user=sam).update(
        last_sign_in_at=db_now() - timedelta(seconds=settings.OVERSIGHT_OIDC_ROLE_SECONDS + 1)
    )
    Worker("another-worker").housekeeping()

    assert roles_of(sam) == {("acme", Role.AUDITOR, False)}
    sign_in(requests.Session(), live_server.url, "sam")  # and a sign-in gives it again
    assert roles_of(sam) == {("acme", Role.REVIEWER, True), ("acme", Role.AUDITOR, False)}


def test_a_provider_out_of_reach_is_said_so(sso, live_server, settings, refused_port):
    settings.OVERSIGHT_OIDC_ISSUER = f"http://127.0.0.1:{refused_port}/o"

    page = requests.get(f"{live_server.url}/accounts/sso/start/")

    assert page.status_code == 502
    assert "The sign-in provider did not answer" in page.text
    # The password form still works meanwhile (for the break-glass admin).
    assert 'name="password"' in requests.get(f"{live_server.url}/accounts/login/").text


def test_an_issuer_that_names_itself_otherwise_is_refused(sso, live_server, settings):
    settings.OVERSIGHT_OIDC_ISSUER = sso.issuer + "/"

    page = requests.get(f"{live_server.url}/accounts/sso/start/")

    assert page.status_code == 502
    assert "not set up as Oversight expects" in page.text


def test_single_sign_on_is_not_there_while_it_is_off(live_server, db):
    assert requests.get(f"{live_server.url}/accounts/sso/start/").status_code == 404
    page = requests.get(f"{live_server.url}/accounts/login/")
    assert "Sign in with" not in page.text


def test_a_project_created_later_is_granted_at_the_next_sign_in(sso, live_server):
    sso.set_user("pia", PASSWORD, email="pia@example.com", groups=["ghost-team"])
    sign_in(requests.Session(), live_server.url, "pia")
    assert roles_of(User.objects.get(username="pia")) == set()

    Project.objects.create(slug="no-such-project", name="Now there")
    sign_in(requests.Session(), live_server.url, "pia")

    assert roles_of(User.objects.get(username="pia")) == {("no-such-project", Role.ADMIN, True)}


# --- The ID token: what a forged or misdirected one gets ------------------------------------


@pytest.fixture
def signer(settings):
    """A provider's key, and tokens signed with it as that provider would sign them."""
    settings.OVERSIGHT_OIDC_ISSUER = "https://id.example.com"
    settings.OIDC_RP_CLIENT_ID = "oversight"
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def sign(algorithm="RS256", **claims):
        now = int(time.time())
        payload = {
            "iss": "https://id.example.com",
            "aud": "oversight",
            "sub": "42",
            "iat": now,
            "exp": now + 300,
        } | claims
        return jwt.encode(
            {k: v for k, v in payload.items() if v is not None},
            key if algorithm.startswith("RS") else "an-hmac-secret-long-enough-for-sha-256",
            algorithm=algorithm,
        )

    sign.public_key = key.public_key()
    return sign


@pytest.mark.parametrize(
    "claims",
    [
        {"aud": "another-app"},  # issued to someone else
        {"iss": "https://evil.example.com"},  # by someone else
        {"exp": int(time.time()) - 60},  # expired
        {"iat": None},  # no time of issue
    ],
    ids=["audience", "issuer", "expired", "no-iat"],
)
def test_an_id_token_not_for_oversight_is_refused(signer, claims):
    backend = ProviderSignIn()

    with pytest.raises(SuspiciousOperation):
        backend._verify_jws(signer(**claims), signer.public_key)


def test_an_id_token_signed_otherwise_than_configured_is_refused(signer):
    with pytest.raises(SuspiciousOperation):
        ProviderSignIn()._verify_jws(signer(algorithm="HS256"), signer.public_key)


def test_a_good_id_token_is_read(signer):
    assert ProviderSignIn()._verify_jws(signer(), signer.public_key)["sub"] == "42"


def test_claims_of_another_type_or_size_make_a_plain_account(settings, project):
    """What the provider sends is read defensively: no claim can make a sign-in fail with
    a server error, link an account, or grant a role by its shape alone."""
    settings.OVERSIGHT_OIDC_ISSUER = "https://id.example.com"
    settings.OVERSIGHT_OIDC_ROLES = (RoleRule("acme", "acme", "admin"),)
    backend = ProviderSignIn()
    odd = {
        "sub": "7",
        "preferred_username": ["root"],
        "email": {"address": "reviewer@example.com"},
        "email_verified": "true",
        "given_name": "N" * 1000,
        "groups": {"acme": "admin"},
    }

    user = backend.create_user(odd)

    assert user.username == "user"
    assert user.email == ""
    assert user.first_name == "N" * 150
    assert roles_of(user) == set()
    assert not backend.verify_claims({"sub": 7})
    assert not backend.verify_claims({"sub": "x" * 256})


# --- Settings ---------------------------------------------------------------------------------


def test_role_rules_are_read_and_bad_ones_named(monkeypatch):
    monkeypatch.setenv("RULES", "Payments Reviewers=acme:reviewer, auditors=acme:auditor")
    assert env_role_rules("RULES") == (
        RoleRule("Payments Reviewers", "acme", "reviewer"),
        RoleRule("auditors", "acme", "auditor"),
    )
    monkeypatch.setenv("RULES", "auditors=acme:owner")
    with pytest.raises(ImproperlyConfigured, match="names the role 'owner'"):
        env_role_rules("RULES")
    monkeypatch.setenv("RULES", "auditors:acme")
    with pytest.raises(ImproperlyConfigured, match="is not GROUP=PROJECT:ROLE"):
        env_role_rules("RULES")


def test_the_settings_know_every_role():
    assert set(ROLE_NAMES) == set(Role.values)


@pytest.mark.parametrize(
    ("issuer", "accepted"),
    [
        ("https://login.example.com/realms/acme", True),
        ("http://127.0.0.1:8080/o", True),
        ("http://login.example.com", False),
        ("login.example.com", False),
    ],
)
def test_an_issuer_must_be_https_except_on_this_machine(monkeypatch, issuer, accepted):
    monkeypatch.setenv("ISSUER", issuer)
    if accepted:
        assert env_issuer("ISSUER") == issuer
    else:
        with pytest.raises(ImproperlyConfigured, match="must be an https:// URL"):
            env_issuer("ISSUER")

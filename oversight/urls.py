from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.urls import include, path

from oversight import single_sign_on
from oversight.sign_in import SignIn
from runs.api.api import urls as api_urls
from runs.views import home

# Sign-in, sign-out and changing one's own password (which asks for the current one,
# counted by the sign-in throttle).
# No password reset by email: it would make a mailbox the way in, and let anyone have
# Oversight send mail. An admin sets a forgotten password (admin site, or
# manage.py changepassword).
accounts = [
    path("login/", SignIn.as_view(), name="login"),
    path("logout/", single_sign_on.SignOut.as_view(), name="logout"),
    # Single sign-on (404 while it is off). The provider must know the callback's URL.
    path(
        "sso/start/",
        login_not_required(single_sign_on.Start.as_view()),
        name="oidc_authentication_init",
    ),
    path(
        "sso/callback/",
        login_not_required(single_sign_on.Callback.as_view()),
        name="oidc_authentication_callback",
    ),
    path("password_change/", home.PasswordChange.as_view(), name="password_change"),
    path(
        "password_change/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
]

# A request that raised: JSON under /api/, and 503 while the database is out of reach.
handler500 = "runs.views.errors.server_error"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api_urls()),
    path("accounts/", include(accounts)),
    path("", include("runs.urls")),
]

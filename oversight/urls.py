from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from oversight.sign_in import SignInForm
from runs.api.api import urls as api_urls
from runs.views import home

# Sign-in, sign-out and changing one's own password (which asks for the current one,
# counted by the sign-in throttle).
# No password reset by email: it would make a mailbox the way in, and let anyone have
# Oversight send mail. An admin sets a forgotten password (admin site, or
# manage.py changepassword).
accounts = [
    path("login/", auth_views.LoginView.as_view(form_class=SignInForm), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
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

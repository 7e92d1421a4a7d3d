from django.contrib.auth.views import LoginView
from django.urls import include, path
from oauth2_provider import urls as oauth2_urls

from tests.oidc_provider import setup_views

# Only the code flow's endpoints and OpenID Connect's (discovery, JWKS, userinfo, logout):
# none of DOT's pages for managing applications, devices or dynamic registration.
oidc_endpoints = oauth2_urls.base_urlpatterns + oauth2_urls.oidc_urlpatterns

urlpatterns = [
    path("o/", include((oidc_endpoints, "oauth2_provider"))),
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("setup/client", setup_views.setup_client),
    path("setup/user", setup_views.setup_user),
]

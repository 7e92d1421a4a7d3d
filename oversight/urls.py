from django.contrib import admin
from django.urls import include, path

from runs.api.api import urls as api_urls

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api_urls()),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("runs.urls")),
]

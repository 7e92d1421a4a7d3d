from django.urls import path

from runs.views import alerts, approvals, home, operations, runs, tokens

urlpatterns = [
    path("", home.home, name="home"),
    path("healthz", home.healthz, name="healthz"),
    path("account/", home.preferences, name="preferences"),
    path("approvals/", approvals.queue, name="approvals"),
    path("operations/<int:pk>/", operations.detail, name="operation"),
    path("operations/<int:pk>/decide/", operations.decide_view, name="operation-decide"),
    path("operations/<int:pk>/outcome/", operations.outcome, name="operation-outcome"),
    path("runs/", runs.run_list, name="runs"),
    path("runs/<int:pk>/", runs.run_detail, name="run"),
    path("runs/<int:pk>/cancel/", runs.cancel, name="run-cancel"),
    path("runs/<int:pk>/artifacts/<int:ref>/", runs.artifact_download, name="run-artifact"),
    path("alerts/", alerts.alert_list, name="alerts"),
    path("alerts/<int:pk>/acknowledge/", alerts.acknowledge, name="alert-acknowledge"),
    path("alerts/<int:pk>/resolve/", alerts.resolve, name="alert-resolve"),
    path("projects/<slug:slug>/tokens/", tokens.token_list, name="tokens"),
    path("projects/<slug:slug>/tokens/<int:pk>/revoke/", tokens.token_revoke, name="token-revoke"),
]

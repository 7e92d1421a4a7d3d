from django.urls import path

from runs.views import alerts, approvals, audit, home, numbers, operations, requests, runs, tokens

urlpatterns = [
    path("", home.home, name="home"),
    path("healthz", home.healthz, name="healthz"),
    path("metrics", home.metrics, name="metrics"),
    path("account/", home.preferences, name="preferences"),
    path("approvals/", approvals.queue, name="approvals"),
    path("operations/<int:pk>/", operations.detail, name="operation"),
    path("operations/<int:pk>/decide/", operations.decide_view, name="operation-decide"),
    path("operations/<int:pk>/outcome/", operations.outcome, name="operation-outcome"),
    path("requests/<int:pk>/", requests.detail, name="request"),
    path("requests/<int:pk>/answer/", requests.answer_view, name="request-answer"),
    path("runs/", runs.run_list, name="runs"),
    path("runs/<int:pk>/", runs.run_detail, name="run"),
    path("runs/<int:pk>/cancel/", runs.cancel, name="run-cancel"),
    path("runs/<int:pk>/artifacts/<int:ref>/", runs.artifact_download, name="run-artifact"),
    path("audit/", audit.search, name="audit"),
    path("audit/export.csv", audit.export_view, {"fmt": "csv"}, name="audit-export-csv"),
    path("audit/export.jsonl", audit.export_view, {"fmt": "jsonl"}, name="audit-export-jsonl"),
    path("audit/checkpoints/<int:pk>/", audit.checkpoint_detail, name="audit-checkpoint"),
    path("audit/runs/<int:pk>/", audit.run_audit, name="audit-run"),
    path("audit/runs/<int:pk>/verify/", audit.verify_chain, name="audit-verify"),
    path("audit/runs/<int:pk>/evidence.zip", audit.evidence_bundle, name="audit-evidence"),
    path("audit/artifacts/<int:pk>/", audit.artifact_version, name="audit-artifact"),
    path("alerts/", alerts.alert_list, name="alerts"),
    path("alerts/<int:pk>/acknowledge/", alerts.acknowledge, name="alert-acknowledge"),
    path("alerts/<int:pk>/resolve/", alerts.resolve, name="alert-resolve"),
    path("projects/<slug:slug>/tokens/", tokens.token_list, name="tokens"),
    path("projects/<slug:slug>/numbers/", numbers.project_numbers, name="numbers"),
    path("projects/<slug:slug>/tokens/<int:pk>/revoke/", tokens.token_revoke, name="token-revoke"),
]

from django.apps import AppConfig


class GraphsConfig(AppConfig):
    name = "graphs"
    verbose_name = "LangGraph checkpoints"
    default_auto_field = "django.db.models.BigAutoField"

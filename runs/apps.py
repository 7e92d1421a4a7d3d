from django.apps import AppConfig
from django.contrib.auth.signals import user_logged_in
from django.db.models.signals import post_migrate


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Oversight"

    def ready(self) -> None:
        from runs.middleware import on_sign_in
        from runs.permissions import sync_roles

        # After auth has created this app's permissions (auth is installed first),
        # make the role groups hold exactly the permissions ROLE_PERMISSIONS lists.
        post_migrate.connect(sync_roles, sender=self, dispatch_uid="runs.sync_roles")
        user_logged_in.connect(on_sign_in, dispatch_uid="runs.on_sign_in")

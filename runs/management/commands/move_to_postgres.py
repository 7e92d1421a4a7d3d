from urllib.parse import urlsplit

from django.core.management.base import BaseCommand, CommandError

from runs.errors import InvalidInput
from runs.postgres_move import move_to_postgres, there

CHECKS = ("verify_audit_chain", "check_invariants")


class Command(BaseCommand):
    help = (
        "Copy this SQLite installation, stopped, into an empty PostgreSQL database: every row "
        "as it is (each checkpoint chain still verifies), and every artifact into "
        "--artifact-store if one is given. Refused while workers run. The copy is then "
        "checked by verify_audit_chain and check_invariants run against it."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "url",
            help="postgres://USER@HOST:PORT/NAME; put the password in PGPASSWORD rather than "
            "in the URL, which other users see in the list of processes",
        )
        parser.add_argument(
            "--artifact-store",
            default="",
            metavar="URL",
            help="s3://BUCKET/PREFIX?…: copy every artifact into this object store too "
            "(as OVERSIGHT_ARTIFACT_STORE names it)",
        )

    def handle(self, *args, url: str, artifact_store: str, **options) -> None:
        try:
            moved = move_to_postgres(url, artifact_store_url=artifact_store)
        except InvalidInput as error:
            raise CommandError(str(error)) from None
        shown = _without_password(url)
        self.stdout.write(f"copied {moved.rows} rows of {moved.tables} tables into {shown}")
        if artifact_store:
            self.stdout.write(f"copied {moved.artifacts} artifacts into {artifact_store}")
        for sha256 in moved.missing:
            self.stderr.write(f"artifact {sha256} is missing or damaged here: not copied")
        for check in CHECKS:
            done = there(check, url, artifact_store)
            self.stdout.write(f"{check} on {shown}: {done.stdout.strip()}")
            if done.returncode:
                self.stderr.write(done.stderr.strip())
                raise CommandError(
                    f"the copy in {shown} does not pass {check}: this installation is "
                    "untouched; empty that database before moving again"
                )
        self.stdout.write(
            f"Next: set DATABASE_URL={shown} and OVERSIGHT_SECRET_KEY to this installation's "
            "key (OVERSIGHT_VAR_DIR/secret_key unless set) for every process"
            + (f", and OVERSIGHT_ARTIFACT_STORE={artifact_store}" if artifact_store else "")
            + ", then start the web and the workers."
        )


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":…@", 1)).geturl()

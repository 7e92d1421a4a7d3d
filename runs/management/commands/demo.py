import importlib.util
import os
import secrets
import sys

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from runs.management.commands.seed_demo import AGENT_OWNER
from runs.models import AgentToken, Project
from runs.services.tokens import issue_token
from runs.supervisor import Child, Supervisor

LANGGRAPH_THREADS = "invoices-"  # and a random suffix


class Command(BaseCommand):
    help = (
        "Start Oversight with demo data: migrate, load the demo, then run the web app, a "
        "worker, the demo's HTTP target and a scripted agent, each restarted if it dies. "
        "Stays in the foreground; Ctrl-C stops everything it started."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--addr", default="127.0.0.1:8000", help="Address to serve on.")
        parser.add_argument("--target-port", type=int, default=8001)
        parser.add_argument(
            "--langgraph",
            action="store_true",
            help="Also run the example LangGraph agent (examples/langgraph_agent.py) on one "
            "thread, checkpointed in the demo's database (needs `bin/setup langgraph`).",
        )

    def handle(self, *args, addr: str, target_port: int, langgraph: bool, **options) -> None:
        if langgraph and importlib.util.find_spec("langgraph") is None:
            raise CommandError("--langgraph needs LangGraph: run `bin/setup langgraph` first")
        target = f"127.0.0.1:{target_port}"
        # The children read this through settings: the agent's HTTP calls go to the target.
        allowed = [*settings.OVERSIGHT_HTTP_ALLOWED_HOSTS, target]
        os.environ["OVERSIGHT_HTTP_ALLOWED_HOSTS"] = ",".join(allowed)
        # The links in reviewers' emails point where this demo serves (unless set).
        os.environ.setdefault("OVERSIGHT_BASE_URL", served_at(addr))
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        self.stdout.write(f"database: {settings.DATABASES['default']['NAME']}")
        call_command("seed_demo", stdout=self.stdout)
        self.stdout.write(self.style.SUCCESS(f"Oversight is running at {served_at(addr)}/"))
        self.stdout.write("Sign in with one of the users above. Press Ctrl-C to stop.")
        self.stdout.flush()
        os.environ["OVERSIGHT_AGENT_TOKEN"] = self._agent_token("demo-agent")
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        children = [
            Child("web", [*manage, "runserver", "--noreload", addr]),
            Child("target", [*manage, "demo_target", "--port", str(target_port)]),
            Child("worker", [*manage, "runworker", "--name", "demo-worker"]),
            Child(
                "agent",
                [*manage, "demo_agent", "--api", f"http://{addr}", "--target", f"http://{target}"],
            ),
        ]
        if langgraph:
            children.append(self._langgraph_agent(addr))
        sys.exit(Supervisor(children, write=self.stderr.write).run())

    def _langgraph_agent(self, addr: str) -> Child:
        """The example LangGraph agent on a new thread: it asks the reviewers which
        invoice to pay, proposes the payment and ends when the thread does (restarted
        only if it crashes, going on from its checkpoints). A new thread for each demo,
        as the demo's token is new: a token reaches only the runs it opened."""
        example = settings.BASE_DIR / "examples" / "langgraph_agent.py"
        thread = f"{LANGGRAPH_THREADS}{secrets.token_hex(3)}"
        state = settings.VAR_DIR / "langgraph-demo" / thread
        argv = [sys.executable, str(example), f"http://{addr}", thread]
        argv += ["--checkpointer", "oversight", "--project", "demo", "--state", str(state)]
        env = {
            "OVERSIGHT_TOKEN": self._agent_token("langgraph-agent"),
            "PYTHONPATH": str(settings.BASE_DIR),
        }
        return Child("langgraph", argv, once=True, env=env)

    def _agent_token(self, name: str) -> str:
        """A fresh token for a demo agent. The previous demo's is revoked and renamed,
        not deleted: its sessions and proposals still point at it."""
        project = Project.objects.get(slug="demo")
        for old in AgentToken.objects.filter(project=project, name=name):
            old.revoke()
            AgentToken.objects.filter(pk=old.pk).update(name=f"{name}-{old.prefix}")
        # Issued by the member it acts for, so it acts at once, with no acceptance.
        owner = get_user_model().objects.get(username=AGENT_OWNER)
        _, plain = issue_token(
            project=project, name=name, issued_by=owner, owner_username=AGENT_OWNER
        )
        return plain


def served_at(addr: str) -> str:
    """The base URL of a server listening on ``addr`` (host:port), as a browser on this
    machine reaches it: an address on every interface is reached at 127.0.0.1."""
    host, _, port = addr.rpartition(":")
    if host in ("", "0.0.0.0", "[::]"):
        host = "127.0.0.1"
    return f"http://{host}:{port}"

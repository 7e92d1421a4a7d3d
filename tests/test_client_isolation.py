"""The client (``oversight_client``) imports only the standard library: it works where
Django is absent."""

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
WITHOUT_DJANGO = (
    "import sys; sys.modules['django'] = None; sys.modules['ninja'] = None; "
    "sys.modules['pydantic'] = None; import oversight_client as c; print(c.Oversight.__name__)"
)


def test_the_client_imports_without_django():
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_DJANGO],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Oversight"

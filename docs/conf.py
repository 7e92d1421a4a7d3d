"""The documentation site: Sphinx reading Markdown (MyST), built by ``bin/docs``.

Strict (``-W -n``): a link to a page or heading that does not exist, or a page in no
table of contents, is a warning and fails the build."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).parent / "_ext")]

from oversight.version import VERSION as release  # noqa: E402  (the one place it is read)

project = "Oversight"
extensions = ["myst_parser", "sphinxcontrib.mermaid", "machines"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_ext"]
myst_heading_anchors = 3
myst_fence_as_directive = ["mermaid"]
myst_enable_extensions = ["colon_fence"]
html_theme = "furo"
html_title = f"Oversight {release}"

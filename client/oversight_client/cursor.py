"""Where a follower of the token's feed is, kept across restarts."""

import os
from pathlib import Path


class FileCursor:
    """The feed's cursor kept in a file, so that a restarted resumer goes on from the
    last event it handled (written after each one, atomically)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def load(self) -> int:
        return int(self.path.read_text()) if self.path.exists() else 0

    def save(self, seq: int) -> None:
        partial = self.path.with_suffix(".partial")
        partial.write_text(str(seq))
        os.replace(partial, self.path)

"""``python -m feed.devstack.secret``: the secret key of this checkout's
embedded stack, generated once into the state directory.

``make run`` runs it before anything starts; every process it starts, and
every ``manage.py`` run in the checkout, then signs with that key
(feed.settings reads the file when ``DJANGO_SECRET_KEY`` is not set). The
repository holds no key, and production settings accept only
``DJANGO_SECRET_KEY``.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from fanout.config import Env


def ensure_key(var_dir: Path) -> Path:
    """The key file in ``var_dir``, made (readable by its owner only) if missing."""
    path = var_dir / "secret_key"
    if not path.exists():
        var_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(64) + "\n")
    return path


def main() -> None:
    root = Path(__file__).resolve().parents[2]
    path = ensure_key(Path(Env().text("STARLING_VAR_DIR", str(root / "var"))))
    print(f"secret key: {path}", file=sys.stderr)


if __name__ == "__main__":
    main()

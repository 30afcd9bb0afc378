"""``python -m spark.rebuild``: ``manage.py rebuild_timelines`` by another name."""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> None:
    """``python -m spark.rebuild [options]``: ``manage.py rebuild_timelines [options]``
    by another name. It replaces this process with Django's command runner, so
    the verification oracle comes from the database while Spark code stays
    free of Django."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "feed.settings")
    args = sys.argv[1:] if argv is None else argv
    command = [sys.executable, "-m", "django", "rebuild_timelines", *args]
    os.execv(sys.executable, command)  # noqa: S606 - our own interpreter and command


if __name__ == "__main__":
    main()

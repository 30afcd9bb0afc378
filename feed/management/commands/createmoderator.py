"""``manage.py createmoderator NAME``: a user who may moderate and nothing more.

Made through the registration use-case (validated name and password, the
self edge on the changelog), then given the admin (``is_staff``) and the
``moderators`` group: the permissions to see users, tweets, follows and the
moderation record, to delete tweets and follows, and to suspend users. Not a
superuser. The password is asked for, or read from ``--password-file``.
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from feed import moderation
from feed.errors import ApplicationError


class Command(BaseCommand):
    help = "Create a moderator: a user with the moderation permissions and nothing more."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--password-file", type=Path, help="read the password from this file")

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path | None = options["password_file"]
        if path is not None:
            password = path.read_text().rstrip("\n")
        else:
            password = getpass.getpass("Password: ")
            if password != getpass.getpass("Password (again): "):
                raise CommandError("the passwords differ")
        try:
            user = moderation.moderator_create(username=options["username"], password=password)
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"moderator {user.username} created (id {user.pk})")

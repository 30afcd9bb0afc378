from __future__ import annotations

import factory
from django.contrib.auth.hashers import make_password

from feed.models import User

PASSWORD = "correct-horse-battery"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.LazyFunction(lambda: make_password(PASSWORD))


class ModeratorFactory(UserFactory):
    """A user with the moderators' permissions (feed.moderation.moderator_group)."""

    class Meta:
        skip_postgeneration_save = True

    is_staff = True

    @factory.post_generation
    def moderation(self, create: bool, extracted: object, **kwargs: object) -> None:
        from feed.moderation import moderator_group

        if create:
            self.groups.add(moderator_group())  # type: ignore[attr-defined]

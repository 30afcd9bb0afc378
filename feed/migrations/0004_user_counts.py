"""Counts kept on the user's row by the write use-cases (feed.services): the
columns, filled from the tables once."""

from django.db import migrations, models
from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce


def fill(apps, schema_editor):
    User = apps.get_model("feed", "User")
    Follow = apps.get_model("feed", "Follow")
    Tweet = apps.get_model("feed", "Tweet")
    for column, rows, key in (
        ("followers_count", Follow.objects, "followee"),
        ("following_count", Follow.objects, "follower"),
        ("tweets_count", Tweet.objects, "author"),
    ):
        counted = rows.filter(**{key: OuterRef("pk")}).order_by().values(key)
        total = counted.annotate(n=Count("*")).values("n")
        User.objects.update(**{column: Coalesce(Subquery(total), 0)})


class Migration(migrations.Migration):
    dependencies = [("feed", "0003_user_last_active")]

    operations = [
        migrations.AddField("user", "followers_count", models.PositiveIntegerField(default=0)),
        migrations.AddField("user", "following_count", models.PositiveIntegerField(default=0)),
        migrations.AddField("user", "tweets_count", models.PositiveIntegerField(default=0)),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]

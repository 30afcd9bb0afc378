from django.apps import AppConfig


class FeedConfig(AppConfig):
    name = "feed"
    verbose_name = "Starling feed"
    default_auto_field = "django.db.models.BigAutoField"

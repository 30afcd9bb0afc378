from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from feed import apis, apis_accounts, apis_conversations, apis_lists, apis_relations

# GET /api/v1/timeline, /api/v1/mentions, /api/v1/lists/<id>/timeline and /metrics
# are not here: the WSGI front (feed.fastpath, in feed.wsgi) answers them before Django.
api_v1 = [
    path("auth/register", apis_accounts.RegisterApi.as_view(), name="register"),
    path("auth/token", apis_accounts.TokenApi.as_view(), name="token"),
    path("auth/revoke", apis_accounts.RevokeApi.as_view(), name="revoke"),
    path("auth/password", apis_accounts.PasswordChangeApi.as_view(), name="password"),
    path("tweets", apis.TweetCreateApi.as_view(), name="tweet-create"),
    path("tweets/<int:tweet_id>", apis.TweetDetailApi.as_view(), name="tweet-detail"),
    path("tweets/<int:tweet_id>/repost", apis.RepostApi.as_view(), name="tweet-repost"),
    path("tweets/<int:tweet_id>/like", apis.LikeApi.as_view(), name="tweet-like"),
    path(
        "tweets/<int:tweet_id>/thread", apis_conversations.ThreadApi.as_view(), name="tweet-thread"
    ),
    path("users/<str:username>", apis.UserDetailApi.as_view(), name="user-detail"),
    path("users/<str:username>/follow", apis.FollowApi.as_view(), name="follow"),
    path("users/<str:username>/block", apis_relations.BlockApi.as_view(), name="block"),
    path("users/<str:username>/mute", apis_relations.MuteApi.as_view(), name="mute"),
    path("blocks", apis_relations.BlockListApi.as_view(), name="blocks"),
    path("mutes", apis_relations.MuteListApi.as_view(), name="mutes"),
    path(
        "users/<str:username>/suspension",
        apis_accounts.SuspensionApi.as_view(),
        name="user-suspension",
    ),
    path("users/<str:username>/tweets", apis.UserTweetsApi.as_view(), name="user-tweets"),
    path("users/<str:username>/likes", apis.UserLikesApi.as_view(), name="user-likes"),
    path("users/<str:username>/followers", apis.UserFollowersApi.as_view(), name="user-followers"),
    path("users/<str:username>/following", apis.UserFollowingApi.as_view(), name="user-following"),
    path("lists", apis_lists.ListsApi.as_view(), name="lists"),
    path("lists/<int:list_id>", apis_lists.ListDetailApi.as_view(), name="list-detail"),
    path("lists/<int:list_id>/members", apis_lists.ListMembersApi.as_view(), name="list-members"),
    path(
        "lists/<int:list_id>/members/<str:username>",
        apis_lists.ListMemberApi.as_view(),
        name="list-member",
    ),
    path("health", apis.HealthApi.as_view(), name="health"),
]

urlpatterns = [
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("admin/", admin.site.urls),
]

handler400 = "feed.errors.bad_request"
handler404 = "feed.errors.not_found"
handler500 = "feed.errors.server_error"

"""The /api/v1/ endpoints."""

from rest_framework.routers import DefaultRouter

from leaderboard.api import views

router = DefaultRouter()
router.register("leaderboard", views.LeaderboardViewSet, basename="leaderboard")
router.register("results", views.ResultViewSet, basename="result")
router.register("systems", views.SystemViewSet, basename="system")
router.register("sites", views.SiteViewSet, basename="site")
router.register("editions", views.EditionViewSet, basename="edition")
router.register("submissions", views.SubmissionViewSet, basename="submission")
router.register("keys", views.SiteKeyViewSet, basename="key")
router.register("runs", views.RunViewSet, basename="run")

"""URL configuration."""

urlpatterns: list = []

"""The AIPerf service's Django project."""

from server.celery import app as celery_app

__all__ = ("celery_app",)

"""The Celery application: `celery -A server worker` / `celery -A server beat`.

Configuration comes from Django's settings under the CELERY_ prefix (server/settings.py); without
CELERY_BROKER_URL tasks run in-process (CELERY_TASK_ALWAYS_EAGER).
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "server.settings")

app = Celery("server")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# One image for the web server, the Celery worker and beat (docker-compose.yml picks the command).
# The service needs no torch: the runner is installed without its [train] extra. The audit worker
# re-evaluates challenged weights with torch: build it with --build-arg RUNNER_EXTRAS=[train].
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=server.settings

WORKDIR /app

RUN apt-get update \
    && apt-get install -y --no-install-recommends curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 aiperf

COPY requirements.txt ./
RUN pip install -r requirements.txt

ARG RUNNER_EXTRAS=""
COPY runner/ runner/
RUN pip install "./runner${RUNNER_EXTRAS}"

COPY manage.py ./
COPY server/ server/
COPY leaderboard/ leaderboard/
COPY templates/ templates/
COPY static/ static/

# Static files are collected at build time (into the STATIC_ROOT the containers use) and served by whitenoise.
ENV MEDIA_ROOT=/data/media STATIC_ROOT=/app/staticfiles
RUN DEBUG=0 SECRET_KEY=collectstatic-only DATABASE_URL=sqlite:////tmp/build.sqlite3 \
    python manage.py collectstatic --noinput \
    && mkdir -p /data/media && chown -R aiperf:aiperf /data

USER aiperf
EXPOSE 8000
CMD ["gunicorn", "server.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--timeout", "300"]

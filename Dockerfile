# One image for the web server, the Celery worker and beat (docker-compose.yml picks the command).
# The service needs no torch: the runner is installed without its [train] extra. The audit worker
# re-evaluates challenged weights with torch: build it with --build-arg RUNNER_EXTRAS=[train].
# BASE_IMAGE: any Debian bookworm image with python3 and python3-venv; the official one by default,
# aiperf-base:bookworm (scripts/docker-base.sh) where no registry image can be pulled.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=server.settings \
    PATH=/opt/venv/bin:$PATH

WORKDIR /app

# Debian packages an image needs beyond the base: the audit worker's build names the text of the llm-kjv
# preset (bible-kjv, bible-kjv-text), which its re-evaluation extracts as the runner does; none otherwise.
ARG APT_PACKAGES=""
RUN if [ -n "$APT_PACKAGES" ]; then \
        apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $APT_PACKAGES \
        && rm -rf /var/lib/apt/lists/*; \
    fi

# A virtual environment: Debian's own python3 refuses system-wide pip installs (PEP 668), and the
# official image's python works the same way in one. No curl: the health checks use python.
RUN python3 -m venv /opt/venv && useradd --create-home --uid 1000 aiperf

# docker/ca/: a CA bundle for pip behind a TLS-inspecting proxy (docker/ca/README); empty otherwise.
COPY docker/ca/ /tmp/build-ca/
COPY requirements.txt ./
RUN if [ -f /tmp/build-ca/ca-bundle.crt ]; then export PIP_CERT=/tmp/build-ca/ca-bundle.crt; fi \
    && pip install -r requirements.txt

# WHEELS_DIR (docker/wheels/ unless named): wheels pip takes first, and their pins (constraints.txt), for the
# audit image's torch (its CPU build where the audit runs on CPUs: docker/wheels/README); empty otherwise.
ARG RUNNER_EXTRAS=""
ARG WHEELS_DIR=docker/wheels
COPY ${WHEELS_DIR}/ /tmp/build-wheels/
COPY runner/ runner/
RUN if [ -f /tmp/build-ca/ca-bundle.crt ]; then export PIP_CERT=/tmp/build-ca/ca-bundle.crt; fi \
    && if [ -f /tmp/build-wheels/constraints.txt ]; then export PIP_CONSTRAINT=/tmp/build-wheels/constraints.txt; fi \
    && pip install --find-links /tmp/build-wheels "./runner${RUNNER_EXTRAS}" && rm -rf /tmp/build-ca /tmp/build-wheels

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

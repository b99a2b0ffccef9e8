"""Settings of the AIPerf service, read from the environment (django-environ).

Embedded mode (no environment at all): an SQLite file in var/, Celery tasks run in-process, DEBUG
on. Production (docker-compose, or the machine's services): set DATABASE_URL (PostgreSQL),
CELERY_BROKER_URL (Redis), SECRET_KEY, DEBUG=0 and ALLOWED_HOSTS. See docs/service.md.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()
if (BASE_DIR / ".env").is_file():
    env.read_env(str(BASE_DIR / ".env"))

EMBEDDED = not env.str("DATABASE_URL", default="")
# DEBUG defaults to on only in the embedded mode (a local SQLite file); a deployment with a real
# database runs with DEBUG off unless it says otherwise.
DEBUG = env.bool("DEBUG", default=EMBEDDED)

SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY must be set when DEBUG is off (e.g. SECRET_KEY=$(python -c "
            "'import secrets; print(secrets.token_urlsafe(50))'))"
        )
    SECRET_KEY = "aiperf-insecure-development-key-only-for-debug"

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]", "testserver"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "csp",
    "axes",
    "corsheaders",
    "leaderboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "server.nul.RejectNulMiddleware",  # before anything reads a parameter into a query
    "corsheaders.middleware.CorsMiddleware",  # before anything that answers (its preflight answer)
    # ETag on every GET, 304 to a matching If-None-Match; the API's Cache-Control (server/httpcache.py).
    "django.middleware.http.ConditionalGetMiddleware",
    "server.httpcache.ApiCacheControlMiddleware",
    "server.exportgc.ExportGcPauseMiddleware",  # a whole-list export without the cyclic collector's passes
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "axes.middleware.AxesMiddleware",  # last: it answers a locked-out login (server/security.py)
]

# 1: every response says how long Django took (`Server-Timing: app;dur=<ms>`, read by bench/site_latency.py).
AIPERF_SERVER_TIMING = env.bool("AIPERF_SERVER_TIMING", default=False)
if AIPERF_SERVER_TIMING:
    MIDDLEWARE.insert(0, "server.timing.ServerTimingMiddleware")  # first: it times the whole stack

ROOT_URLCONF = "server.urls"
WSGI_APPLICATION = "server.wsgi.application"
ASGI_APPLICATION = "server.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# ---- database ----------------------------------------------------------------------------------
if EMBEDDED:
    VAR_DIR.mkdir(exist_ok=True)
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'aiperf.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Waiting on a lock beats "database is locked" when the dev server and a task write at once.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("timeout", 30)
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=0))
# `manage.py aiperf_rebuild --check` runs a child whose default database is a scratch one and whose
# `source` is the service's (leaderboard/rebuild.py); nothing else sets this.
if env.str("AIPERF_REBUILD_SOURCE_URL", default=""):
    DATABASES["source"] = env.db("AIPERF_REBUILD_SOURCE_URL")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: it refuses a locked-out login before the password is tried
    "django.contrib.auth.backends.ModelBackend",
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# ---- static and uploaded files ---------------------------------------------------------------
STATIC_URL = "/static/"
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(VAR_DIR / "static")))
if DEBUG:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns about a missing one
STATICFILES_DIRS = [p for p in [BASE_DIR / "static"] if p.is_dir()]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = DEBUG
MEDIA_ROOT = Path(env.str("MEDIA_ROOT", default=str(VAR_DIR / "media")))
MEDIA_URL = "/media/"  # bundles are not served: nothing maps this URL

# Bundles larger than this are refused with 413 before they are read.
AIPERF_MAX_UPLOAD_BYTES = env.int("AIPERF_MAX_UPLOAD_BYTES", default=512 * 1024 * 1024)
# A chunked (resumable, tus) upload may be this large (docs/service.md "Resumable uploads"); its unfinished
# parts (MEDIA_ROOT/partial) untouched this long are removed by resume_stuck.
AIPERF_MAX_CHUNKED_UPLOAD_BYTES = env.int("AIPERF_MAX_CHUNKED_UPLOAD_BYTES", default=8 * 1024 * 1024 * 1024)
AIPERF_UPLOAD_SESSION_MAX_AGE_S = env.float("AIPERF_UPLOAD_SESSION_MAX_AGE_S", default=7 * 24 * 3600.0)
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024  # larger uploads go to a temporary file
# 1: a verified result waits for an admin's "publish" before it enters the list.
AIPERF_REQUIRE_APPROVAL = env.bool("AIPERF_REQUIRE_APPROVAL", default=False)
# Base URL printed in links that leave the request context (management commands, tasks).
AIPERF_PUBLIC_URL = env.str("AIPERF_PUBLIC_URL", default="http://127.0.0.1:8000")

# ---- trust (docs/design.md section 7; docs/service.md "Trust") -------------------------------------
# manual (the default): a list maintainer approves every system for the official division, against what
# its runs found (a registration is the site's own word); auto: a known accelerator model (or a CPU with its
# cores) is approved at once, for a private list or a test whose subject is not approval.
AIPERF_SYSTEM_APPROVAL = env.str("AIPERF_SYSTEM_APPROVAL", default="manual")
if AIPERF_SYSTEM_APPROVAL not in ("auto", "manual"):
    raise ImproperlyConfigured(f"AIPERF_SYSTEM_APPROVAL must be auto or manual, not {AIPERF_SYSTEM_APPROVAL!r}")
# The service's witness key (Ed25519 private key, PEM): `manage.py aiperf_witness_key create` makes it.
AIPERF_WITNESS_KEY_FILE = Path(env.str("AIPERF_WITNESS_KEY_FILE", default=str(VAR_DIR / "witness_key.pem")))
# The key that signs the heads of the list's transparency log; made on first use if absent (back it up).
AIPERF_LOG_KEY_FILE = Path(env.str("AIPERF_LOG_KEY_FILE", default=str(VAR_DIR / "log_key.pem")))
# Seconds between a witnessed run's heartbeats (the run token says it; the rules bound it to 5-300).
AIPERF_HEARTBEAT_INTERVAL_S = env.float("AIPERF_HEARTBEAT_INTERVAL_S", default=60.0)
# A run token not used (no heartbeat) within this many seconds expires.
AIPERF_TOKEN_TTL_S = env.float("AIPERF_TOKEN_TTL_S", default=3600.0)
# A token that reached no submission within this many seconds counts as an abandoned run.
AIPERF_ABANDONED_AFTER_S = env.float("AIPERF_ABANDONED_AFTER_S", default=7 * 86400.0)
# Proof of training: how many kept trials a witnessed submission is challenged for (the best always
# among them), where the audit finds each preset's validation data (JSON {preset: directory}; smoke is
# generated, fashion-mnist defaults to Debian's dataset-fashion-mnist), its queue, its limits, the
# largest weights file accepted, and the days a challenge may stay unanswered before the result is
# withdrawn.
AIPERF_AUDIT_TRIALS = env.int("AIPERF_AUDIT_TRIALS", default=3)
AIPERF_AUDIT_DATA = env.json("AIPERF_AUDIT_DATA", default={})
AIPERF_AUDIT_QUEUE = env.str("AIPERF_AUDIT_QUEUE", default="audit")
AIPERF_AUDIT_TIMEOUT_S = env.float("AIPERF_AUDIT_TIMEOUT_S", default=3600.0)
AIPERF_AUDIT_MEMORY_BYTES = env.int("AIPERF_AUDIT_MEMORY_BYTES", default=32 * 1024**3)
AIPERF_AUDIT_DEVICE = env.str("AIPERF_AUDIT_DEVICE", default="cpu")
# Deliveries of one audit that may start work: a task that kills its worker (memory, a crash) is delivered
# again by the broker; past this many starts the audit stops, pending with a message for the maintainers.
AIPERF_AUDIT_MAX_ATTEMPTS = env.int("AIPERF_AUDIT_MAX_ATTEMPTS", default=3)
# The seed of the private split a generated preset (smoke) is re-evaluated on (rules 3.1 on): a secret of
# this service, so that no runner can read those images. Default: derived from SECRET_KEY.
AIPERF_AUDIT_PRIVATE_SEED = env.int(
    "AIPERF_AUDIT_PRIVATE_SEED", default=int.from_bytes(hashlib.sha256(f"private split {SECRET_KEY}".encode()).digest()[:7]))
AIPERF_MAX_EVIDENCE_BYTES = env.int("AIPERF_MAX_EVIDENCE_BYTES", default=4 * 1024**3)
AIPERF_CHALLENGE_DAYS = env.float("AIPERF_CHALLENGE_DAYS", default=14.0)
# The rules version results are verified under (spec/rules.py; a private list may add its own with
# AIPERF_RULES_FILE, a JSON object {version: {"base": "3.0", threshold: value, ...}}).
AIPERF_RULES_FILE = env.str("AIPERF_RULES_FILE", default="")
AIPERF_RULES_VERSION = env.str("AIPERF_RULES_VERSION", default="")
# Empty: each run is verified under the rules version it declares (a spec 1 log's is told from what its runner
# wrote), and a re-verification under the version its result was verified under. Set: every new submission is
# verified under this one (a private list's or a CI service's own version).
# The rules versions admitted to the official ranking (a result verified under another is listed in the open
# division, its check `validity.admitted` saying why); an edition records them when it is frozen. Empty: the
# service's rules version (AIPERF_RULES_VERSION, else the spec's current one) alone.
AIPERF_OFFICIAL_RULES = env.list("AIPERF_OFFICIAL_RULES", default=[])

# ---- Celery (server/celery.py reads the CELERY_ names) --------------------------------------
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL  # no broker: tasks run in-process
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default="") or None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = env.str("AIPERF_CELERY_QUEUE", default="aiperf")
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=3000)
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=2700)
# A "verifying" claim older than this belongs to a dead worker and may be taken over: no task
# outlives the hard time limit, so the default is that limit and a minute.
AIPERF_CLAIM_TIMEOUT_S = env.float("AIPERF_CLAIM_TIMEOUT_S", default=CELERY_TASK_TIME_LIMIT + 60.0)
# beat's resume_stuck re-queues a submission still `received` this many seconds after its upload (its
# message was lost, e.g. with a Redis restart, or its last attempt failed on a service error).
AIPERF_RESUME_RECEIVED_AFTER_S = env.float("AIPERF_RESUME_RECEIVED_AFTER_S", default=300.0)
# resume_stuck also removes what MEDIA_ROOT/tmp held untouched this long (a killed worker's unpacked bundle):
# longer than any task may live.
AIPERF_TMP_MAX_AGE_S = env.float("AIPERF_TMP_MAX_AGE_S", default=CELERY_TASK_TIME_LIMIT + 3600.0)
# Redis redelivers a message whose worker died without acknowledging it after this many seconds.
# (The sweep that restores such messages runs every interval x throttle seconds. Workers take turns
# under a lock in Redis; a worker killed while it held the lock blocks every other worker's sweep
# until the lock expires, so it expires well within the visibility timeout.)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=3600),
    "unacked_restore_interval": env.int("CELERY_UNACKED_RESTORE_INTERVAL", default=10),
    "unacked_restore_throttle": env.int("CELERY_UNACKED_RESTORE_THROTTLE", default=10),
    "unacked_mutex_expire": env.int("CELERY_UNACKED_MUTEX_EXPIRE", default=300),
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = TIME_ZONE
CELERY_BEAT_SCHEDULE = {
    "reverify-stale-results": {
        "task": "leaderboard.tasks.reverify_stale",
        "schedule": env.float("AIPERF_REVERIFY_EVERY_S", default=3600.0),
    },
    "resume-stuck-submissions": {
        "task": "leaderboard.tasks.resume_stuck",
        "schedule": env.float("AIPERF_RESUME_STUCK_EVERY_S", default=600.0),
    },
    "expire-challenges": {
        "task": "leaderboard.tasks.expire_challenges",
        "schedule": env.float("AIPERF_EXPIRE_CHALLENGES_EVERY_S", default=3600.0),
    },
    "freeze-due-editions": {  # an edition is frozen when its submissions close (the calendar on /editions/)
        "task": "leaderboard.tasks.freeze_due_editions",
        "schedule": env.float("AIPERF_FREEZE_EDITIONS_EVERY_S", default=60.0),
    },
}
if CELERY_TASK_ALWAYS_EAGER and not DEBUG:
    import warnings

    warnings.warn("CELERY_BROKER_URL is not set: verification runs inside the web process", stacklevel=1)

# ---- REST framework and OpenAPI ------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["leaderboard.auth.SiteTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["leaderboard.auth.ReadOnlyOrSite"],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
        "leaderboard.api.renderers.CSVRenderer",
    ],
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    # Writes are throttled per site token (leaderboard/limits.py); the rate is AIPERF_WRITE_RATE.
    "DEFAULT_THROTTLE_CLASSES": ["leaderboard.limits.SiteWriteThrottle"],
    "EXCEPTION_HANDLER": "leaderboard.api.exceptions.handler",
    "DEFAULT_PAGINATION_CLASS": "leaderboard.api.pagination.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "leaderboard.api.schema.Schema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "AIPerf API",
    "DESCRIPTION": "Signed benchmark uploads, server-side verification and the ranked list of AI-HPC systems.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # OpenAPI links between the operations (create -> read, list -> item), for clients and schemathesis.
    # Request bodies that refuse unknown fields say so (additionalProperties: false).
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "leaderboard.api.links.add_links",
                             "leaderboard.api.serializers.closed_request_bodies", "leaderboard.api.schema.described_tags"],
    "ENUM_NAME_OVERRIDES": {
        "SubmissionStatusEnum": "leaderboard.models.Submission.Status",
        "DivisionEnum": "leaderboard.models.Division",
    },
}

# ---- hardening (docs/service.md "Production") -------------------------------------------------
# The cache holds the write throttles' counters and the uploads in progress (leaderboard/limits.py):
# one Redis shared by every web process in production (`manage.py check --deploy` warns otherwise,
# leaderboard/checks.py), a per-process memory cache in the embedded mode.
CACHE_URL = env.str("CACHE_URL", default="")
CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}
          if CACHE_URL.startswith(("redis://", "rediss://", "unix://"))
          else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
if CACHE_URL and not CACHE_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured(f"CACHE_URL must be a redis:// URL, not {CACHE_URL!r}")

# Seconds an anonymous read of the list, a result page, the statistics or the API list may be served from
# the cache (leaderboard/listcache.py; dropped at once on every change of the list); 0: never cached.
AIPERF_PAGE_CACHE_S = env.int("AIPERF_PAGE_CACHE_S", default=300)
# Seconds a browser or proxy may keep an anonymous API read without asking again (Cache-Control max-age;
# server/httpcache.py). Then it asks with its ETag and gets a 304 while nothing changed.
AIPERF_API_MAX_AGE_S = env.int("AIPERF_API_MAX_AGE_S", default=60)

# The API's public reads may be fetched by any origin's page (a centre's own site charting its results):
# reads only, and never with credentials. Writes need a site token in an Authorization header, which
# no cross-origin page may send (it is not among the allowed headers of the preflight).
CORS_URLS_REGEX = r"^/api/.*$"
CORS_ALLOW_ALL_ORIGINS = True
CORS_ALLOW_CREDENTIALS = False
CORS_ALLOW_METHODS = ("GET", "HEAD", "OPTIONS")
CORS_ALLOW_HEADERS = ("accept", "if-none-match", "if-modified-since")
CORS_EXPOSE_HEADERS = ("ETag", "Content-Disposition")
CORS_PREFLIGHT_MAX_AGE = 86400

# Uploads: besides AIPERF_MAX_UPLOAD_BYTES, at most this many bundles per site in 24 hours and this
# many of one site's uploads being received at once (429 beyond either).
AIPERF_WRITE_RATE = env.str("AIPERF_WRITE_RATE", default="120/min")  # DRF's "N/s|min|hour|day"
AIPERF_UPLOADS_PER_DAY = env.int("AIPERF_UPLOADS_PER_DAY", default=100)
AIPERF_UPLOAD_CONCURRENCY = env.int("AIPERF_UPLOAD_CONCURRENCY", default=2)
# Site tokens guessed from one client address (the API's `Authorization: Token`, the site sign-in page):
# after this many wrong ones in AIPERF_FAILED_TOKENS_WINDOW_S seconds, 429 until the window ends.
AIPERF_FAILED_TOKENS = env.int("AIPERF_FAILED_TOKENS", default=10)
AIPERF_FAILED_TOKENS_WINDOW_S = env.int("AIPERF_FAILED_TOKENS_WINDOW_S", default=600)
DATA_UPLOAD_MAX_NUMBER_FIELDS = 100
DATA_UPLOAD_MAX_NUMBER_FILES = 2

# Admin login: django-axes locks a username at an address out after this many failed passwords,
# for AXES_COOLOFF_HOURS (the lock is in the database: it survives a restart and every process sees it).
AXES_FAILURE_LIMIT = env.int("AXES_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = env.float("AXES_COOLOFF_HOURS", default=1.0)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# Behind proxies, the client's address is the one AIPERF_PROXY_COUNT proxies from the right of
# X-Forwarded-For (leaderboard/limits.py client_ip); 0: REMOTE_ADDR.
AIPERF_PROXY_COUNT = env.int("AIPERF_PROXY_COUNT", default=0)
AXES_CLIENT_IP_CALLABLE = "leaderboard.limits.client_ip"

# Headers. SecurityMiddleware sends X-Content-Type-Options: nosniff and this Referrer-Policy;
# django-csp the Content-Security-Policy below, on every page. Scripts only from this origin: no
# inline script anywhere (the charts' data are in data attributes, static/site/charts.js draws
# them; Swagger UI's setup is a script of its own). Inline styles are allowed: plotly.js, Redoc and
# DRF's browsable API set them from their own (same-origin) scripts and cannot run without them.
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = env.str("SECURE_REFERRER_POLICY", default="same-origin")
X_FRAME_OPTIONS = "DENY"
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}
if not DEBUG:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=True)
    CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=True)
    # HSTS: a year by default once DEBUG is off; 0 turns it off (e.g. while trying HTTPS out).
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=365 * 86400)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
    # The proxy in front may redirect to HTTPS itself (SECURE_SSL_REDIRECT=0); the health checks are
    # probed over plain HTTP from inside the deployment.
    SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]

# ---- logging -----------------------------------------------------------------------------------
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"leaderboard": {"handlers": ["console"], "level": env.str("AIPERF_LOG_LEVEL", default="INFO")}},
}

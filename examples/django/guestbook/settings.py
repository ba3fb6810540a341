"""Settings of the guestbook project, read from the environment shipway gives each process.

SECRET_KEY    a shipway secret (shipway.toml: [secrets]); there is no default, so a process
              started without it fails at once rather than signing with a known key
ALLOWED_HOSTS comma-separated; ".localhost" is every *.localhost name the local router
              serves (guestbook.localhost, staging.guestbook.localhost ...), 127.0.0.1 the
              health check's own requests (sent straight to the process's port)
GREETING      the page's heading
The SQLite database lives in data/, the slot's volume: every release opens the same file.
"""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ["SECRET_KEY"]
DEBUG = os.environ.get("DJANGO_DEBUG") == "1"
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "").split(",") if h.strip()]
GREETING = os.environ.get("GREETING", "guestbook")
RELEASE = os.environ.get("SHIPWAY_RELEASE", "dev")

INSTALLED_APPS = ["entries"]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
]

ROOT_URLCONF = "guestbook.urls"
WSGI_APPLICATION = "guestbook.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.csrf"]},
    }
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": BASE_DIR / "data" / "db.sqlite3",
    }
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}

"""The WSGI application gunicorn serves (``gunicorn guestbook.wsgi``)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guestbook.settings")
application = get_wsgi_application()

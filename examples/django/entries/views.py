from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from entries.models import Entry


@require_http_methods(["GET", "POST"])
def index(request: HttpRequest) -> HttpResponse:
    """GET: the entries, newest first, and which release serves them. POST (form field
    ``text``, with the CSRF token the page's form carries): add one, then back to GET."""
    if request.method == "POST":
        text = request.POST.get("text", "").strip()[:200]
        if text:
            Entry.objects.create(text=text)
        return redirect("index")
    context = {
        "greeting": settings.GREETING,
        "release": settings.RELEASE,
        "entries": Entry.objects.all()[:50],
    }
    return render(request, "entries/index.html", context)


@require_GET
def up(request: HttpRequest) -> HttpResponse:
    """The health check: the process answers (it touches no table, so a release whose
    migration has not run yet is not mistaken for a broken one)."""
    return HttpResponse("ok\n", content_type="text/plain")

"""`/apply`: a centre applies to join the list with its contact and systems; a list maintainer approves it in the
admin (leaderboard/admin.py), which makes the site and shows its API token once, to hand to the contact."""

from __future__ import annotations

from django import forms
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from leaderboard.models import Application, Site

PER_ADDRESS = 5  # applications per client address and window
WINDOW_S = 3600


class ApplicationForm(forms.ModelForm):
    country = forms.CharField(max_length=64, help_text="ISO 3166-1 alpha-2 code, e.g. DE")
    url = forms.URLField(required=False, assume_scheme="https", label="Web site")

    class Meta:
        model = Application
        fields = ["centre", "country", "url", "contact_name", "contact_email", "systems", "message"]
        labels = {"centre": "Centre", "url": "Web site", "contact_name": "Contact name",
                  "contact_email": "Contact e-mail", "systems": "Systems you mean to run on"}
        widgets = {"systems": forms.Textarea(attrs={"rows": 4}), "message": forms.Textarea(attrs={"rows": 3})}

    def clean_country(self) -> str:
        country = str(self.cleaned_data["country"]).strip().upper()
        if len(country) != 2 or not country.isalpha():
            raise forms.ValidationError("a two-letter ISO 3166-1 code, e.g. DE")
        return country

    def clean_centre(self) -> str:
        centre = str(self.cleaned_data["centre"]).strip()
        if Site.objects.filter(name__iexact=centre).exists():
            raise forms.ValidationError("a site of this name is on the list already: its people sign in at /my-site/")
        if Application.objects.filter(centre__iexact=centre, status=Application.Status.PENDING).exists():
            raise forms.ValidationError("an application of this centre is waiting for a maintainer already")
        return centre


@never_cache
@require_http_methods(["GET", "POST"])
def apply(request: HttpRequest) -> HttpResponse:
    form = ApplicationForm(request.POST or None)
    if request.method == "POST":
        key = f"aiperf:applications:{request.META.get('REMOTE_ADDR') or 'unknown'}"
        if (cache.get(key) or 0) >= PER_ADDRESS:
            return render(request, "site/apply.html", {"form": form, "nav": "apply", "error":
                          "Too many applications from this address: try again later."}, status=429)
        if form.is_valid():
            application = form.save()
            cache.add(key, 0, WINDOW_S)
            cache.incr(key)
            return render(request, "site/apply_done.html", {"application": application, "nav": "apply"}, status=201)
    return render(request, "site/apply.html", {"form": form, "nav": "apply"}, status=400 if form.errors else 200)

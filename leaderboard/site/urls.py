"""URLs of the public pages (include at the site root: `path("", include("leaderboard.site.urls"))`).

    /                              the live ranked list (filters, sort and page in the query string;
                                   ?format=csv|json downloads exactly the rows of that URL)
    /editions/                     the frozen editions
    /editions/<name>/              one frozen edition, as a list (same filters, sorting, downloads)
    /results/<id>                  a result: charts, verification report, downloads (resultpage.py)
    /results/<id>/bundle           the signed bundle it was verified from
    /results/<id>/series.csv|json  the series the service recomputed
    /systems/<id>, /sites/<id>, /statistics, /methodology
    /changes                       the list's transparency log, newest first (leaderboard/site/changes.py)
    /compare?systems=1,2           two to four systems side by side (leaderboard/site/compare.py)
    /apply                         a centre applies to join the list (leaderboard/site/apply.py)
    /my-site/                      a site's own submissions and runs in progress, signed in with its token
                                   (leaderboard/site/account.py)
"""

from django.urls import path

from leaderboard.site import account, apply, changes, compare, resultpage, views

urlpatterns = [
    path("", views.ranked_list, name="home"),
    path("editions/", views.editions, name="editions"),
    path("editions/<str:name>/", views.ranked_list, name="edition"),
    path("results/<int:pk>", resultpage.result, name="result"),
    path("results/<int:pk>/", resultpage.result),
    path("results/<int:pk>/bundle", resultpage.result_bundle, name="result-bundle"),
    path("results/<int:pk>/series.<str:ext>", resultpage.result_series, name="result-series"),
    path("systems/<int:pk>", views.system, name="system-page"),
    path("systems/<int:pk>/", views.system),
    path("sites/<int:pk>", views.site, name="site-page"),
    path("sites/<int:pk>/", views.site),
    path("statistics", views.statistics, name="statistics"),
    path("methodology", views.methodology, name="methodology"),
    path("changes", changes.changes, name="changes"),
    path("compare", compare.compare, name="compare"),
    path("apply", apply.apply, name="apply"),
    path("my-site/", account.home, name="my-site"),
    path("my-site/sign-in", account.login, name="my-site-login"),
    path("my-site/sign-out", account.logout, name="my-site-logout"),
]

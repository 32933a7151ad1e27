"""The REST API (Django REST framework), installed with the ``api`` extra.

Mount it with ``path("api/", include("django_durable_jobs.api.urls"))``.
Views only parse requests and call ``enqueue()`` and ``operations``; the
queue's rules live there, so the API, the admin and the CLI agree.
"""

from __future__ import annotations

from django.db import models


class Signup(models.Model):
    email = models.EmailField(unique=True)
    #: Set by the ``emails.welcome`` job once the email is sent.
    welcomed = models.BooleanField(default=False)

    def __str__(self) -> str:
        return self.email

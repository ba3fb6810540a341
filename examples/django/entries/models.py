from django.db import models


class Entry(models.Model):
    """One line someone wrote in the guestbook."""

    text = models.CharField(max_length=200)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]
        verbose_name_plural = "entries"

    def __str__(self) -> str:
        return self.text

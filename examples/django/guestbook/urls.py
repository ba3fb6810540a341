from django.urls import path

from entries import views

urlpatterns = [
    path("", views.index, name="index"),
    path("up", views.up, name="up"),
]

"""The Kubernetes backend: render → server-side apply → watch → records in Secrets."""

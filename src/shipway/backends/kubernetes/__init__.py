"""The Kubernetes backend: render → server-side apply → watch → records in Secrets.

:func:`shipway.backends.open_backend` calls ``backend.connect(app, slot)``. ``backend``
assembles the class from one part per concern — ``state`` (the typed state, the guard
preamble, the edge where library errors become shipway errors), ``reads``, ``steps``,
``health`` (rollout and Job waits), ``blue_green`` (generations), ``lock`` — over the pure
helpers ``render`` (manifests), ``rollout`` (done / doomed rules) and ``generations``, and
``records`` (release records in Secrets), ``lease`` (the slot's Lease), ``watch`` (list +
watch), ``client``, ``image``, ``helm``. See docs/kubernetes.md.

Importing this package costs nothing: lightkube is loaded with ``backend``.
"""

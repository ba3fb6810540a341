"""The source part of the Kubernetes backend: one object the backend holds
(``backend.source``), not classes it derives from.

A slot whose objects come from a source (manifests, a chart) differs from one shipway
renders in what it renders, observes, applies, removes, stops, waits on, diffs, judges as
drifted, reads the status and digest of, and destroys; any slot may still hold a source's
objects in its history (a slot that left its source prunes them), and ``set-image`` finds
and watches a workload shipway did not render the same way. Each protocol method of the
backend where that differs has one branch that calls this part; nothing here overrides
the backend, and the backend's own parts never fall back on it through ``super()``.

It is given the backend's state (:class:`~.state.KubernetesState`: the connection, the
edge, the lock, the operation's watches) and keeps its own (:class:`~.source_state.
Sourcing`), created on first use. Its parts, one per concern, each name their methods once:

  * :mod:`.source_reads` — render, claim, observe, status, diff, the live digest;
  * :mod:`.source_waits` — the watches and the waits of every kind;
  * :mod:`.source_steps` — apply, remove, stop, and each revision's Secret data;
  * :mod:`.source_drift` — a source's objects another field manager changed;
  * :mod:`.source_destroy` — destroy of the source's objects and Secret data;
  * :mod:`.set_image` — set-image on a workload shipway did not render.
"""

from __future__ import annotations

from shipway.backends.kubernetes.set_image import SourceSetImage
from shipway.backends.kubernetes.source_destroy import SourceDestroy
from shipway.backends.kubernetes.source_drift import SourceDrift
from shipway.backends.kubernetes.source_reads import SourceReads
from shipway.backends.kubernetes.source_steps import SourceSteps


class SourceSlot(SourceReads, SourceSteps, SourceSetImage, SourceDrift, SourceDestroy):
    """What a slot's source objects need, for one app's slot (``state``: the backend's)."""

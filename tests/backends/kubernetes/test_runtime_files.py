"""What a running release wrote inside its own copy of the app, which the next deploy would
lose: read on this backend, and warned about (or, where the backend cannot tell, said)."""

from __future__ import annotations

from shipway.engine.outcome import Rolled
from tests.backends.kubernetes.conftest import Slot


def test_what_a_pod_wrote_inside_itself_cannot_be_told(slot: Slot) -> None:
    """The docs say so: a pod's own filesystem is the kubelet's, and goes with the pod."""
    app = slot.write()
    outcome, _ = slot.deploy(app)
    assert isinstance(outcome, Rolled)
    backend = slot.backend(app)
    [release] = slot.records(app).values()
    assert backend.runtime_files(app.slots.target("test1"), release) is None

"""One-off commands in the cluster (``shipway run``): a pod made from the process's pod
template in the deployed release (its image, env Secret, config files), the command instead
of the process's own, never restarted; its output streamed from the pod's log, its exit
code read from the container's terminated state, and the pod deleted afterwards on every
path (a signal included).

What it cannot do: pass standard input or a terminal to the pod — attaching needs the
kubelet's streaming protocol, which the client shipway uses does not speak — so ``-i``/``-t``
are refused with a hint. Where the cluster gives no log (the test cluster's simulated
kubelet has none), that is said, and the exit code is still returned.
"""

from __future__ import annotations

import secrets as tokens
import sys
from collections.abc import Mapping
from typing import Any

import httpx2
from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError
from lightkube.operators import exists
from lightkube.resources.core_v1 import Pod

from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.health import KubernetesHealth
from shipway.backends.kubernetes.names import dns_name
from shipway.backends.kubernetes.state import api_message
from shipway.backends.kubernetes.watch import Changes, LiveSet
from shipway.backends.oneoff import orphaned, owner, stopped_on_signals
from shipway.backends.protocol import OneOffCommand, Reporter
from shipway.errors import BackendError, InputError
from shipway.guard import Clearance
from shipway.release.model import Release
from shipway.spec.model import Target
from shipway.spec.secrets import Secret

#: on a one-off pod: the shipway that runs it (host, pid, start time), so a later run can
#: prove it orphaned when that shipway was killed before it could delete the pod
OWNER = "shipway.io/run-owner"

#: a container waiting for one of these will never run the command
DOOMED = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


class KubernetesCommands(KubernetesHealth):
    """run_command."""

    def run_command(
        self,
        clearance: Clearance,
        target: Target,
        release: Release,
        oneoff: OneOffCommand,
        secrets: Mapping[str, Secret],
        reporter: Reporter,
    ) -> int:
        self._guard(clearance, target)
        if oneoff.stdin is True or oneoff.tty is True:
            raise InputError(
                "on Kubernetes, shipway run streams the command's output only: it cannot pass "
                "standard input or a terminal to the pod (hint: run it without -i/-t; for an "
                "interactive shell, exec into a running pod with the cluster's own tools)"
            )
        self._secrets.update(secrets)
        self._reap_orphans(reporter)
        name = dns_name(release.app, "run", oneoff.process, tokens.token_hex(3))
        body = render.one_off_pod(
            release, self.namespace, oneoff.process, list(oneoff.command), name
        )
        body["metadata"].setdefault("annotations", {})[OWNER] = owner()
        for container in body["spec"]["containers"]:  # -e KEY=VALUE: over the template's
            given = dict(oneoff.env)
            kept = [e for e in container.get("env") or [] if e.get("name") not in given]
            container["env"] = kept + [{"name": k, "value": v} for k, v in given.items()]
        with self._edge(f"creating the one-off pod {name}"):
            self.client.create(from_dict(body))
        reporter.line(
            f"  pod {name} created from the pod template of {oneoff.process} "
            f"(r{release.revision}); no standard input or terminal on Kubernetes"
        )
        try:
            with stopped_on_signals():
                code = self._follow(name, reporter)
        finally:
            fix = f"delete pod {name} in namespace {self.namespace}"
            try:
                with self._edge(f"deleting the one-off pod {name}"):
                    self.client.delete(Pod, name, namespace=self.namespace, grace_period=0)
                reporter.line(f"  pod {name} deleted")
            except BackendError as exc:  # reported, never swallowed (invariant 7)
                reporter.line(f"warning: {exc}; to fix by hand: {fix}")
        return code

    def _reap_orphans(self, reporter: Reporter) -> None:
        """Delete the slot's one-off pods whose shipway is provably gone (killed: its
        ``finally`` never ran) — started from this machine by a process that no longer
        runs. Another machine's are left alone: nothing proves them orphaned."""
        with self._edge("looking for one-off pods a killed run left"):
            pods = list(
                self.client.list(
                    Pod,
                    namespace=self.namespace,
                    labels={**self._labels(), render.ONE_OFF: exists()},
                )
            )
        for pod in pods:
            meta = pod.metadata
            tag = (meta.annotations or {}).get(OWNER) if meta else None
            if meta is None or meta.deletionTimestamp or not orphaned(tag):
                continue
            name = str(meta.name)
            try:
                with self._edge(f"deleting the orphaned one-off pod {name}"):
                    self.client.delete(Pod, name, namespace=self.namespace, grace_period=0)
            except BackendError as exc:  # reported, never swallowed (invariant 7)
                reporter.line(f"warning: {exc}; to fix by hand: delete pod {name}")
                continue
            reporter.line(f"  deleted one-off pod {name}: the shipway that ran it ({tag}) is gone")

    def _follow(self, name: str, reporter: Reporter) -> int:
        """Until the pod's container terminated: its log streamed once it runs; its exit
        code. A container waiting for what will never come (its image) is an error."""
        changes = Changes()
        pods = LiveSet(
            self._watch_loop(), Pod, self.namespace, changes, fields={"metadata.name": name}
        )
        with self._edge(f"watching pod {name}"):
            pods.start()
        streamed = False
        said = ""
        try:
            while True:
                with changes.cond:
                    version = changes.version
                    pod = pods.objects.get(name)
                if pods.error:
                    raise BackendError(f"watching pod {name}: {pods.error}")
                status = (pod or {}).get("status") or {}
                state = _container_state(status)
                waiting = state.get("waiting") or {}
                if waiting.get("reason") in DOOMED:
                    mask = self._masker()
                    raise BackendError(
                        mask(
                            f"pod {name}: {waiting['reason']}: {waiting.get('message', '')}"
                        ).rstrip(": ")
                    )
                note = waiting.get("reason") or status.get("phase") or ""
                if note and note != said and not state.get("running"):
                    reporter.line(f"  pod {name}: {note}")
                    said = note
                if not streamed and ("running" in state or "terminated" in state):
                    streamed = True
                    self._stream_log(name, reporter)
                    continue  # look again: the container may have ended meanwhile
                terminated = state.get("terminated")
                if terminated is not None:
                    return int(terminated.get("exitCode", 1))
                if status.get("phase") in ("Succeeded", "Failed"):
                    return 0 if status["phase"] == "Succeeded" else 1
                changes.wait_past(version, 30.0)
        finally:
            pods.stop()

    def _stream_log(self, name: str, reporter: Reporter) -> None:
        """The container's log, as it comes, to standard output (the command's own output,
        unmasked); when the cluster gives none, a line saying so."""
        out = sys.stdout
        try:
            for line in self.client.log(name, namespace=self.namespace, follow=True):
                out.write(line)
                out.flush()
        except (ApiError, httpx2.HTTPError) as exc:
            why = api_message(exc) if isinstance(exc, ApiError) else f"{type(exc).__name__}"
            reporter.line(self._redact(f"  pod {name}: the cluster gives no log ({why})"))


def _container_state(status: Mapping[str, Any]) -> dict[str, Any]:
    statuses = status.get("containerStatuses") or []
    return dict((statuses[0].get("state") or {}) if statuses else {})

"""Helm releases read natively: Helm's release Secrets decoded, no helm binary (invariant 8).

Helm keeps one Secret per revision, ``sh.helm.release.v1.<release>.v<N>`` of type
``helm.sh/release.v1``, labelled ``owner=helm, name=<release>, status=<status>,
version=<N>``. Its one data key ``release`` holds base64(gzip(JSON)) — Helm's own base64,
under the base64 every Secret's data already has. Records written before Helm gzipped them
are plain base64(JSON): gunzip only when the gzip magic bytes are there, as Helm does.

What this module answers, and the rules it must never bend:

* values come from the highest revision whose status is **deployed** — never from a newer
  failed or pending one (a failed upgrade's values never ran);
* ``--chart NAME`` keeps only revisions of that chart, for namespaces where releases of
  several charts live side by side;
* computed values (``helm get values --all``) are the chart's default values coalesced
  with the user's, by Helm's rules (:func:`coalesce_values`);
* an answer that cannot be given says what exists instead (which statuses, which charts,
  which releases), as an InputError naming the namespace.

The first half is pure (bytes in, model out) so it is tested on real payloads without a
cluster; the second half reads Secrets through lightkube, imported where it is used.
"""

from __future__ import annotations

import base64
import binascii
import copy
import gzip
import json
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn

from shipway.errors import BackendError, InputError, RecordError

if TYPE_CHECKING:
    from lightkube import Client

SECRET_TYPE = "helm.sh/release.v1"
SECRET_DATA_KEY = "release"
GZIP_MAGIC = b"\x1f\x8b\x08"
OWNER_LABEL = ("owner", "helm")

DEPLOYED = "deployed"
#: A release name goes into a label selector, so it must be a label value (every record
#: carries its release's name as one, so no readable release is refused).
LABEL_VALUE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
LABEL_VALUE_MAX = 63


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class HelmChart:
    """The chart a revision was made from, as stored in the record (no subcharts: Helm does
    not serialise a chart's dependencies, so their defaults are not in the record)."""

    name: str
    version: str
    app_version: str
    values: Mapping[str, Any]

    def __str__(self) -> str:
        """``name-version``, as Helm's CHART column shows it."""
        return f"{self.name}-{self.version}"


@dataclass(frozen=True)
class HelmRelease:
    """One revision of a Helm release, decoded from its Secret."""

    name: str
    namespace: str
    revision: int
    status: str
    description: str
    first_deployed: datetime | None
    last_deployed: datetime | None
    chart: HelmChart
    config: Mapping[str, Any]
    """The values the user supplied (``helm get values``), without the chart's defaults."""
    manifest: str
    secret: str = ""
    """The Secret this revision was read from, for messages ("" when decoded from bytes)."""

    @property
    def deployed(self) -> bool:
        return self.status == DEPLOYED

    def values(self, *, computed: bool = False) -> dict[str, Any]:
        """The user-supplied values, or with ``computed`` the chart's defaults coalesced with
        them (``helm get values --all``). Always a fresh copy."""
        if computed:
            return coalesce_values(self.chart.values, self.config)
        return copy.deepcopy(dict(self.config))

    def summary(self) -> dict[str, Any]:
        """One history row, JSON-ready."""
        return {
            "revision": self.revision,
            "updated": _timestamp(self.last_deployed),
            "status": self.status,
            "chart": str(self.chart),
            "chart_name": self.chart.name,
            "chart_version": self.chart.version,
            "app_version": self.chart.app_version,
            "description": self.description,
        }


def _timestamp(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat(timespec="seconds") if moment else None


# --------------------------------------------------------------------------- decoding


def decode_payload(payload: bytes | str, *, source: str = "") -> dict[str, Any]:
    """Helm's own layer: base64 → gunzip (only when the gzip magic bytes are present) → the
    JSON object. ``payload`` is what Helm stored, i.e. a Secret's data after Kubernetes'
    base64 is removed. Anything else is a RecordError naming ``source``."""
    where = f" in {source}" if source else ""
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RecordError(f"not a Helm release record{where}: bad base64 ({exc})") from exc
    if raw[:3] == GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise RecordError(f"not a Helm release record{where}: bad gzip ({exc})") from exc
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise RecordError(f"not a Helm release record{where}: bad JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise RecordError(f"not a Helm release record{where}: JSON is not an object")
    return doc


def release_from_record(doc: Mapping[str, Any], *, source: str = "") -> HelmRelease:
    """The typed model of a decoded record. Fields Helm may omit (``omitempty``) default to
    empty; the ones every record has (name, version, info, chart metadata) are required."""
    where = f" in {source}" if source else ""

    def table(parent: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
        value = parent.get(key)
        if not isinstance(value, Mapping):
            raise RecordError(f"Helm release record{where}: {path} is missing or not an object")
        return value

    def optional_table(parent: Mapping[str, Any], key: str, path: str) -> dict[str, Any]:
        value = parent.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise RecordError(f"Helm release record{where}: {path} is not an object")
        return dict(value)

    name = doc.get("name")
    revision = doc.get("version")
    if not isinstance(name, str) or not name:
        raise RecordError(f"Helm release record{where}: name is missing")
    if not isinstance(revision, int) or isinstance(revision, bool):
        raise RecordError(f"Helm release record{where}: version is missing or not a number")
    info = table(doc, "info", "info")
    chart = table(doc, "chart", "chart")
    metadata = table(chart, "metadata", "chart.metadata")
    return HelmRelease(
        name=name,
        namespace=str(doc.get("namespace") or ""),
        revision=revision,
        status=str(info.get("status") or "unknown"),
        description=str(info.get("description") or ""),
        first_deployed=_parse_time(info.get("first_deployed")),
        last_deployed=_parse_time(info.get("last_deployed")),
        chart=HelmChart(
            name=str(metadata.get("name") or ""),
            version=str(metadata.get("version") or ""),
            app_version=str(metadata.get("appVersion") or ""),
            values=optional_table(chart, "values", "chart.values"),
        ),
        config=optional_table(doc, "config", "config"),
        manifest=str(doc.get("manifest") or ""),
        secret=source,
    )


def _parse_time(value: Any) -> datetime | None:
    """Go's RFC 3339 time (nanoseconds, ``Z`` or an offset); Go's zero time means unset."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return None if moment.year <= 1 else moment


def decode_secret_data(data: str, *, source: str = "") -> HelmRelease:
    """A revision from a Secret's ``data["release"]`` as the API returns it (Kubernetes'
    base64 around Helm's payload)."""
    try:
        payload = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        where = f" {source}" if source else ""
        raise RecordError(f"Secret{where}: data.release is not base64 ({exc})") from exc
    return release_from_record(decode_payload(payload, source=source), source=source)


# --------------------------------------------------------------------------- values


def coalesce_values(
    chart_values: Mapping[str, Any] | None, user_values: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The computed values of a stored release, as ``helm get values --all`` gives them:
    Helm 4.2's ``CoalesceValues`` on a stored chart (which has no subcharts). Checked
    against Helm 4.2.3 itself in the tests.

    The user's values win. Tables (maps) merge key by key at any depth; a scalar or a list
    replaces the chart's value whole; a table never merges with a non-table (the user's side
    stays). ``null``:

    * the chart's own ``null`` defaults are dropped, at every depth (Helm 4.2.0-4.2.3; Helm
      4.1 and earlier kept them, and helm#32530 asks for that back);
    * at the top level, a user ``null`` removes the key when the chart has it at all;
    * inside a table, a user ``null`` removes the key when the chart has a value there;
    * a user ``null`` where the chart has nothing stays ``null`` (older Helm removed nested
      ones too).

    Neither input is changed.
    """
    result = copy.deepcopy(dict(user_values or {}))
    for key, default in (chart_values or {}).items():
        if key not in result:
            if default is not None:
                result[key] = _without_nulls(default)
            continue
        given = result[key]
        if given is None:
            del result[key]
        elif isinstance(given, dict) and isinstance(default, Mapping):
            _coalesce_tables(given, _without_nulls(default))
    return result


def _coalesce_tables(given: dict[str, Any], defaults: Mapping[str, Any]) -> None:
    """Merge ``defaults`` (no nulls left in them) into ``given`` in place; ``given`` wins."""
    for key, default in defaults.items():
        if key not in given:
            given[key] = default
        elif given[key] is None:
            del given[key]
        elif isinstance(given[key], dict) and isinstance(default, Mapping):
            _coalesce_tables(given[key], default)


def _without_nulls(value: Any) -> Any:
    """A deep copy of ``value`` with ``null`` entries of tables removed, at every depth
    (lists are left as they are, as Helm does)."""
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return copy.deepcopy(value)


# --------------------------------------------------------------------------- choosing


def select_deployed(
    revisions: Iterable[HelmRelease], *, release: str, namespace: str, chart: str | None = None
) -> HelmRelease:
    """The highest deployed revision (of ``chart`` when given) among ``revisions`` — all of
    one release's revisions. Raises InputError saying what exists when there is none."""
    ordered = sorted(revisions, key=lambda r: r.revision)
    where = f"Helm release {release!r} in namespace {namespace!r}"
    if not ordered:
        raise InputError(f"no {where}")
    deployed = [r for r in ordered if r.deployed]
    if not deployed:
        raise InputError(
            f"{where} has no deployed revision (revisions: {_statuses(ordered)}; values come "
            "only from a deployed revision)"
        )
    if chart is not None:
        matching = [r for r in deployed if r.chart.name == chart]
        if not matching:
            raise InputError(
                f"{where} has no deployed revision of chart {chart!r} (deployed: "
                + ", ".join(f"revision {r.revision} {r.chart}" for r in deployed)
                + f"; charts in its history: {', '.join(_charts(ordered))})"
            )
        deployed = matching
    return deployed[-1]


def history(revisions: Iterable[HelmRelease]) -> list[HelmRelease]:
    """Every revision, oldest first (as ``helm history``)."""
    return sorted(revisions, key=lambda r: r.revision)


def _statuses(ordered: Sequence[HelmRelease]) -> str:
    return ", ".join(f"{r.revision} {r.status}" for r in ordered)


def _charts(ordered: Sequence[HelmRelease]) -> list[str]:
    return sorted({r.chart.name for r in ordered})


# --------------------------------------------------------------------------- reading


def read_revisions(client: Client, release: str, *, status: str | None = None) -> list[HelmRelease]:
    """Every revision of ``release`` in the client's namespace (label query
    ``owner=helm,name=<release>`` [``,status=<status>``]), oldest first. Secrets of another
    type that carry the labels are not Helm's records and are skipped."""
    check_release_name(release)
    labels = {OWNER_LABEL[0]: OWNER_LABEL[1], "name": release}
    if status is not None:
        labels["status"] = status
    found = []
    for secret in _list_secrets(client, labels):
        if secret.type != SECRET_TYPE or secret.metadata is None:
            continue
        name = secret.metadata.name or "?"
        data = (secret.data or {}).get(SECRET_DATA_KEY)
        if data is None:
            raise RecordError(f"Secret {name}: no data.{SECRET_DATA_KEY}")
        found.append(decode_secret_data(data, source=f"Secret {name}"))
    return history(found)


def read_deployed(client: Client, release: str, *, chart: str | None = None) -> HelmRelease:
    """The revision whose values are the release's values: the highest deployed one (of
    ``chart`` when given). Asks for ``status=deployed`` first — usually one record to
    decode — and reads the whole history only to explain why there is no answer."""
    namespace = client.namespace
    quick = [r for r in read_revisions(client, release, status=DEPLOYED) if r.deployed]
    if chart is not None:
        quick = [r for r in quick if r.chart.name == chart]
    if quick:
        return quick[-1]
    everything = read_revisions(client, release)
    if not everything:
        _raise_not_found(client, release)
    return select_deployed(everything, release=release, namespace=namespace, chart=chart)


def read_history(client: Client, release: str) -> list[HelmRelease]:
    """Every revision of ``release``, oldest first; InputError when there is none."""
    revisions = read_revisions(client, release)
    if not revisions:
        _raise_not_found(client, release)
    return revisions


def release_names(client: Client) -> list[str]:
    """The names of the Helm releases in the client's namespace (from the labels)."""
    names = set()
    for secret in _list_secrets(client, {OWNER_LABEL[0]: OWNER_LABEL[1]}):
        if secret.type == SECRET_TYPE and secret.metadata and secret.metadata.labels:
            names.add(secret.metadata.labels.get("name", ""))
    return sorted(n for n in names if n)


def check_release_name(release: str) -> None:
    """InputError unless ``release`` can be looked up: a bad one would otherwise reach the
    API server inside a label selector and come back as its error."""
    if len(release) > LABEL_VALUE_MAX or not LABEL_VALUE.fullmatch(release):
        raise InputError(
            f"{release!r} is not a Helm release name (letters, digits, '-', '_' and '.', "
            f"starting and ending with a letter or digit, at most {LABEL_VALUE_MAX})"
        )


def _raise_not_found(client: Client, release: str) -> NoReturn:
    others = release_names(client)
    there = f"releases there: {', '.join(others)}" if others else "it has no Helm releases"
    raise InputError(
        f"no Helm release {release!r} in namespace {client.namespace!r} ({there}; "
        "hint: -n NAMESPACE)"
    )


def _list_secrets(client: Client, labels: Mapping[str, str]) -> list[Any]:
    """List Secrets by label, translating the client library's errors at this edge."""
    import httpx2
    from lightkube.core.exceptions import ApiError
    from lightkube.resources.core_v1 import Secret

    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    what = f"Secrets ({selector}) in namespace {client.namespace!r}"
    try:
        return list(client.list(Secret, namespace=client.namespace, labels=dict(labels)))
    except ApiError as exc:
        status = exc.status
        code = getattr(status, "code", None)
        reason = getattr(status, "message", None) or str(exc)
        hint = " (hint: the kubeconfig's user needs list on secrets)" if code == 403 else ""
        raise BackendError(f"cannot list {what}: {reason}{hint}") from exc
    except httpx2.HTTPError as exc:
        raise BackendError(f"cannot list {what}: {type(exc).__name__}: {exc}") from exc

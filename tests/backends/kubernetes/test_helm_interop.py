"""Helm releases made by real Helm (helm-python-sdk: Helm 4.2's Go SDK) read back natively.

One namespace is built once for the module (``scenario``) and only read afterwards:

* ``shop`` (chart demo): 1 superseded, 2 deployed, 3 failed — an upgrade whose pods never
  become ready, so its values never ran;
* ``jobs`` (chart worker): 1 deployed — a second chart in the same namespace;
* ``swap``: 1 superseded of chart demo, 2 deployed of chart coalesce (same release name);
* ``broken`` (chart demo): 1 failed — no revision ever deployed;
* ``knobs`` (chart ``charts/coalesce`` here): 12 revisions, the last carrying values
  that exercise every rule of Helm's value coalescing.

The decoder's unit tests run on the Secret payloads captured from that namespace; the only
payload not written by Helm is an old-style record without gzip, re-encoded from a real one.
Helm itself (``get_values``) is the oracle for user-supplied and computed values.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from click.testing import CliRunner
from lightkube import Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret

from shipway.backends.kubernetes.helm import (
    GZIP_MAGIC,
    coalesce_values,
    decode_payload,
    decode_secret_data,
    read_deployed,
    read_history,
    read_revisions,
    release_names,
    select_deployed,
)
from shipway.cli.main import cli
from shipway.errors import InputError, RecordError
from tests.testenv.k8s import (
    CHARTS_DIR,
    HelmPeer,
    MintKubeconfig,
    create_namespace,
    delete_namespace,
)

# one worker runs the whole module, so its scenario (module scope) is made once
pytestmark = [pytest.mark.k8s, pytest.mark.xdist_group("helm_interop")]

COALESCE_CHART = Path(__file__).parent / "charts" / "coalesce"

SHOP = {
    1: {"message": "v1"},
    2: {"message": "v2", "replicas": 3, "podAnnotations": {"team": "payments"}},
    3: {"message": "v3", "image": "demo-app:neverready"},
}
JOBS = {"replicas": 2, "message": "crunching"}
KNOBS_LAST = 12
KNOBS = {
    "scalar": "user",
    "removed": None,
    "nullDefault": {"q": None, "r": 1},
    "nullDefaultNulled": None,
    "list": [3],
    "newNull": None,
    "new": {"n": 1},
    "table": {
        "a": 10,
        "removed": None,
        "nullInside": None,
        "nested": {"c": None, "e": None},
        "newNull": None,
    },
    "tableVsScalar": "scalar",
    "scalarVsTable": {"t": 1},
}
# What Helm 4.2.3's `helm get values --all` gives for KNOBS over charts/coalesce/values.yaml,
# written out so the rules stay readable here (and checked against Helm itself below).
KNOBS_COMPUTED = {
    "scalar": "user",  # a user scalar replaces the chart's
    # "removed": a user null removes the chart's key
    "nullDefault": {"q": None, "r": 1},  # a user table over a chart null stays as given
    # "nullDefaultNulled": at the top level a user null removes the key, even over a chart null
    "list": [3],  # lists are replaced, never merged
    "newNull": None,  # a user null for a key the chart lacks stays
    "new": {"n": 1},
    "table": {  # tables merge key by key
        "a": 10,
        # "removed": nested user null over a chart value: removed
        "nullInside": None,  # nested user null over a chart null: stays
        "nested": {"d": 3, "e": None},  # ... and so on at any depth
        "newNull": None,
        "keep": "x",
    },
    "tableVsScalar": "scalar",  # a table never merges with a non-table: the user's side stays
    "scalarVsTable": {"t": 1},
}
# The chart's own null defaults are dropped at every depth (Helm 4.2.0-4.2.3, helm#32530):
# `swap` (chart coalesce, user values {"message": "moved"}) computes to this.
SWAP_COMPUTED = {
    "message": "moved",
    "scalar": "chart",
    "removed": "chart",
    "list": [1, 2],
    "table": {"a": 1, "removed": 2, "nested": {"c": 2, "d": 3}, "keep": "x"},
    "tableVsScalar": {"x": 1},
    "scalarVsTable": "s",
}


@dataclass
class Scenario:
    namespace: str
    kubeconfig: Path
    client: Client  # namespaced to ``namespace``
    payloads: dict[str, str]  # Secret name -> data["release"] exactly as the API returned it
    labels: dict[str, dict[str, str]]  # Secret name -> its labels

    def helm_values(self, release: str, *, all_values: bool = False, revision: int) -> Any:
        """Helm's own answer (``helm get values [--all] --revision N``)."""
        with helm_python.Config(kubeconfig_path=self.kubeconfig, namespace=self.namespace) as c:
            return c.get_values(release, all_values=all_values, revision=revision)


# session, not module: the suite runs the slowest tests first, so a worker runs this
# module's tests between others', and a module fixture was made again for each of them
# (17 times in a run, some 20 s each); it is only read, so one per worker is enough
@pytest.fixture(scope="session")
def scenario(k8s_client: Client, k8s_kubeconfig: Path) -> Iterator[Scenario]:
    namespace = create_namespace(k8s_client, f"t-helm-interop-{uuid.uuid4().hex[:6]}")
    helm = HelmPeer(k8s_kubeconfig)
    try:
        helm.install("shop", namespace, values=SHOP[1])
        helm.upgrade("shop", namespace, values=SHOP[2])
        with pytest.raises(helm_python.HelmError):
            helm.upgrade("shop", namespace, values=SHOP[3], wait=True, timeout=5)
        helm.install("jobs", namespace, chart="worker", values=JOBS)
        helm.install("swap", namespace, chart="demo", values={"message": "on demo"})
        helm.upgrade("swap", namespace, chart=COALESCE_CHART, values={"message": "moved"})
        with pytest.raises(helm_python.HelmError):
            helm.install(
                "broken", namespace, values={"image": "demo-app:neverready"}, wait=True, timeout=3
            )
        helm.install("knobs", namespace, chart=COALESCE_CHART, values={"scalar": "u1"})
        for n in range(2, KNOBS_LAST):
            helm.upgrade("knobs", namespace, chart=COALESCE_CHART, values={"scalar": f"u{n}"})
        helm.upgrade("knobs", namespace, chart=COALESCE_CHART, values=KNOBS)

        payloads, labels = {}, {}
        for secret in k8s_client.list(Secret, namespace=namespace, labels={"owner": "helm"}):
            assert secret.metadata is not None and secret.metadata.name and secret.data
            payloads[secret.metadata.name] = secret.data["release"]
            labels[secret.metadata.name] = dict(secret.metadata.labels or {})
        client = Client(KubeConfig.from_file(k8s_kubeconfig), namespace=namespace)
        yield Scenario(namespace, k8s_kubeconfig, client, payloads, labels)
        client.close()
    finally:
        delete_namespace(k8s_client, namespace)


def secret_name(release: str, revision: int) -> str:
    return f"sh.helm.release.v1.{release}.v{revision}"


def run_cli(scenario: Scenario, *args: str) -> tuple[int, str, str]:
    result = CliRunner(env={"KUBECONFIG": str(scenario.kubeconfig)}).invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


# --------------------------------------------------------------------------- decoding


def test_every_captured_record_decodes_to_what_its_labels_and_helm_say(
    scenario: Scenario,
) -> None:
    assert len(scenario.payloads) == 3 + 1 + 2 + 1 + KNOBS_LAST
    for name, data in scenario.payloads.items():
        release = decode_secret_data(data, source=name)
        labels = scenario.labels[name]
        assert name == secret_name(release.name, release.revision)
        assert (release.name, str(release.revision), release.status) == (
            labels["name"],
            labels["version"],
            labels["status"],
        )
        assert release.namespace == scenario.namespace
        assert release.first_deployed is not None and release.last_deployed is not None
        assert release.first_deployed <= release.last_deployed
        assert release.manifest.startswith("---\n# Source: ")
        assert release.secret == name


def test_decoded_record_carries_chart_user_values_and_manifest(scenario: Scenario) -> None:
    shop2 = decode_secret_data(scenario.payloads[secret_name("shop", 2)])
    assert shop2.revision == 2 and shop2.status == "deployed"
    assert shop2.description == "Upgrade complete"
    assert (shop2.chart.name, shop2.chart.version, shop2.chart.app_version) == (
        "demo",
        "0.1.0",
        "1.0",
    )
    assert str(shop2.chart) == "demo-0.1.0"
    assert shop2.config == SHOP[2]
    assert shop2.chart.values == yaml.safe_load((CHARTS_DIR / "demo" / "values.yaml").read_text())
    assert "kind: Deployment" in shop2.manifest and "name: shop-config" in shop2.manifest

    jobs = decode_secret_data(scenario.payloads[secret_name("jobs", 1)])
    assert (str(jobs.chart), jobs.chart.app_version, jobs.description) == (
        "worker-0.2.0",
        "2.0",
        "Install complete",
    )


def test_the_two_base64_layers_and_gzip_are_as_helm_writes_them(scenario: Scenario) -> None:
    helm_layer = base64.b64decode(scenario.payloads[secret_name("shop", 1)])
    assert base64.b64decode(helm_layer)[:3] == GZIP_MAGIC
    doc = decode_payload(helm_layer)
    assert doc["name"] == "shop" and doc["version"] == 1
    assert doc["config"] == SHOP[1]


def test_old_record_without_gzip_decodes_the_same(scenario: Scenario) -> None:
    real = scenario.payloads[secret_name("shop", 2)]
    plain_json = gzip.decompress(base64.b64decode(base64.b64decode(real)))
    old = base64.b64encode(base64.b64encode(plain_json)).decode()
    assert base64.b64decode(base64.b64decode(old))[:3] != GZIP_MAGIC
    assert decode_secret_data(old) == decode_secret_data(real)


def test_damaged_records_are_record_errors_naming_the_secret(scenario: Scenario) -> None:
    name = secret_name("shop", 1)
    gzipped = base64.b64decode(base64.b64decode(scenario.payloads[name]))
    truncated = base64.b64encode(base64.b64encode(gzipped[: len(gzipped) // 2])).decode()
    expected = re.escape(f"not a Helm release record in {name}: bad gzip")
    with pytest.raises(RecordError, match=expected):
        decode_secret_data(truncated, source=name)
    with pytest.raises(RecordError, match=r"data\.release is not base64"):
        decode_secret_data("not base64!", source=name)


# --------------------------------------------------------------------------- values


def test_values_come_from_the_deployed_revision_not_the_newer_failed_one(
    scenario: Scenario,
) -> None:
    revision = read_deployed(scenario.client, "shop")
    assert (revision.revision, revision.status) == (2, "deployed")
    assert revision.values() == SHOP[2]
    assert revision.values() == scenario.helm_values("shop", revision=2)
    # Helm's own default (`helm get values shop`) reads the newest revision, failed or not:
    with helm_python.Config(kubeconfig_path=scenario.kubeconfig, namespace=scenario.namespace) as c:
        assert c.get_values("shop") == SHOP[3]


def test_computed_values_match_helm_get_values_all(scenario: Scenario) -> None:
    for release, revision in (("shop", 2), ("jobs", 1), ("swap", 2), ("knobs", KNOBS_LAST)):
        mine = read_deployed(scenario.client, release)
        assert mine.revision == revision
        assert mine.values() == scenario.helm_values(release, revision=revision)
        assert mine.values(computed=True) == scenario.helm_values(
            release, all_values=True, revision=revision
        ), release


def test_coalescing_rules_on_every_shape(scenario: Scenario) -> None:
    knobs = read_deployed(scenario.client, "knobs")
    assert knobs.config == KNOBS
    assert knobs.values(computed=True) == KNOBS_COMPUTED
    # Pure function, inputs left alone:
    defaults = yaml.safe_load((COALESCE_CHART / "values.yaml").read_text())
    before = json.dumps([defaults, KNOBS], sort_keys=True)
    assert coalesce_values(defaults, KNOBS) == KNOBS_COMPUTED
    assert json.dumps([defaults, KNOBS], sort_keys=True) == before
    assert coalesce_values(defaults, {"message": "moved"}) == SWAP_COMPUTED
    assert read_deployed(scenario.client, "swap").values(computed=True) == SWAP_COMPUTED
    assert coalesce_values(None, KNOBS) == KNOBS


def test_chart_filter_picks_the_release_of_that_chart(scenario: Scenario) -> None:
    assert read_deployed(scenario.client, "jobs", chart="worker").values() == JOBS
    assert read_deployed(scenario.client, "shop", chart="demo").revision == 2
    with pytest.raises(InputError) as error:
        read_deployed(scenario.client, "shop", chart="worker")
    assert str(error.value) == (
        f"Helm release 'shop' in namespace '{scenario.namespace}' has no deployed revision of "
        "chart 'worker' (deployed: revision 2 demo-0.1.0; charts in its history: demo)"
    )


def test_chart_filter_on_a_release_that_changed_chart(scenario: Scenario) -> None:
    swap = read_deployed(scenario.client, "swap", chart="coalesce")
    assert (swap.revision, str(swap.chart), swap.values()) == (
        2,
        "coalesce-0.3.0",
        {"message": "moved"},
    )
    with pytest.raises(InputError) as error:
        read_deployed(scenario.client, "swap", chart="demo")
    assert str(error.value).endswith(
        "has no deployed revision of chart 'demo' (deployed: revision 2 coalesce-0.3.0; "
        "charts in its history: coalesce, demo)"
    )


def test_no_deployed_revision_says_which_statuses_exist(scenario: Scenario) -> None:
    with pytest.raises(InputError) as error:
        read_deployed(scenario.client, "broken")
    assert str(error.value) == (
        f"Helm release 'broken' in namespace '{scenario.namespace}' has no deployed revision "
        "(revisions: 1 failed; values come only from a deployed revision)"
    )


def test_no_such_release_names_the_namespace_and_what_is_there(scenario: Scenario) -> None:
    with pytest.raises(InputError) as error:
        read_deployed(scenario.client, "shopp")
    assert str(error.value) == (
        f"no Helm release 'shopp' in namespace '{scenario.namespace}' (releases there: broken, "
        "jobs, knobs, shop, swap; hint: -n NAMESPACE)"
    )
    with pytest.raises(InputError, match="no Helm release 'shopp'"):
        read_history(scenario.client, "shopp")
    assert release_names(scenario.client) == ["broken", "jobs", "knobs", "shop", "swap"]


def test_select_deployed_takes_the_highest_deployed_revision(scenario: Scenario) -> None:
    """Two deployed revisions happen when concurrent Helm runs race; Helm takes the newest."""
    shop = {r.revision: r for r in read_revisions(scenario.client, "shop")}
    also_deployed = replace(shop[1], status="deployed")
    chosen = select_deployed(
        [shop[3], shop[2], also_deployed], release="shop", namespace=scenario.namespace
    )
    assert chosen is shop[2]
    with pytest.raises(InputError, match=r"^no Helm release 'shop'"):
        select_deployed([], release="shop", namespace=scenario.namespace)


# --------------------------------------------------------------------------- history


def test_history_lists_every_revision_in_order(scenario: Scenario) -> None:
    rows = [r.summary() for r in read_history(scenario.client, "shop")]
    assert [(r["revision"], r["status"], r["chart"], r["app_version"]) for r in rows] == [
        (1, "superseded", "demo-0.1.0", "1.0"),
        (2, "deployed", "demo-0.1.0", "1.0"),
        (3, "failed", "demo-0.1.0", "1.0"),
    ]
    assert rows[0]["description"] == "Install complete"
    assert rows[1]["description"] == "Upgrade complete"
    assert rows[2]["description"].startswith('Upgrade "shop" failed: ')
    assert [r["updated"] for r in rows] == sorted(r["updated"] for r in rows)
    with helm_python.Config(kubeconfig_path=scenario.kubeconfig, namespace=scenario.namespace) as c:
        theirs = c.history("shop")
    assert [(r["revision"], r["status"]) for r in rows] == [
        (r["revision"], r["status"]) for r in theirs
    ]


def test_history_orders_revisions_numerically(scenario: Scenario) -> None:
    revisions = read_history(scenario.client, "knobs")
    assert [r.revision for r in revisions] == list(range(1, KNOBS_LAST + 1))
    assert [r.status for r in revisions] == ["superseded"] * (KNOBS_LAST - 1) + ["deployed"]
    assert revisions[1].config == {"scalar": "u2"}


def test_secrets_of_another_type_with_helm_labels_are_not_records(
    scenario: Scenario, k8s_client: Client
) -> None:
    impostor = Secret(
        metadata=ObjectMeta(
            name=f"impostor-{uuid.uuid4().hex[:6]}",
            namespace=scenario.namespace,
            labels={"owner": "helm", "name": "shop", "status": "deployed", "version": "9"},
        ),
        type="Opaque",
        stringData={"release": "not a record"},
    )
    k8s_client.create(impostor)
    try:
        assert [r.revision for r in read_history(scenario.client, "shop")] == [1, 2, 3]
        assert read_deployed(scenario.client, "shop").revision == 2
    finally:
        assert impostor.metadata is not None and impostor.metadata.name
        k8s_client.delete(Secret, impostor.metadata.name, namespace=scenario.namespace)


# --------------------------------------------------------------------------- CLI


def test_cli_values_text_is_a_header_then_yaml(scenario: Scenario) -> None:
    code, out, _ = run_cli(scenario, "helm", "values", "shop", "-n", scenario.namespace)
    assert code == 0
    header, _, body = out.partition("\n")
    assert header == (
        f"# shop in {scenario.namespace}: revision 2 (deployed), chart demo-0.1.0; "
        "user-supplied values"
    )
    assert yaml.safe_load(body) == SHOP[2]
    assert yaml.safe_load(out) == SHOP[2]  # the header is a comment: the whole output is YAML


def test_cli_values_json_and_yaml(scenario: Scenario) -> None:
    code, out, _ = run_cli(
        scenario, "helm", "values", "knobs", "-n", scenario.namespace, "--all", "-o", "json"
    )
    assert code == 0
    assert json.loads(out) == {
        "release": "knobs",
        "namespace": scenario.namespace,
        "revision": KNOBS_LAST,
        "status": "deployed",
        "chart": {"name": "coalesce", "version": "0.3.0", "app_version": "3.1"},
        "computed": True,
        "values": KNOBS_COMPUTED,
    }
    code, out, _ = run_cli(
        scenario, "helm", "values", "jobs", "-n", scenario.namespace, "--chart", "worker",
        "-o", "yaml",
    )  # fmt: skip
    assert code == 0
    assert out == "message: crunching\nreplicas: 2\n"


def test_cli_history_text_and_json(scenario: Scenario) -> None:
    code, out, _ = run_cli(scenario, "helm", "history", "shop", "-n", scenario.namespace)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["REVISION", "UPDATED", "STATUS", "CHART", "APP_VERSION",
                                "DESCRIPTION"]  # fmt: skip
    assert [line.split()[:4] for line in lines[1:]] == [
        ["1", lines[1].split()[1], "superseded", "demo-0.1.0"],
        ["2", lines[2].split()[1], "deployed", "demo-0.1.0"],
        ["3", lines[3].split()[1], "failed", "demo-0.1.0"],
    ]  # one line per revision, even for a failure description spanning lines
    code, out, _ = run_cli(scenario, "helm", "history", "shop", "-n", scenario.namespace,
                           "-o", "json")  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    assert (doc["release"], doc["namespace"]) == ("shop", scenario.namespace)
    assert [(r["revision"], r["status"]) for r in doc["revisions"]] == [
        (1, "superseded"),
        (2, "deployed"),
        (3, "failed"),
    ]
    assert "\n" in doc["revisions"][2]["description"]  # JSON keeps Helm's text as stored


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["values", "nope"], "no Helm release 'nope' in namespace '{ns}'"),
        (["history", "nope"], "no Helm release 'nope' in namespace '{ns}'"),
        (["values", "broken"], "has no deployed revision (revisions: 1 failed;"),
        (["values", "shop", "--chart", "worker"], "charts in its history: demo)"),
        (["history", "Shop Front"], "'Shop Front' is not a Helm release name"),
    ],
)
def test_cli_errors_exit_2_with_the_reason(
    scenario: Scenario, args: list[str], expected: str
) -> None:
    code, out, err = run_cli(scenario, "helm", *args, "-n", scenario.namespace)
    assert code == 2
    assert out == ""
    assert expected.format(ns=scenario.namespace) in err
    code, out, _ = run_cli(scenario, "helm", *args, "-n", scenario.namespace, "-o", "json")
    assert code == 2
    error = json.loads(out)["error"]
    assert error["exit_code"] == 2
    assert expected.format(ns=scenario.namespace) in error["message"]


def test_cli_unknown_context_exits_2(scenario: Scenario) -> None:
    code, _, err = run_cli(scenario, "helm", "values", "shop", "--context", "nosuch")
    assert code == 2
    assert "nosuch" in err and "contexts: shipway-test" in err


def test_cli_namespace_defaults_to_the_contexts_and_needs_only_list_secrets(
    scenario: Scenario, mint_kubeconfig: MintKubeconfig
) -> None:
    only_list_secrets = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]
    kubeconfig = mint_kubeconfig(scenario.namespace, only_list_secrets)
    result = CliRunner(env={"KUBECONFIG": str(kubeconfig)}).invoke(
        cli, ["helm", "values", "shop", "-o", "json"]
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["values"] == SHOP[2]


def test_cli_forbidden_secrets_is_a_backend_error_with_a_hint(
    scenario: Scenario, mint_kubeconfig: MintKubeconfig
) -> None:
    only_configmaps = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]
    kubeconfig = mint_kubeconfig(scenario.namespace, only_configmaps)
    result = CliRunner(env={"KUBECONFIG": str(kubeconfig)}).invoke(cli, ["helm", "history", "shop"])
    assert result.exit_code == 1
    assert f"cannot list Secrets (owner=helm,name=shop) in namespace '{scenario.namespace}'" in (
        result.stderr
    )
    assert "forbidden" in result.stderr and "needs list on secrets" in result.stderr

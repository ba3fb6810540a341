"""``shipway helm …``: Helm releases already in a cluster, read natively (no helm binary).

The Kubernetes client and YAML are imported inside the commands, so ``shipway --help`` and
``shipway helm --help`` stay fast.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from shipway.cli.common import (
    Context,
    output_option,
    pass_obj,
    run_body,
)

if TYPE_CHECKING:
    from shipway.backends.kubernetes.helm import HelmRelease

F = TypeVar("F", bound=Callable[..., Any])


def cluster_options(f: F) -> F:
    f = click.option(
        "--context",
        metavar="CTX",
        help="kubeconfig context (default: the current one; KUBECONFIG is honoured).",
    )(f)
    return click.option(
        "-n",
        "--namespace",
        metavar="NS",
        help="Namespace of the release (default: the context's namespace, else 'default').",
    )(f)


def values_output_option(f: F) -> F:
    """text | yaml | json: ``yaml`` is the values alone, for piping into a file."""

    def set_output(ctx: click.Context, _: click.Parameter, value: str) -> str:
        ctx.ensure_object(Context).json = value == "json"
        return value

    return click.option(
        "-o",
        "--output",
        "output",
        type=click.Choice(["text", "yaml", "json"]),
        default="text",
        callback=set_output,
        is_eager=True,
        help="text (default: a '#' header line, then YAML), yaml (the values only) or json.",
    )(f)


@click.group()
def helm() -> None:
    """Read Helm releases in a cluster: values and history, from Helm's own records.

    \b
    Values come from the highest *deployed* revision, never from a newer failed or
    pending one. No helm binary is needed; the kubeconfig's user needs list on secrets.
    """


@helm.command("values")
@click.argument("release")
@cluster_options
@click.option(
    "--chart",
    metavar="NAME",
    help="Only a revision of this chart (when several charts share a namespace).",
)
@click.option(
    "--all",
    "computed",
    is_flag=True,
    help="Computed values: the chart's defaults merged with the user's (helm get values --all).",
)
@values_output_option
@pass_obj
def values(
    obj: Context,
    release: str,
    namespace: str | None,
    context: str | None,
    chart: str | None,
    computed: bool,
    output: str,
) -> None:
    """The values of RELEASE's deployed revision (user-supplied, or --all)."""

    def body() -> int:
        from shipway import api

        revision = api.helm_release(release, context=context, namespace=namespace, chart=chart)
        result = revision.values(computed=computed)
        if output == "json":
            from shipway.cli.report import emit_json

            emit_json({**_describe(revision), "computed": computed, "values": result})
            return 0
        import yaml

        if output == "text":
            kind = "computed values" if computed else "user-supplied values"
            click.echo(
                f"# {revision.name} in {revision.namespace}: revision "
                f"{revision.revision} ({revision.status}), chart {revision.chart}; {kind}"
            )
        click.echo(yaml.safe_dump(result, default_flow_style=False, sort_keys=True), nl=False)
        return 0

    run_body(obj, body)


@helm.command("history")
@click.argument("release")
@cluster_options
@output_option
@pass_obj
def history(obj: Context, release: str, namespace: str | None, context: str | None) -> None:
    """Every revision of RELEASE, oldest first: status, chart, app version, description."""

    def body() -> int:
        from shipway import api
        from shipway.cli.report import emit_json, table

        read_in, revisions = api.helm_history(release, context=context, namespace=namespace)
        rows = [r.summary() for r in revisions]
        if obj.json:
            emit_json({"release": release, "namespace": read_in, "revisions": rows})
            return 0
        columns = ["revision", "updated", "status", "chart", "app_version", "description"]
        # A failure description can span lines; one row per revision in a table.
        flat = [{**row, "description": " ".join(row["description"].split())} for row in rows]
        for line in table(flat, columns):
            click.echo(line)
        return 0

    run_body(obj, body)


def _describe(revision: HelmRelease) -> dict[str, Any]:
    return {
        "release": revision.name,
        "namespace": revision.namespace,
        "revision": revision.revision,
        "status": revision.status,
        "chart": {
            "name": revision.chart.name,
            "version": revision.chart.version,
            "app_version": revision.chart.app_version,
        },
    }

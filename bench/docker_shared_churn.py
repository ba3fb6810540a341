"""Benchmark of apps arriving and leaving on a host's shared proxy while another app there is
under load: this code against the code of before the pool of host-name entries (``--old``,
default 87ef84c), on test host A of scripts/docker-testenv.

Two shared proxies (ports), one per code, each with:
  steady  an app deployed once, under a loop of requests by its host name all the while
  churn   an app whose slot is deployed (its first deploy: its route added) and destroyed
          (its route removed, its network left) ``--cycles`` times
The churning apps are named ``a…``: their networks (``shipway-a…``) sort before the proxies'
``shipway-proxy``, as an app ``blog``'s would.

Each code runs in a worker process of its own (bench/docker_shared_redeploy.py's), timed in
it around ``api.deploy`` and ``api.destroy``, in interleaved rounds (each round one cycle of
each code, the order alternating), under the same load. The old code's worktree is made
outside the repository when missing (``--old-tree``).

With ``--catch-all`` the churning apps declare no routes: each answers every name no other
route takes (the proxy's catch-all entry; compare with ``--old`` a commit before it, e96809d).

With ``--https`` the churning apps' route is an ACME name (``tls = "auto"``, under the test
CA's domain): the new code's proxy is on the CA's challenge port (held, as the tests hold it),
so its names are ordered from the test CA (Pebble); the old code's on another port, whose
orders fail (that proxy's reloads are what it is there for). The steady apps have an ACME
name too (their load goes to their plain one), so each proxy is made with its HTTPS port
before the cycles, which count only what an app's arrival and departure do. Compare with
``--old`` a commit before the secure entries (0a7f30f).

With ``--canary`` the churning apps are deployed once and then, each cycle, walk a canary to
v2 and another back to v1 (steps 10 and 50 %, a second each), under a request loop of their
own (the canary's counts need requests): the shares are what is timed (``first_deploy_s``
then holds the walk to v2, ``destroy_s`` the walk back). Compare with ``--old`` a commit
before the canary's split in the entries (c20c01a).

Figures: the steady apps' failed requests (goal 0 for this code), the config loads each proxy
made (Caddy's ``server running`` lines after the first deploy; goal 0), and the first deploy's
and the destroy's time per code (median, min-max).

Run (root, test hosts up):  .venv/bin/python bench/docker_shared_churn.py [--cycles 10]
                            [--catch-all --old e96809d] [--https --old 0a7f30f]
                            [--canary --old c20c01a]
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from pathlib import Path
from typing import Any

import docker.errors

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from benchlib import Run, median  # noqa: E402
from docker_proxy import free_port  # noqa: E402
from docker_shared_redeploy import SLOT, App, Load, cleanup, parser, workers, write_spec  # noqa: E402
from tests.testenv.acme import challenge_port, ensure_acme_env  # noqa: E402
from tests.testenv.docker import DockerEnv  # noqa: E402

#: the churning apps' canary with ``--canary``: two short analysed steps
CANARY = f"""strategy = "canary"
[slots.{SLOT}.canary]
steps = [10, 50, 100]
step_time = "1s"
step_requests = 5
timeout = "120s"
"""


def loads(env: DockerEnv, port: int) -> int:
    """How many servers the shared proxy on ``port`` started (each config load: one more)."""
    client = env.local_client(env.a)
    try:
        return client.containers.get(f"shipway-proxy-{port}").logs().count(b'"server running"')
    except docker.errors.NotFound:
        return -1
    finally:
        client.close()


def spread(times: list[float]) -> dict[str, object]:
    return {"median": round(median(times), 2), "min_max": [round(min(times), 2),
            round(max(times), 2)]}  # fmt: skip


def main() -> int:
    ap = parser(__doc__, "87ef84c", "before the pool")
    ap.add_argument("--cycles", type=int, default=5, help="rounds (one cycle of each code)")
    ap.add_argument("--catch-all", action="store_true",
                    help="the churning apps declare no routes (every other name)")  # fmt: skip
    ap.add_argument("--https", action="store_true",
                    help="the churning apps' route is an ACME name (the test CA's)")  # fmt: skip
    ap.add_argument("--canary", action="store_true",
                    help="the churning apps walk canaries (v2, then v1) instead")  # fmt: skip
    args = ap.parse_args()
    with contextlib.ExitStack() as held:
        acme = ensure_acme_env() if args.https else None
        port = held.enter_context(challenge_port(acme)) if acme else free_port()
        return measure(args, {"new": port, "old": free_port()}, acme)


def measure(args: Any, ports: dict[str, int], acme: Any) -> int:
    run = Run("docker_shared_churn", {k: str(v) for k, v in vars(args).items()})
    env, work, new, old = workers(args, "shipway-shared-churn-")
    tag = uuid.uuid4().hex[:6]
    steady = {c: App(f"steady-{c}", f"s{c[0]}{tag}", ports[c], work, w)
              for c, w in (("new", new), ("old", old))}  # fmt: skip
    churn = {c: App(f"churn-{c}", f"a{c[0]}{tag}", ports[c], work, w)
             for c, w in (("new", new), ("old", old))}  # fmt: skip
    apps = [*steady.values(), *churn.values()]
    for app in apps:
        write_spec(env, work, app)
    if args.catch_all:  # the churning apps without their [[routes]]: every other name
        for app in churn.values():
            text = app.spec.read_text()
            route = f'[[routes]]\nhost = "{app.host}"\nprocess = "web"\n'
            assert route in text
            app.spec.write_text(text.replace(route, ""))
    if acme is not None:  # the churning apps' route: an ACME name on the proxy's HTTPS port
        tls_ports = {c: free_port() for c in ports}
        for code, app in [*steady.items(), *churn.items()]:
            text = app.spec.read_text()
            (app.spec.parent / "ca.pem").write_bytes(
                acme.directory_ca.read_bytes() + acme.root.read_bytes()
            )
            route = f'[[routes]]\nhost = "{app.host}"\nprocess = "web"\n'
            secure = route.replace(app.host, f"{app.name}.{acme.domain}") + 'tls = "auto"\n'
            if app in churn.values():  # its one route: the ACME name
                app.host = f"{app.name}.{acme.domain}"
                text = text.replace(route, secure)
            else:  # the steady app's proxy is made with the HTTPS port (its plain name loaded)
                text = text.replace(route, route + secure)
            slot = (f"proxy_tls_port = {tls_ports[code]}\n"
                    f'acme = {{ directory = "{acme.directory}", root = "ca.pem" }}\n')  # fmt: skip
            app.spec.write_text(text + slot)
    if args.canary:  # a canary at each deploy, short steps, few requests to decide
        for app in churn.values():
            app.spec.write_text(app.spec.read_text() + CANARY)
    deploys: dict[str, list[float]] = {"new": [], "old": []}
    destroys: dict[str, list[float]] = {"new": [], "old": []}
    reloads = {}
    try:
        for app in [*steady.values(), *(churn.values() if args.canary else ())]:
            first = app.worker.run("deploy", app.spec, env.images.v1)
            assert first["ok"], f"{app.label}: {first['line']}"
        before = {c: loads(env, ports[c]) for c in ports}
        loaded = [*steady.values(), *(churn.values() if args.canary else ())]
        with Load(env.a.address, loaded, 1, args.pace, args.bound) as load:
            for i in range(args.cycles):
                for code in ("new", "old") if i % 2 == 0 else ("old", "new"):
                    app = churn[code]
                    there, back = ("v2", "v1") if args.canary else ("v1", "")
                    done = app.worker.run("deploy", app.spec, getattr(env.images, there))
                    assert done["ok"], f"{app.label}: {done['line']}"
                    deploys[code].append(done["seconds"])
                    if back:
                        gone = app.worker.run("deploy", app.spec, getattr(env.images, back))
                    else:
                        gone = app.worker.run("destroy", app.spec)
                    assert gone["ok"], f"{app.label}: {gone['line']}"
                    destroys[code].append(gone["seconds"])
                print(f"cycle {i + 1}/{args.cycles}: failed so far "
                      f"{ {k: len(v) for k, v in load.failed.items()} }",
                      file=sys.stderr)  # fmt: skip
        reloads = {c: loads(env, ports[c]) - before[c] for c in ports}
    finally:
        for app in [*steady.values(), *(churn.values() if args.canary else ())]:
            app.worker.run("destroy", app.spec)
        new.close()
        old.close()
        cleanup(env, apps)
    figures = {
        "code": {"new": new.code, "old": old.code, "old_commit": args.old},
        "cycles": args.cycles,
        "requests_ok": load.ok,
        "requests_failed": {k: len(v) for k, v in load.failed.items()},
        "failures": {k: [f["answer"] for f in v] for k, v in load.failed.items() if v},
        "servers_started_during_cycles": reloads,
        "first_deploy_s": {c: spread(t) for c, t in deploys.items()},
        "destroy_s": {c: spread(t) for c, t in destroys.items()},
    }
    run.finish(figures, args.json)
    for key in ("requests_ok", "requests_failed", "servers_started_during_cycles",
                "first_deploy_s", "destroy_s"):  # fmt: skip
        print(f"{key}: {figures[key]}")
    for label, answers in figures["failures"].items():
        for answer in answers:
            print(f"  {label}: {answer}")
    return 0 if not figures["requests_failed"]["steady-new"] else 1


if __name__ == "__main__":
    sys.exit(main())

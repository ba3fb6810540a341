"""The local backend's build phase: the app's dependency environment (:mod:`.dependencies`
says what it is made from), built once per set of inputs in the slot's ``envs/<id>/``.

A deploy whose inputs were built before finds the environment by its id and builds
nothing (a file read and a hash: well under a second). A change builds a new environment
beside the one the live release runs with, so the live release never loses it mid-deploy;
environments no release record and no program of the slot names any more are pruned after
a build. An environment is complete only once its marker is written (last): one left
half-made by a failure or a kill is removed and made again.

Python environments: ``python -m venv --without-pip`` with the chosen interpreter, then
shipway's own pip (``pip --python``) installs the requirements, reading the user's pip
configuration (index, certificates, find-links) as ``pip`` always does; when shipway's
interpreter has no pip, the venv gets its own. docs/local.md has the figures that chose pip
over uv.

What must never happen: a build left running. Each command of a build runs in a session of
its own, so all it starts (pip's children, a shell's) is found again: past the build's
deadline (``app.build_timeout``, default 30 minutes), on an interruption or any other
exit, the whole session is stopped (SIGTERM, then SIGKILL), as the release command's is.
While it runs, its session is marked in ``run/builds/`` together with the shipway process
that started it; a deploy killed with SIGKILL leaves the mark, and the next build on the
slot first stops that session — only when its shipway is provably gone and the mark proves
the session is that one (a concurrent ``shipway build``'s is left alone).
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from shipway.backends.liveness import ProcessMark, pid_alive, process_start
from shipway.backends.local import dependencies, logfiles, snapshot
from shipway.backends.local.dependencies import MARKER, Recipe, recipe_of
from shipway.backends.local.dirs import SlotDirs, file_lock, read_json, write_json
from shipway.backends.local.reads import LocalReads
from shipway.backends.local.records import EnvFile, read_programs
from shipway.backends.local.release_command import stop_session
from shipway.backends.local.state import now
from shipway.backends.protocol import BuildInputs, Built, Reporter
from shipway.errors import BackendError, BuildFailed
from shipway.guard import Clearance
from shipway.spec.model import App, Target

TAIL = 20  #: lines of a failed build's output its failure carries


#: runs a build's command (its words follow) once shipway has marked its session — so no
#: build runs unmarked, even when shipway is killed right after starting it
GATE = """import os, sys
fd, words = int(sys.argv[1]), sys.argv[2:]
if os.read(fd, 1) != b"1":
    sys.exit(125)
os.close(fd)
try:
    os.execvp(words[0], words)
except OSError as exc:
    print(f"cannot run {words[0]!r}: {exc.strerror or exc}", flush=True)
    sys.exit(127)
"""
GATE_CANNOT_RUN = 127


@dataclass(frozen=True)
class _Job:
    """One build: where its commands' sessions are marked, and its deadline (monotonic)."""

    marks: Path
    deadline: float


class LocalBuilds(LocalReads):
    """build_inputs, build: the release's dependency environment."""

    def _envs(self, d: SlotDirs) -> Path:
        return d.base / "envs"

    def _source_of(self, target: Target, app: App, ref: str | None) -> tuple[Path, str]:
        """The directory whose dependencies the release runs with, and its digest (only
        computed where a recipe needs the whole source)."""
        if ref is None and not app.build.command:
            return app.source_dir.resolve(), ""
        resolved = self.resolve_image(target, app, ref)
        found = resolved.meta.working_dir if resolved.meta else None
        root = Path(found) if found else app.source_dir
        return root, str(resolved.digest or "")

    def build_inputs(
        self, target: Target, app: App, ref: str | None, image: bool
    ) -> BuildInputs | None:
        d = self.dirs(target)
        root, digest = self._source_of(target, app, ref)
        recipe = recipe_of(app, root)
        if recipe is None:
            return None
        env_id = recipe.id(root, digest)
        path = self._envs(d) / env_id
        inputs = recipe.digest(root, digest)
        return BuildInputs(
            "environment", str(path), inputs, recipe.source, (path / MARKER).is_file(), env_id
        )

    def build(
        self,
        clearance: Clearance,
        target: Target,
        app: App,
        inputs: BuildInputs,
        reporter: Reporter,
    ) -> Built:
        d = self._guarded(clearance, target)
        started = time.monotonic()
        path = Path(inputs.what)
        if path.parent != self._envs(d):
            raise BackendError(f"{path} is not an environment of {target}")
        env_id = path.name
        self._stop_builds_left_running(d, reporter)
        deadline = started + app.build_deadline
        with file_lock(self._envs(d) / f".{env_id}.lock"):
            reused = (path / MARKER).is_file()
            if not reused:
                found = self._planned_source(target, app, env_id)
                if found is None:
                    raise BuildFailed(
                        "the app's dependencies changed since the plan was made: make a new plan"
                    )
                root, recipe = found
                self._make(recipe, root, path, reporter, d.run / "builds", deadline)
        if reused:
            reporter.line(f"  environment {env_id} is built already: reused")
        self._prune(d, keep={env_id}, reporter=reporter)
        return Built(
            "environment",
            str(path),
            inputs.inputs,
            inputs.source,
            env_id,
            reused=reused,
            duration=time.monotonic() - started,
        )

    def _planned_source(self, target: Target, app: App, env_id: str) -> tuple[Path, Recipe] | None:
        """The directory whose dependencies the plan's environment is made of: the app's
        source, or — a promotion — the kept snapshot being deployed (found by the id)."""
        root, digest = self._source_of(target, app, None)
        candidates = [(root, digest)]
        for state, slot in self._local_roots(app):
            for _, kept in snapshot.kept(state / app.name / slot / "releases"):
                candidates.append((kept, snapshot.digest_of_kept(kept) or ""))
        for directory, source_digest in candidates:
            recipe = recipe_of(app, directory)
            if recipe is not None and recipe.id(directory, source_digest) == env_id:
                return directory, recipe
        return None

    # -- making one --------------------------------------------------------------------

    def _make(
        self,
        recipe: Recipe,
        root: Path,
        path: Path,
        reporter: Reporter,
        marks: Path,
        deadline: float,
    ) -> None:
        job = _Job(marks, deadline)
        if path.exists():  # half-made by an earlier failure or kill
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        reporter.line(f"  building environment {path.name} from {recipe.source}")
        try:
            if recipe.kind == "python":
                self._python(recipe, root, path, reporter, job)
            elif recipe.kind == "node":
                path.mkdir()
                for name in recipe.files:
                    shutil.copy2(root / name, path / name)
                self._run(["npm", "ci", "--no-audit", "--no-fund"], path, reporter, "npm ci", job)
            else:
                (path / "bin").mkdir(parents=True)
                env = {**self.environ, **dependencies.variables(path, self.environ.get("PATH", ""))}
                self._run(list(recipe.command), root, reporter, "the build command", job, env)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        write_json(path / MARKER, {"kind": recipe.kind, "source": recipe.source, "at": now()})

    def _python(
        self, recipe: Recipe, root: Path, path: Path, reporter: Reporter, job: _Job
    ) -> None:
        assert recipe.python is not None
        own_pip = importlib.util.find_spec("pip") is not None
        venv = [recipe.python, "-m", "venv", *(["--without-pip"] if own_pip else []), str(path)]
        self._run(venv, root, reporter, "python -m venv", job)
        pip = (
            [sys.executable, "-m", "pip", "--python", str(path / "bin" / "python")]
            if own_pip
            else [str(path / "bin" / "python"), "-m", "pip"]
        )
        what = ["-r", "requirements.txt"] if recipe.files[:1] == ("requirements.txt",) else []
        args = [*pip, "install", "--no-input", "--disable-pip-version-check", *what]
        self._run([*args, *recipe.packages], root, reporter, "pip install", job)

    def _run(
        self,
        words: Sequence[str],
        cwd: Path,
        reporter: Reporter,
        what: str,
        job: _Job,
        env: dict[str, str] | None = None,
    ) -> None:
        """Run one command of a build in a session of its own, its output streamed, until
        it exits or the build's deadline (then its whole session is stopped); BuildFailed
        with its last lines (and the last ``ERROR`` line in the message: pip's own words).
        Whatever way this ends, nothing of the session is left running."""
        tail: collections.deque[str] = collections.deque(maxlen=TAIL)
        errors: list[str] = []
        gate, go = os.pipe()  # the command runs only once its session is marked
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", GATE, str(gate), *words],
                cwd=cwd,
                env=env or self.environ,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(gate,),
                start_new_session=True,  # its own session: all it starts is found again
            )
        except OSError as exc:
            os.close(go)
            raise BuildFailed(f"{what}: cannot run {words[0]!r}: {exc.strerror or exc}") from exc
        finally:
            os.close(gate)
        started = process_start(proc.pid)
        mark = job.marks / f"{os.getpid()}-{proc.pid}.json"
        assert proc.stdout is not None
        try:
            here = ProcessMark.mine()
            job.marks.mkdir(parents=True, exist_ok=True)
            write_json(
                mark, {"what": what, "pid": proc.pid, "start": started, "owner": asdict(here)}
            )
            os.write(go, b"1")
            os.close(go)
            go = -1
            for raw in logfiles.lines(logfiles.output(proc, job.deadline)):
                self._output(raw, tail, errors, reporter)
            if proc.poll() is None:
                stop_session(proc.pid, started)
                raise BuildFailed(
                    f"{what} did not finish within the build's timeout (app.build_timeout, "
                    "default 30m): it was stopped, with all it started (hint: raise "
                    "build_timeout in [app] if the build needs longer)",
                    tuple(tail),
                )
        except BaseException:  # interrupted (a signal), the deadline: stop it all
            stopped = stop_session(proc.pid, started)
            if stopped:
                reporter.line(f"  build stopped ({len(stopped)} processes)")
            raise
        finally:
            if go >= 0:
                os.close(go)  # never marked: the gate ends it before it runs anything
            # what it left in the background in its session ends with it too
            stop_session(proc.pid, started, grace=0.5)
            proc.wait()
            proc.stdout.close()
            with contextlib.suppress(FileNotFoundError):
                mark.unlink()
        code = proc.returncode
        if code == GATE_CANNOT_RUN and tail and tail[-1].startswith("cannot run "):
            raise BuildFailed(f"{what}: {tail[-1]}")
        if code != 0:
            said = f": {errors[-1]}" if errors else ""
            raise BuildFailed(f"{what} failed (exit code {code}){said}", tuple(tail))

    @staticmethod
    def _output(
        raw: bytes, tail: collections.deque[str], errors: list[str], reporter: Reporter
    ) -> None:
        """One line of a build's output: shown, kept in the tail, pip's errors noted."""
        line = raw.decode(errors="replace").rstrip()
        if not line:
            return
        tail.append(line)
        if line.startswith(("ERROR:", "npm ERR!", "npm error")):
            errors.append(line)
        reporter.line(f"  build | {line}")

    def _stop_builds_left_running(self, d: SlotDirs, reporter: Reporter) -> None:
        """Stop the builds a killed shipway left running on this slot: only those whose
        shipway is provably gone (never a concurrent build's), and only processes the mark
        proves to be that build's session (this kernel and pid namespace; its leader gone,
        or still the process the mark names)."""
        marks = d.run / "builds"
        with contextlib.suppress(FileNotFoundError):
            for file in sorted(marks.iterdir()):
                left = read_json(file)
                try:
                    owner = ProcessMark(
                        **{k: left["owner"][k] for k in ("host", "pid", "boot", "pid_ns", "start")}
                    )
                    leader = ProcessMark(
                        owner.host, int(left["pid"]), owner.boot, owner.pid_ns, str(left["start"])
                    )
                except (KeyError, TypeError, ValueError):
                    continue  # not a mark this shipway wrote: left alone
                if owner.gone() is None:
                    continue  # its shipway runs (or this machine cannot tell): its own
                here = ProcessMark.mine()
                if (
                    leader.start
                    and (leader.boot, leader.pid_ns) == (here.boot, here.pid_ns)
                    and (leader.runs_here() or not pid_alive(leader.pid))
                ):
                    stopped = stop_session(leader.pid, leader.start)
                    if stopped:
                        reporter.line(
                            f"  stopped a build ({left.get('what', '?')}, pid {leader.pid}, "
                            f"{len(stopped)} processes) left running by an earlier shipway "
                            "that was killed before it could stop it"
                        )
                with contextlib.suppress(FileNotFoundError):
                    file.unlink()

    # -- pruning -----------------------------------------------------------------------

    def _prune(self, d: SlotDirs, keep: set[str], reporter: Reporter) -> None:
        """Delete the environments nothing names: no release record of the slot (its
        history) and no program recorded there (running or asleep)."""
        envs = self._envs(d)
        named = set(keep)
        for record in self._records(d):
            if record.build is not None and record.build.kind == "environment":
                named.add(Path(record.build.what).name)
        for rec in read_programs(d).values():  # an asleep generation's record may be gone
            for file in rec.env_files():
                with contextlib.suppress(BackendError):
                    env = EnvFile.read(file)
                    if env is not None and env.env.get("SHIPWAY_ENV"):
                        named.add(Path(env.env["SHIPWAY_ENV"]).name)
        dropped = []
        with contextlib.suppress(FileNotFoundError):
            for entry in sorted(envs.iterdir()):
                # one without its marker is being built (by a concurrent `shipway build`)
                done = (entry / MARKER).is_file()
                if done and entry.name not in named and not entry.name.startswith("."):
                    shutil.rmtree(entry, ignore_errors=True)
                    dropped.append(entry.name)
        if dropped:
            reporter.line(f"  pruned environments no release names: {', '.join(dropped)}")
        with contextlib.suppress(OSError):
            os.chmod(envs, 0o755)

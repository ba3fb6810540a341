"""Who runs an operation: the OS user and host, the source's git commit and author, and
a CI identity — read once, when a mutating operation starts (a plan or a dry run reads
none of it: they start no subprocess).

The CI variables read (only these; never a token):

=================  =========================================================================
system             variables
=================  =========================================================================
github-actions     ``GITHUB_ACTIONS`` set; ``GITHUB_ACTOR``, ``GITHUB_REPOSITORY``,
                   ``GITHUB_WORKFLOW``, run URL from ``GITHUB_SERVER_URL`` +
                   ``GITHUB_REPOSITORY`` + ``GITHUB_RUN_ID``
gitlab             ``GITLAB_CI`` set; ``GITLAB_USER_LOGIN``, ``CI_PROJECT_PATH``,
                   ``CI_PIPELINE_URL``
buildkite          ``BUILDKITE`` set; ``BUILDKITE_BUILD_CREATOR``, ``BUILDKITE_PIPELINE_SLUG``,
                   ``BUILDKITE_BUILD_URL``
circleci           ``CIRCLECI`` set; ``CIRCLE_USERNAME``, ``CIRCLE_PROJECT_REPONAME``,
                   ``CIRCLE_BUILD_URL``
jenkins            ``JENKINS_URL`` set; ``BUILD_USER_ID``, ``JOB_NAME``, ``BUILD_URL``
any other          ``SHIPWAY_CI_ACTOR`` (and optionally ``SHIPWAY_CI_URL``): system ``custom``
=================  =========================================================================
"""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path

from shipway.release.audit import Audit

#: system → (the variable that says it runs, actor, project, run URL)
CI_SYSTEMS: tuple[tuple[str, str, str, str, str], ...] = (
    ("github-actions", "GITHUB_ACTIONS", "GITHUB_ACTOR", "GITHUB_REPOSITORY", ""),
    ("gitlab", "GITLAB_CI", "GITLAB_USER_LOGIN", "CI_PROJECT_PATH", "CI_PIPELINE_URL"),
    (
        "buildkite",
        "BUILDKITE",
        "BUILDKITE_BUILD_CREATOR",
        "BUILDKITE_PIPELINE_SLUG",
        "BUILDKITE_BUILD_URL",
    ),
    ("circleci", "CIRCLECI", "CIRCLE_USERNAME", "CIRCLE_PROJECT_REPONAME", "CIRCLE_BUILD_URL"),
    ("jenkins", "JENKINS_URL", "BUILD_USER_ID", "JOB_NAME", "BUILD_URL"),
    ("custom", "SHIPWAY_CI_ACTOR", "SHIPWAY_CI_ACTOR", "", "SHIPWAY_CI_URL"),
)

#: how long a git read may take before the commit is left out
GIT_TIMEOUT = 5.0


def ci_identity(environ: Mapping[str, str]) -> dict[str, str]:
    """The CI system this runs in and who started it there (empty: not in a known CI)."""
    for system, flag, actor, project, url in CI_SYSTEMS:
        if not environ.get(flag):
            continue
        out = {"system": system}
        for key, var in (("actor", actor), ("project", project), ("url", url)):
            if var and environ.get(var):
                out[key] = environ[var]
        if system == "github-actions" and environ.get("GITHUB_RUN_ID"):
            server = environ.get("GITHUB_SERVER_URL", "https://github.com")
            repo = environ.get("GITHUB_REPOSITORY", "")
            out["url"] = f"{server}/{repo}/actions/runs/{environ['GITHUB_RUN_ID']}"
        if system == "github-actions" and environ.get("GITHUB_WORKFLOW"):
            out["workflow"] = environ["GITHUB_WORKFLOW"]
        return out
    return {}


def git_head(source: Path | None) -> tuple[str | None, str | None]:
    """The commit checked out in ``source`` and its author (``Name <email>``); (None, None)
    when it is no git checkout, git is missing, or it does not answer in time. A checkout
    with uncommitted changes is said: the commit gets a ``+dirty`` suffix."""
    if source is None or not source.is_dir():
        return None, None
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0"}

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(source), *args],
                capture_output=True,
                text=True,
                timeout=GIT_TIMEOUT,
                env=env,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    head = git("log", "-1", "--format=%H%n%an <%ae>")
    if not head or "\n" not in head:
        return None, None
    commit, author = head.strip().split("\n", 1)
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return commit + ("+dirty" if dirty else ""), author.strip() or None


def os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def who_acts(
    source: Path | None, environ: Mapping[str, str] | None = None, operation: str = ""
) -> Audit:
    """Who runs an operation from ``source`` now (the clearance and summary come later)."""
    commit, author = git_head(source)
    return Audit(
        user=os_user(),
        host=socket.gethostname(),
        commit=commit,
        author=author,
        ci=ci_identity(os.environ if environ is None else environ),
        operation=operation,
    )

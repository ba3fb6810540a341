"""pip against uv for a local release's dependency environment (examples/notes:
Flask + gunicorn), cold (empty package cache) and warm (cache filled by the cold run).

pip: ``python -m venv --without-pip ENV`` then ``python -m pip --python ENV/bin/python
install -r requirements.txt`` (what shipway does). uv: ``uv venv ENV`` then ``uv pip install
--python ENV/bin/python -r requirements.txt``; uv is installed into a scratch virtualenv for
the measurement (it is not a dependency of shipway). Both install from the package index
the machine is configured for (pip's configuration; for uv the same index URL and CA file
are passed, as uv reads neither pip.conf nor PIP_* variables).

Run:  .venv/bin/python bench/local_installers.py [--runs 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO / "examples" / "notes" / "requirements.txt"


def timed(words: list[str], env: dict[str, str]) -> float:
    t0 = time.monotonic()
    subprocess.run(words, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="shipway-installers-"))
    env = {k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"}
    try:
        subprocess.run([sys.executable, "-m", "venv", str(work / "uv-tool")], check=True)
        subprocess.run([str(work / "uv-tool/bin/python"), "-m", "pip", "install", "-q", "uv"],
                       check=True, env=env)  # fmt: skip
        uv = str(work / "uv-tool/bin/uv")
        version = subprocess.run([uv, "--version"], capture_output=True, text=True).stdout
        uv_env = {**env, "UV_CACHE_DIR": str(work / "uv-cache")}
        if env.get("PIP_CERT"):
            uv_env["SSL_CERT_FILE"] = env["PIP_CERT"]
        if env.get("PIP_INDEX_URL"):
            uv_env["UV_INDEX_URL"] = env["PIP_INDEX_URL"]
        pip_env = {**env, "PIP_CACHE_DIR": str(work / "pip-cache")}
        kinds = ("pip_cold", "pip_warm", "uv_cold", "uv_warm")
        figures: dict[str, list[float]] = {k: [] for k in kinds}
        for i in range(args.runs):
            for tool, cache in (("pip", work / "pip-cache"), ("uv", work / "uv-cache")):
                shutil.rmtree(cache, ignore_errors=True)
                for state in ("cold", "warm"):
                    target = work / f"{tool}-{state}-{i}"
                    if tool == "pip":
                        seconds = timed([sys.executable, "-m", "venv", "--without-pip",
                                         str(target)], pip_env)  # fmt: skip
                        seconds += timed([sys.executable, "-m", "pip", "--python",
                                          str(target / "bin/python"), "install", "-q",
                                          "--disable-pip-version-check", "-r",
                                          str(REQUIREMENTS)], pip_env)  # fmt: skip
                    else:
                        seconds = timed([uv, "venv", "-q", str(target)], uv_env)
                        seconds += timed([uv, "pip", "install", "-q", "--python",
                                          str(target / "bin/python"), "-r",
                                          str(REQUIREMENTS)], uv_env)  # fmt: skip
                    figures[f"{tool}_{state}"].append(seconds)
                    print(f"{tool} {state} run {i + 1}: {seconds:.2f}s", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "uv": version.strip(),
        "python": sys.version.split()[0],
        **{f"{k}_median_s": round(statistics.median(v), 2) for k, v in figures.items()},
        "runs": args.runs,
        "load_average": round(os.getloadavg()[0], 2),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

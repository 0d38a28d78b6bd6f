"""Wall time of the main job end to end: cold (empty encoder cache), warm, and a re-run.

Usage: python benchmarks/main_job_time.py [--keep DIR]
Runs `python -m mushroom main-job` of this checkout three times and prints the wall time of
each and the time per stage as the run's summary.json records it:
  1. cold: a new run folder and an empty MUSHROOM_CACHE_DIR (nothing encoded before);
  2. warm: a new run folder, the encoder cache of run 1 (what a second user run costs);
  3. re-run: run 2's folder again (everything reusable is reused).
The machine is shared with other work when this runs on a busy host: the printed CPU
load average says how busy it was.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(out: Path, cache: Path) -> tuple[float, dict]:
    env = {**os.environ, "MUSHROOM_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "mushroom", "main-job", "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
        sys.exit(proc.returncode)
    leaks = [line for line in proc.stderr.splitlines() if "it/s]" in line or "Loading weights" in line]
    if leaks:
        print(f"  third-party progress lines in the output: {leaks[:2]}")
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return wall, summary


def stages(summary: dict) -> str:
    parts = []
    for name, secs in summary.get("member_seconds", {}).items():
        parts.append(f"{name} {secs:.1f} s")
    for name, stage in summary.get("stages", {}).items():
        if isinstance(stage, dict):
            secs = stage.get("seconds", 0.0)
            parts.append(f"{name} {secs:.1f} s" + (" (reused)" if stage.get("reused") else ""))
    if "seconds" in summary:
        parts.append(f"total recorded {summary['seconds']:.1f} s")
    return ", ".join(parts) or "no per-stage times in summary.json"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep", default=None, help="keep the run folders and cache under this folder")
    args = parser.parse_args()
    # Without --keep the run folders and cache (~230 MB) are removed when the script exits.
    scratch = None if args.keep else tempfile.TemporaryDirectory(prefix="main-job-time-")
    base = Path(args.keep or scratch.name)
    cache = base / "cache"
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for label, out in (
        ("cold", base / "run1"),
        ("warm cache, new folder", base / "run2"),
        ("re-run", base / "run2"),
    ):
        wall, summary = run(out, cache)
        n_files = len(list(out.glob("mushroom.*-tst.v1.jsonl")))
        print(f"{label}: {wall:.1f} s wall, {n_files} submission files; {stages(summary)}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

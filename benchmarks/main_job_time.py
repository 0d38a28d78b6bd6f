"""Wall time of the main job (./run.sh) end to end, into a temporary folder.

Usage: python benchmarks/main_job_time.py
"""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = subprocess.run(
            [str(ROOT / "run.sh"), "--out", f"{tmp}/run", "--quiet"], capture_output=True, text=True
        )
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            sys.exit(proc.returncode)
        n_files = len(list(Path(tmp, "run").glob("mushroom.*-tst.v1.jsonl")))
    print(f"main job: {wall:.1f} s wall (14 test languages + scored val), {n_files} submission files")


if __name__ == "__main__":
    main()

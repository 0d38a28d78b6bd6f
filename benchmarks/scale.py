"""How a run's cost grows with the number of items: wall time, memory and disk per N.

    python benchmarks/scale.py                       # 1k, 10k, 100k items, lexical detector
    python benchmarks/scale.py --sizes 1000,50000 --detector lexical --lang en
    python benchmarks/scale.py --stack --sizes 1000,10000   # a fitted stack applied
    python benchmarks/scale.py --sizes 2000,10000 --after score,check,report

For each N, builds N items by cycling over the val split's items (ids made unique with a
`#k` suffix, each with its own copy of the item's contexts, one file per context source),
runs `python -m mushroom detect --items ITEMS --contexts FILES` in a fresh process and prints
the wall time, ms per item, the process's peak RSS and the run folder's size; then the slope
of each against N (least squares), which says what another 100k items cost. A slope of peak
RSS near zero is a run whose memory does not grow with the corpus.

With `--stack`, a stack is first fitted on val (`stack fit`) over two members, runs of
`--detector` at thresholds 0.2 and 0.4; for each N both members run on the items (their time
is printed as `members s`), and the measured process is `stack apply --items` over their
folders: what applying a fitted stack to a corpus costs on top of its members.

With `--after score,check,report`, each N's detect run is then scored against the items'
gold (`score ITEMS RUN/predictions`), its predictions checked (`check PRED --items ITEMS`,
the language files joined) and shown (`report RUN --items ITEMS --contexts FILES`), each in a
fresh process; their peak RSS is printed per N, with its slope: these commands read their
files whole.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _args import choice_list, positive_list, val_langs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mushroom.data.contexts import DEFAULT_SOURCES, load_contexts, source_names  # noqa: E402
from mushroom.data.splits import load_split  # noqa: E402


def build(n: int, langs: list[str] | None, where: Path) -> tuple[Path, list[Path]]:
    """N val items (unique ids) and their contexts, one JSONL file per context source."""
    data = load_split("val", langs)
    pool = [it for its in data.values() for it in its]
    ctx = {lang: load_contexts("val", lang, DEFAULT_SOURCES).by_id for lang in data}
    names = source_names(DEFAULT_SOURCES)
    items_path = where / "items.jsonl"
    ctx_paths = [where / f"{name}.jsonl" for name in names]
    handles = [p.open("w", encoding="utf-8") for p in ctx_paths]
    with items_path.open("w", encoding="utf-8") as items_out:
        for k in range(n):
            item = pool[k % len(pool)]
            new_id = f"{item.id}#{k}"
            row = item.model_dump(mode="json", exclude_none=True)
            row["id"] = new_id
            items_out.write(json.dumps(row, ensure_ascii=False) + "\n")
            for name, handle in zip(names, handles):
                for c in ctx[item.lang].get(item.id, []):
                    if c.source == name:
                        handle.write(json.dumps({"id": new_id, "context": c.text}, ensure_ascii=False) + "\n")
    for handle in handles:
        handle.close()
    return items_path, ctx_paths


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


MEMBERS = {"lo": "threshold=0.2", "hi": "threshold=0.4"}  # the --stack members: one detector, two cut-offs


def detect_cmd(items: Path, contexts: list[Path], detector: str, out: Path, *options: str) -> list[str]:
    """The `detect --items` command line of one run."""
    cmd = [sys.executable, "-m", "mushroom", "detect", "--items", str(items), "--contexts"]
    cmd += [",".join(map(str, contexts)), "--detector", detector, "--out", str(out), "--quiet"]
    return cmd + [arg for option in options for arg in ("-o", option)]


def fit_stack(detector: str, langs: list[str] | None, where: Path) -> Path:
    """A stack fitted on val over the two MEMBERS runs of `detector`; returns its stack.json."""
    lang_args = [arg for lang in langs or [] for arg in ("--lang", lang)]
    for name, option in MEMBERS.items():
        cmd = [sys.executable, "-m", "mushroom", "detect", "--split", "val", "--detector", detector]
        cmd += ["-o", option, "--out", str(where / f"val-{name}"), "--quiet", *lang_args]
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    model = where / "stack.json"
    cmd = [sys.executable, "-m", "mushroom", "stack", "fit"]
    cmd += [f"{name}={where / f'val-{name}'}" for name in MEMBERS] + ["--out", str(model), *lang_args]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return model


def stack_cmd(model: Path, members: dict[str, Path], items: Path, out: Path) -> list[str]:
    """The `stack apply --items` command line over member runs of the items."""
    cmd = [sys.executable, "-m", "mushroom", "stack", "apply", str(model)]
    return (
        cmd
        + [f"{name}={path}" for name, path in members.items()]
        + ["--items", str(items), "--out", str(out)]
    )


AFTER = ("score", "check", "report")


def after_cmd(what: str, items: Path, contexts: list[Path], run: Path) -> list[str]:
    """The command line of one `--after` command over a detect run of the items."""
    cmd = [sys.executable, "-m", "mushroom", what]
    if what == "score":
        return cmd + [str(items), str(run / "predictions")]
    if what == "check":
        joined = run.parent / "predictions.jsonl"
        with joined.open("w", encoding="utf-8") as out:
            for path in sorted((run / "predictions").glob("*.jsonl")):
                out.write(path.read_text(encoding="utf-8"))
        return cmd + [str(joined), "--items", str(items)]
    page = run.parent / "report.html"
    return cmd + [
        str(run),
        "--items",
        str(items),
        "--contexts",
        ",".join(map(str, contexts)),
        "--out",
        str(page),
    ]


def run_one(cmd: list[str]) -> tuple[float, int, int]:
    """(wall seconds, peak RSS in bytes, exit status) of one command in a fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        sys.stderr.write(proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else "")
    return wall, usage.ru_maxrss * 1024, proc.returncode  # ru_maxrss is in KiB on Linux


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys against xs (0 with fewer than two points)."""
    if len(xs) < 2:
        return 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", type=positive_list, default="1000,10000,100000", help="item counts, comma-separated"
    )
    parser.add_argument("--detector", default="lexical")
    parser.add_argument(
        "--lang",
        type=val_langs,
        default=None,
        help="val languages to draw from, comma-separated (default all)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="where to build items and runs (kept)")
    parser.add_argument(
        "--stack", action="store_true", help="measure `stack apply --items` of a stack fitted on val"
    )
    parser.add_argument(
        "--after",
        type=choice_list(*AFTER),
        default=[],
        help="also measure these commands on each detect run: score, check, report (comma-separated)",
    )
    args = parser.parse_args()
    if args.stack and args.after:
        parser.error("--after measures commands on a detect run: leave out --stack")
    sizes = args.sizes
    langs = args.lang
    work = args.workdir or Path(tempfile.mkdtemp(prefix="mushroom-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    what = (
        f"stack apply --items (members: {args.detector} {', '.join(MEMBERS.values())})"
        if args.stack
        else "detect"
    )
    print(
        f"{what}, detector {args.detector}, val items of {','.join(langs) if langs else 'every val language'}, work in {work}"
    )
    model = fit_stack(args.detector, langs, work) if args.stack else None
    extra = f" {'members s':>10}" if args.stack else ""
    extra += "".join(f" {what + ' MiB':>11}" for what in args.after)
    print(f"{'items':>8} {'wall s':>8} {'ms/item':>8} {'peak RSS MiB':>13} {'folder MiB':>11}{extra}")
    try:
        for n in sizes:
            where = work / f"n{n}"
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir()
            items, contexts = build(n, langs, where)
            members_s = 0.0
            if model is not None:
                members = {name: where / name for name in MEMBERS}
                for name, option in MEMBERS.items():
                    wall, _, code = run_one(detect_cmd(items, contexts, args.detector, members[name], option))
                    members_s += wall
                    if code:
                        print(f"{n:>8} member {name} failed with exit status {code}")
                        return 1
                cmd = stack_cmd(model, members, items, where / "run")
            else:
                cmd = detect_cmd(items, contexts, args.detector, where / "run")
            wall, rss, code = run_one(cmd)
            if code:
                print(f"{n:>8} failed with exit status {code}")
                return 1
            size = folder_bytes(where / "run")
            after = []
            for what in args.after:
                _, after_rss, code = run_one(after_cmd(what, items, contexts, where / "run"))
                if code:
                    print(f"{n:>8} {what} failed with exit status {code}")
                    return 1
                after.append(after_rss)
            rows.append((n, wall, rss, size, *after))
            tail = f" {members_s:>10.1f}" if model is not None else ""
            tail += "".join(f" {r / 2**20:>11.0f}" for r in after)
            print(
                f"{n:>8} {wall:>8.1f} {1000 * wall / n:>8.2f} {rss / 2**20:>13.0f} {size / 2**20:>11.1f}{tail}"
            )
            if args.workdir is None:
                shutil.rmtree(where)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    ns = [float(r[0]) for r in rows]
    if len(set(ns)) < 2:  # a slope of one size was printed as 0: "costs nothing per item"
        print("slope against N: needs two different --sizes")
        return 0
    print("slope against N (least squares), per 1,000 items:")
    print(f"  ms/item {1000 * slope(ns, [1000 * r[1] / r[0] for r in rows]):.4f} ms")
    print(f"  wall {1000 * slope(ns, [r[1] for r in rows]):.2f} s")
    print(f"  peak RSS {1000 * slope(ns, [r[2] for r in rows]) / 2**20:.2f} MiB")
    print(f"  folder {1000 * slope(ns, [r[3] for r in rows]) / 2**20:.2f} MiB")
    for k, what in enumerate(args.after):
        print(f"  {what} peak RSS {1000 * slope(ns, [r[4 + k] for r in rows]) / 2**20:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

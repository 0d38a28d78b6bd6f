"""The LLM stages with a real small model: what the pipeline does with real output.

    python benchmarks/smollm2_stages.py [--limit 10] [--base-url URL --model NAME] [--work DIR]

Runs SmolLM2-135M-Instruct (the `smollm2` registry model, transformers on the CPU; or any
OpenAI-compatible server with --base-url) on the first N English val items: the `llm`
detector with each shipped prompt variant (zero-shot, few-shot, few-shot with a reason per
span) and the `chain` detector (decompose + verify). Prints per variant and stage the share
of responses parsed / repaired / unparseable, spans located exactly / case-folded /
normalised / fuzzily / lost, requests and completion tokens per item, seconds per item,
and IoU / Cor. A 135M model scores low: these numbers measure the pipeline, not the method.
Re-running with the same --work folder reuses every finished item (seconds then show 0);
without --work the run folders (and runs.log) go to a scratch folder removed at exit.
"""

import argparse
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

from _args import positive
from rich.console import Console

from mushroom.backends.rawlog import RawRecord
from mushroom.cli.tables import RichReporter
from mushroom.data.predictions import load_predictions
from mushroom.data.splits import load_split
from mushroom.detectors import build
from mushroom.evaluation.score import score_predictions
from mushroom.runs.service import RunService

VARIANTS = [
    ("llm", "zero-shot", {"prompt": "single_zero_shot"}),
    ("llm", "few-shot", {"prompt": "single_few_shot_plain"}),
    ("llm", "few-shot-reason", {"prompt": "single_few_shot"}),
    ("chain", "chain", {}),
]


def share(n: int, d: int) -> str:
    return f"{n / d:.2f}" if d else "-"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=positive, default=10)
    ap.add_argument("--base-url", default=None)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--max-tokens", type=positive, default=128)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--only", default=None, help="comma-separated variant names")
    args = ap.parse_args()
    # Without --work the run folders are removed when the script exits (it left one per call).
    scratch = None if args.work else tempfile.TemporaryDirectory(prefix="smollm2-stages-")
    work = args.work or Path(scratch.name)
    work.mkdir(parents=True, exist_ok=True)
    backend = (
        {"kind": "openai", "model": args.model, "base_url": args.base_url}
        if args.base_url
        else {"kind": "transformers", "model": args.model, "device": "cpu"}
    )
    items = load_split("val", ["en"])["en"][: args.limit]
    quiet = RichReporter(Console(file=open(work / "runs.log", "w"), width=120))  # noqa: SIM115 - open for the whole run
    header = (
        f"{'variant':16s} {'stage':10s} {'req/it':>6s} {'parsed':>6s} {'repair':>6s} {'unpars':>6s} "
        f"{'exact':>5s} {'fold':>5s} {'norm':>5s} {'fuzzy':>5s} {'lost':>5s} {'tok/it':>6s} {'s/it':>6s} "
        f"{'IoU':>6s} {'Cor':>6s}"
    )
    print(f"{backend['kind']} {args.model}, {len(items)} English val items, work folder {work}")
    print(header)
    wanted = set(args.only.split(",")) if args.only else None
    for detector, name, options in VARIANTS:
        if wanted is not None and name not in wanted:
            continue
        opts = {"backend": backend, "max_tokens": args.max_tokens, "max_context_chars": 3000, **options}
        det = build(detector, opts)
        folder = work / name
        service = RunService(
            folder, {"benchmark": name, **det.describe()}, quiet, quiet=True, allow_failures=True
        )
        t0 = time.perf_counter()
        out = service.detect_split(det, "val", folder / "val", ["en"], data={"en": items})
        seconds = time.perf_counter() - t0
        stats = out.stats["all"]
        path = out.files.get("en")
        preds = load_predictions(path) if path is not None else {}
        score = score_predictions(items, [preds[it.id] for it in items]) if preds else None
        raw_path = folder / "val" / "raw" / "en.raw.jsonl"
        raw = (
            [RawRecord.model_validate_json(line) for line in raw_path.read_text().splitlines()]
            if raw_path.exists()
            else []
        )
        tokens = Counter()
        for r in raw:
            tokens[r.stage] += r.usage.get("completion_tokens", 0)
        stages = sorted(
            {k.rsplit(".", 1)[0] for k in stats if "." in k and not k.startswith(("items", "chain."))}
        )
        for stage in stages:
            g = lambda c, st=stage, s=stats: s.get(f"{st}.{c}", 0)  # noqa: E731
            req = g("requests")
            ok = g("parsed") + g("ok")
            claims = g("claims") or (stats.get("chain.spans", 0) if stage == "verify" else 0)
            located = [g(f"located_{m}") for m in ("exact", "casefold", "normalized", "fuzzy")]
            lost = (
                g("lost")
                if stage == "llm"
                else (stats.get("chain.spans_not_located", 0) if stage == "verify" else 0)
            )
            tok = tokens.get(stage, 0)
            print(
                f"{name:16s} {stage:10s} {req / len(items):6.2f} {share(ok, req):>6s} {share(g('repaired'), req):>6s} "
                f"{share(g('unparseable') + g('invalid_json') + g('wrong_shape'), req):>6s} "
                + " ".join(f"{share(x, claims):>5s}" for x in located)
                + f" {share(lost, claims):>5s} {tok / len(items):6.1f} {seconds / len(items):6.2f} "
                f"{(score.mean_iou if score else float('nan')):6.3f} {(score.mean_cor if score else float('nan')):6.3f}"
            )
        failed = stats.get("items.failed", 0)
        if failed:
            print(f"{'':16s} {failed} items failed: {json.dumps(service.failures[0].error)[:100]}")


if __name__ == "__main__":
    main()

"""The LLM detectors measured: one command for the table, and a recorded run anyone can replay.

    python benchmarks/llm_quality.py --base-url URL --model NAME [--langs en:50,es:20,de:20]
    python benchmarks/llm_quality.py --model smollm2          # a pulled GGUF on a local llama.cpp server
    python benchmarks/llm_quality.py --replay                 # the recorded run: no model, no server

Runs through the run service, on the first val items of each language (`--langs en:50,es:20`): the `llm`
detector (few-shot prompt with a reason per span, temperatures 0.05/0.1/0.2, vote per
character) and the `chain` (decompose, verify, locate), beside the lexical detector, the CPU
stack (lexical + semantic) and the stack with the llm as a third member, both fitted out of
fold on these items. Prints per system and language IoU / Cor with 95% bootstrap intervals,
the parser's counters, failed items, tokens and seconds per item; then the paired difference
that the llm member makes to the stack; then one line:

    llm IoU X Cor Y; stack IoU X Cor Y; stack+llm IoU X Cor Y

A live run keeps its raw records (every request and reply, in the one raw-record schema) in
`--record` (default `benchmarks/records/llm_quality/`, gzipped) with a manifest naming the
model, settings and timings; `--replay` answers every request from them through the replay
backend, so the same table comes back on any machine. `--prefix-check N` also times N English
items with the shared prompt prefix reused by the server and with it defeated (a per-request
nonce put first), which is what ordering prompts prefix-first buys on llama.cpp or vLLM.

Every figure is the named model's: SmolLM2-135M (the model of record here, the largest
instruct model that installs on these machines) proves the pipeline, not the method.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from _args import positive, whole
from rich.console import Console

from mushroom.backends.base import Backend, Generation, GenerationRequest, Message, OnResult
from mushroom.backends.rawlog import RawRecord
from mushroom.cli.tables import RichReporter
from mushroom.combine.stack import Member, fit_stack
from mushroom.data.predictions import load_predictions
from mushroom.data.splits import load_split
from mushroom.detectors import build
from mushroom.errors import retry_advice
from mushroom.evaluation.score import score_predictions
from mushroom.evaluation.stats import bootstrap_ci, paired_test
from mushroom.models.serve import LlamaServer
from mushroom.runs.reporter import PlainReporter
from mushroom.runs.service import RunService

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "benchmarks" / "records" / "llm_quality"
TEMPERATURES = [0.05, 0.1, 0.2]
LLM_SYSTEMS = ("llm", "chain", "pyes")
PYES_MODEL = "gemma3-270m"  # a base model: it can score "Yes"/"No", not write a chat answer


def llm_options(backend: dict[str, Any], max_tokens: int) -> dict[str, dict[str, Any]]:
    """The model-backed systems' settings: the design's single prompt, its chain, and P(Yes).

    pyes asks per clause, not per sentence (its default): most val answers are one sentence,
    and one piece per answer paints one probability over it, which has no per-character
    ranking (Cor 0 by construction).
    """
    common = {"backend": backend, "max_tokens": max_tokens, "max_context_chars": 3000}
    return {
        "llm": {**common, "prompt": "single_few_shot", "temperatures": TEMPERATURES},
        "chain": dict(common),
        "pyes": {"models": [backend], "unit": "clause", "max_context_chars": 3000},
    }


def run_system(name: str, options: dict[str, Any] | None, data: dict, work: Path, live: bool) -> dict:
    """One system through the run service (resumes per item); its counters and timing.

    Seconds and items are added up over sittings in the work folder's timings.json, so a
    run that spans several sittings still reports seconds per item of the items it ran.
    """
    det = build(name, options)
    folder = work / name
    log = (work / "runs.log").open("a", encoding="utf-8")
    reporter = RichReporter(Console(stderr=True)) if live else PlainReporter(log)
    config = {"benchmark": "llm_quality", **det.describe()}
    service = RunService(folder, config, reporter, quiet=not live, allow_failures=True)
    t0 = time.perf_counter()
    out = service.detect_split(det, "val", folder / "val", list(data), data=data)
    seconds = time.perf_counter() - t0
    log.close()
    timings_path = work / "timings.json"
    timings = json.loads(timings_path.read_text()) if timings_path.exists() else {}
    if live and out.done_now:
        t = timings.setdefault(name, {"seconds": 0.0, "items": 0})
        t["seconds"] += seconds
        t["items"] += out.done_now
        timings_path.write_text(json.dumps(timings, indent=1))
    return {
        "stats": dict(out.stats.get("all", {})),
        "by_lang": {k: dict(v) for k, v in out.stats.items()},
        "files": out.files,
        "timing": timings.get(name),
        "first_error": out.failures[0].error if out.failures else None,
    }


def raw_records(paths: list[Path]) -> list[RawRecord]:
    """The distinct model calls in raw-record files (the last line of each request wins).

    A sitting stopped mid-item leaves that item's earlier lines and the resumed sitting adds
    its own, so lines are taken once per (stage, key, temperature). A replay's own records
    carry only each text's share of the usage, so token counts come from the recorded lines.
    """
    calls: dict[tuple, RawRecord] = {}
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = RawRecord.model_validate_json(line)
                calls[(r.stage, r.key, r.temperature)] = r
    return list(calls.values())


def per_item_scores(data: dict, files: dict[str, Path]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """lang -> (IoU per item, Cor per item), from the written prediction files."""
    out = {}
    for lang, items in data.items():
        preds = load_predictions(files[lang])
        res = score_predictions(items, [preds[it.id] for it in items])
        out[lang] = (np.asarray(res.iou), np.asarray(res.cor))
    return out


GATES: dict[str, dict] = {}  # stack name -> what the stack chose about its model-backed member


def stack_scores(
    members: list[str], data: dict, work: Path, gate: list[str] | None = None
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The stack over `members`, fitted and scored out of fold (5 folds by item) on these items.

    A model-backed member may be left out by the stack itself, nested in the folds (as the
    main job's stack does); what it chose is kept in GATES for the printout.
    """
    fit = fit_stack([Member(m, work / m, allow_failures=True) for m in members], data, "val", gate=gate)
    for name, decision in fit.model.gate.items():
        GATES[f"stack+{name}"] = decision
    out = {}
    for lang, items in data.items():
        res = score_predictions(items, fit.oof[lang])
        out[lang] = (np.asarray(res.iou), np.asarray(res.cor))
    return out


def tokens(usage: dict[str, float], key: str) -> str:
    """Tokens per item, or '-' where the backend reported none (transformers counts no usage)."""
    return f"{usage[key]:.0f}" if key in usage else "-"


def ci(values: np.ndarray) -> str:
    low, high = bootstrap_ci(values)
    return f"{values.mean():.3f} [{low:.3f}, {high:.3f}]"


def lang_counts(spec: str, default: int, flag: str = "--langs") -> dict[str, int]:
    """`en:50,es:20,de` -> {"en": 50, "es": 20, "de": default}: items per val language.

    Checked before any model call: the stacks are fitted by 5-fold cross-validation, so each
    language needs 5 items or more.
    """
    from mushroom.data.languages import VAL_LANGUAGES

    counts = {}
    for part in filter(None, spec.split(",")):
        lang, _, n = part.partition(":")
        lang = lang.strip()
        if lang not in VAL_LANGUAGES:
            raise SystemExit(
                f"error: {flag} {spec!r}: {lang!r} is not a val language ({', '.join(VAL_LANGUAGES)})"
            )
        if n and not n.strip().isdigit():
            raise SystemExit(f"error: {flag} {spec!r}: {n!r} is not a count; write it as en:50,es:20")
        counts[lang] = int(n) if n else default
        if counts[lang] < 5:
            raise SystemExit(f"error: {flag} {spec!r}: {lang} needs 5 items or more (the stacks use 5 folds)")
    if not counts:
        raise SystemExit(f"error: {flag} is empty; write it as en:50,es:20")
    return counts


def read_manifest(record: Path) -> dict[str, Any]:
    """The recorded run's manifest, checked before anything is replayed (or deleted)."""
    path = record / "manifest.json"
    if not path.is_file():
        raise SystemExit(f"error: {path}: no recorded run there (make one without --replay)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SystemExit(f"error: {path}: line {exc.lineno}: not JSON ({exc.msg})") from None
    for field in ("model", "max_tokens", "langs_spec", "systems"):
        if not isinstance(manifest, dict) or field not in manifest:
            raise SystemExit(f"error: {path}: field {field!r} is missing: not a record of this script")
    for name in manifest["systems"]:
        if not (record / f"{name}.raw.jsonl.gz").is_file():
            raise SystemExit(
                f"error: {record}: the manifest lists {name!r} but {name}.raw.jsonl.gz is missing"
            )
    return manifest


def start_llama_server(model: str, log: Path, threads: int) -> tuple[LlamaServer, str]:
    """llama-cpp-python's OpenAI-compatible server on a pulled GGUF (one slot, `threads` threads)."""
    from mushroom.models.serve import LlamaServer, ServerError
    from mushroom.models.zoo import pull

    server = LlamaServer(pull(model), alias=model, logits_all=False, n_ctx=4096, threads=threads, log=log)
    try:
        return server.start(timeout_s=300), server.url
    except ServerError as exc:
        print(f"error: {exc}\nits log: {log}", file=sys.stderr)
        sys.exit(1)  # not bad input (2): the server could not be had


class NoncePrefix(Backend):
    """Puts a per-request nonce first, so no server can reuse an earlier prompt's prefix."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner.config)
        self.inner = inner
        self.kind = inner.kind

    def generate(
        self, requests: list[GenerationRequest], on_result: OnResult | None = None
    ) -> list[Generation]:
        changed = []
        for req in requests:
            first, *rest = req.messages
            nonce = f"[request {req.key} t={req.temperature}]\n"
            changed.append(
                req.model_copy(
                    update={"messages": [Message(role=first.role, content=nonce + first.content), *rest]}
                )
            )
        return self.inner.generate(changed, on_result)


def prefix_check(backend: dict[str, Any], n: int, max_tokens: int, work: Path) -> dict[str, float]:
    """Seconds per item of the llm system with the shared prefix reusable, then defeated."""
    from mushroom.backends.config import BackendConfig
    from mushroom.backends.registry import backend_class
    from mushroom.data.contexts import load_contexts

    items = load_split("val", ["en"])["en"][:n]
    contexts = load_contexts("val", "en").by_id
    timings = {}
    for mode in ("on", "off"):
        opts = {**llm_options(backend, max_tokens)["llm"], "cache": False}
        det = build("llm", opts)
        det.workdir = work / f"prefix-{mode}"
        det.workdir.mkdir(parents=True, exist_ok=True)
        config = BackendConfig.model_validate(backend)
        inner = backend_class(config.kind)(config)
        det._backend = inner if mode == "on" else NoncePrefix(inner)
        t0 = time.perf_counter()
        det.detect(items, contexts)
        timings[mode] = (time.perf_counter() - t0) / len(items)
    return timings


def record(work: Path, dest: Path, manifest: dict) -> None:
    """Keeps the model-backed systems' raw records (gzipped) and the manifest in the repository."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in LLM_SYSTEMS:
        src = sorted((work / name / "val" / "raw").glob("*.raw.jsonl"))
        if not src:
            continue
        with gzip.open(dest / f"{name}.raw.jsonl.gz", "wt", encoding="utf-8", compresslevel=9) as out:
            for path in src:
                out.write(path.read_text(encoding="utf-8"))
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def unpack(dest: Path, work: Path) -> dict[str, Path]:
    """The recorded raw records, unpacked into the work folder for the replay backend."""
    files = {}
    for name in LLM_SYSTEMS:
        gz = dest / f"{name}.raw.jsonl.gz"
        if gz.exists():
            files[name] = work / f"{name}.recorded.raw.jsonl"
            with gzip.open(gz, "rt", encoding="utf-8") as src:
                files[name].write_text(src.read(), encoding="utf-8")
    return files


COUNTERS = [
    ("parsed", ("parsed", "ok")),
    ("repaired", ("repaired",)),
    ("unparseable", ("unparseable", "invalid_json", "wrong_shape")),
    ("truncated", ("truncated",)),
    ("exact", ("located_exact", "located_casefold")),
    ("normalised", ("located_normalized",)),
    ("fuzzy", ("located_fuzzy",)),
    ("lost", ("lost", "not_located")),
    ("errors", ("backend_errors",)),
]


# The chain's own counters of what a stage's replies named and the answer did not hold: its
# `chain.*` totals are no stage (their requests are the stages' again), so they go to the stage
CHAIN_LOST = {"decompose": "chain.claims_not_in_answer", "verify": "chain.spans_not_located"}


def counter_rows(name: str, stats: dict[str, int]) -> list[str]:
    """The parser's counters per stage of one system, as printed rows."""
    stages = sorted(
        {k.split(".", 1)[0] for k in stats if "." in k and not k.startswith(("items", "context"))}
    )
    if name == "chain":
        stages = [s for s in stages if s != "chain"]
    rows = []
    for stage in stages:
        got = {label: sum(stats.get(f"{stage}.{k}", 0) for k in keys) for label, keys in COUNTERS}
        if name == "chain" and stage in CHAIN_LOST:
            got["lost"] += stats.get(CHAIN_LOST[stage], 0)
        req = stats.get(f"{stage}.requests", 0)
        if not req and not any(got.values()):
            continue
        cells = " ".join(f"{got[label]:>{max(6, len(label))}d}" for label, _ in COUNTERS)
        rows.append(f"{name:6s} {stage:10s} {req:>8d} {cells}")
    return rows


class Tee(io.StringIO):
    """Keeps what is printed, to write it into the docs as well."""

    def __init__(self, stream) -> None:  # noqa: ANN001 - sys.stdout
        super().__init__()
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(text)
        return super().write(text)


# Counters added after the shipped records were made (what shares of bad replies are of)
NEWER_COUNTERS = frozenset(
    {
        "llm.replies",
        "chain.replies",
        "pyes.answers",
        "llm.lost_replies",
        "llm.failed_named_elsewhere",
        "chain.contradicted_unplaced",  # 2026-11-27
        "chain.unreadable_claims",  # 2026-11-29
        "chain.invalid_entries",  # 2026-11-29
        "chain.no_claims_in_answer",  # 2026-11-29 (the thirty-first stop)
    }
)
# Counters of what the reading makes of the replies, changed since the record by a decision
# (not by the replies): since 2026-11-27 an llm reply naming only text the answer does not
# hold is no vote, so an item with no other reply fails where it was read as "nothing
# wrong". Every counter of the replies themselves is still compared.
POLICY_COUNTERS = frozenset({"items.failed", "items.ok"})  # of the llm system only
POLICY_CHANGE = "an llm reply naming only text not in the answer is no vote (2026-11-27)"


def _recorded_counters(by_lang: dict, recorded: dict | None) -> dict:
    """The replayed counters as a record keeps them: one made before a counter was added lacks it.

    Only the counters added since are left out: any other difference (an `items.failed`) shows.
    """
    kept = {name for counters in (recorded or {}).values() for name in counters}
    return {
        lang: {k: v for k, v in c.items() if k in kept or k not in NEWER_COUNTERS}
        for lang, c in by_lang.items()
    }


def _without_policy(counters: dict | None) -> dict:
    """Per language, the counters of the replies themselves (`POLICY_COUNTERS` left out)."""
    return {
        lang: {k: v for k, v in c.items() if k not in POLICY_COUNTERS} for lang, c in (counters or {}).items()
    }


def policy_explains(replayed: dict, recorded: dict | None) -> bool:
    """Whether the llm's item counts differ from the record's by the policy's failures alone.

    Items newly failed must be exactly those that failed only because such replies are no
    vote (`llm.failed_named_elsewhere`), and as many fewer items ok: any other cause of a
    difference is a replay that did not reproduce the run.
    """
    old, new = (recorded or {}).get("all", {}), replayed.get("all", {})
    named_elsewhere = new.get("llm.failed_named_elsewhere", 0)
    gained = new.get("items.failed", 0) - old.get("items.failed", 0)
    return gained == named_elsewhere and old.get("items.ok", 0) - new.get("items.ok", 0) == gained


def policy_differences(replayed: dict, recorded: dict | None) -> list[str]:
    """`items.failed 1 -> 51` for each policy counter whose total (the "all" row) differs."""
    out = []
    for key in sorted(POLICY_COUNTERS):
        old = (recorded or {}).get("all", {}).get(key, 0)
        new = replayed.get("all", {}).get(key, 0)
        if old != new:
            out.append(f"{key} {old} -> {new}")
    return out


def counter_differences(replayed: dict, recorded: dict | None) -> list[str]:
    """`en llm.claims 274 -> 275` for each counter of a language that differs from the record's."""
    recorded = recorded or {}
    return [
        f"{lang} {key} {recorded.get(lang, {}).get(key, 0)} -> {replayed.get(lang, {}).get(key, 0)}"
        for lang in sorted(set(replayed) | set(recorded))
        for key in sorted(set(replayed.get(lang, {})) | set(recorded.get(lang, {})))
        if replayed.get(lang, {}).get(key, 0) != recorded.get(lang, {}).get(key, 0)
    ]


def script_advice(advice: str) -> str:
    """`retry_advice` in this script's options: it has no -o flags, and its run folders are --work."""
    return (
        advice.replace("-o max_tokens=N", "--max-tokens N")
        .replace("raise -o backend.timeout_s first if the model is that slow", "serve the model faster first")
        .replace("run in a new folder", "run with another --work folder")
        .replace("in a new folder", "with another --work folder")
    )


def main() -> None:
    tee = Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        args = run()
    if args.markdown:
        command = " ".join(["python", "benchmarks/llm_quality.py", *sys.argv[1:]])
        args.markdown.write_text(f"Written by `{command}`:\n\n```text\n{tee.getvalue().rstrip()}\n```\n")
    if getattr(args, "mismatch", False):
        print("error: the replayed counters differ from the recorded run's (see above)", file=sys.stderr)
        sys.exit(1)
    if getattr(args, "failed", "") and args.replay:  # the record's own: a replay reproduced it
        print(
            f"note: items failed in the replay ({args.failed}). Their predictions are empty, so the "
            "scores above are not quite the model's.",
            file=sys.stderr,
        )
    elif getattr(args, "failed", ""):
        print(
            f"error: items failed ({args.failed}). Their predictions are empty, so the scores above are "
            f"not the model's. {script_advice(retry_advice(args.failed_errors))}.",
            file=sys.stderr,
        )
        sys.exit(1)


def run() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replay", action="store_true", help="answer from the recorded raw records")
    ap.add_argument(
        "--record",
        type=Path,
        default=None,
        help=f"the recorded run: read by --replay (default {RECORD.relative_to(ROOT)}); written by a live "
        "run (default WORK/record; give this path to replace the repository's record)",
    )
    ap.add_argument("--base-url", default=None, help="an OpenAI-compatible server (vLLM, llama.cpp, ...)")
    ap.add_argument("--model", default="smollm2", help="the served model, or a pulled model's name")
    ap.add_argument(
        "--langs",
        default=None,
        help="val languages, each with its item count: en:50,es:20 (default en,es,de at --limit)",
    )
    ap.add_argument("--limit", type=positive, default=None, help="items per language (default 50)")
    ap.add_argument("--max-tokens", type=positive, default=384)
    ap.add_argument(
        "--systems",
        default=None,
        help="model-backed systems: llm, chain, pyes (default: llm,chain,pyes; a replay: the recorded ones)",
    )
    ap.add_argument(
        "--pyes-model",
        default=None,
        help=f"pyes: the scoring model (default: {PYES_MODEL} on transformers, CPU; with --base-url, --model)",
    )
    ap.add_argument(
        "--work", type=Path, default=None, help="run folders (resumable; default eval/llm_quality)"
    )
    ap.add_argument("--markdown", type=Path, default=None, help="also write the output into this file")
    ap.add_argument("--threads", type=positive, default=1, help="llama.cpp threads (a pulled model only)")
    ap.add_argument(
        "--chain-langs", default=None, help="the chain's languages and items, as --langs (default: --langs)"
    )
    ap.add_argument(
        "--prefix-check", type=whole, default=0, help="time N en items with the prefix cache on/off"
    )
    args = ap.parse_args()

    manifest: dict[str, Any] = {}
    work = args.work or ROOT / "eval" / ("llm_quality-replay" if args.replay else "llm_quality")
    if args.record is None:
        args.record = RECORD if args.replay else work / "record"
    if args.replay:
        manifest = read_manifest(args.record)
        if args.langs or args.chain_langs or args.limit:
            raise SystemExit(
                "error: --replay answers the recorded items only "
                f"({manifest['langs_spec']}); leave out --langs, --chain-langs and --limit"
            )
    limit = args.limit or manifest.get("limit", 50)
    spec = args.langs or manifest.get("langs_spec", "en,es,de")
    counts = lang_counts(spec, limit)
    langs = list(counts)
    if args.systems is None:
        args.systems = ",".join(manifest["systems"]) if args.replay else ",".join(LLM_SYSTEMS)
    systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in systems if s not in LLM_SYSTEMS]
    if unknown or not systems:
        raise SystemExit(f"error: --systems {args.systems!r}: give one or more of {', '.join(LLM_SYSTEMS)}")
    if args.replay:
        missing = [s for s in systems if s not in manifest["systems"]]
        if missing:
            raise SystemExit(f"error: {args.record}: the recorded run has no {', '.join(missing)} system")
    if not args.replay and (args.record / "manifest.json").is_file():
        # A sitting that adds a system (or resumes one) keeps what the record holds of the others.
        manifest = read_manifest(args.record)
        kept = [s for s in manifest["systems"] if s not in systems]
        if kept and manifest["max_tokens"] != args.max_tokens:
            raise SystemExit(
                f"error: {args.record} holds {', '.join(kept)} run with --max-tokens {manifest['max_tokens']}; "
                "give the same, re-run those systems too, or record elsewhere with --record"
            )
        if kept and lang_counts(manifest["langs_spec"], manifest.get("limit", limit)) != counts:
            raise SystemExit(
                f"error: {args.record} holds {', '.join(kept)} on {manifest['langs_spec']}; give the same "
                f"--langs, re-run those systems too, or record elsewhere with --record"
            )
    if args.replay and work.exists():
        shutil.rmtree(work)  # a replay starts clean: nothing is taken from an earlier one
    work.mkdir(parents=True, exist_ok=True)
    data = {lang: items[: counts[lang]] for lang, items in load_split("val", langs).items()}
    # The chain costs several calls per item: it may run on fewer items than the rest.
    chain_spec = args.chain_langs or manifest.get("systems", {}).get("chain", {}).get("langs_spec", spec)
    chain_counts = lang_counts(chain_spec, limit, "--chain-langs")
    subset = {
        "chain": {
            lang: data[lang][: min(n, counts[lang])] for lang, n in chain_counts.items() if lang in data
        }
    }

    server = None
    if args.replay:
        recorded = unpack(args.record, work)
        backends = {s: {"kind": "replay", "responses": str(recorded[s])} for s in systems}
        shown_record = args.record.relative_to(ROOT) if args.record.is_relative_to(ROOT) else args.record
        models = {s: manifest["systems"][s].get("model", manifest["model"]) for s in systems}
        wheres = {s: f"replay of {shown_record}" for s in systems}
        max_tokens = manifest["max_tokens"]
    else:
        chat = [s for s in systems if s != "pyes"]
        models, wheres, backends = {}, {}, {}
        if chat and args.base_url is None:
            server, url = start_llama_server(args.model, work / "server.log", args.threads)
            backend = {"kind": "openai", "model": args.model, "base_url": url}
            where = f"llama.cpp server (llama-cpp-python) on the pulled {args.model}"
        else:
            backend = {"kind": "openai", "model": args.model, "base_url": args.base_url}
            where = f"server {args.base_url}"
        for name in chat:
            models[name], wheres[name], backends[name] = args.model, where, backend
        if "pyes" in systems:
            if args.base_url is None:
                models["pyes"] = args.pyes_model or PYES_MODEL
                backends["pyes"] = {"kind": "transformers", "model": models["pyes"], "device": "cpu"}
                wheres["pyes"] = f"transformers, CPU, on the pulled {models['pyes']}"
            else:
                models["pyes"] = args.pyes_model or args.model
                backends["pyes"] = {"kind": "openai", "model": models["pyes"], "base_url": args.base_url}
                wheres["pyes"] = where
        max_tokens = args.max_tokens
    n_items = sum(len(v) for v in data.values())
    print(f"{n_items} val items: " + ", ".join(f"{k} {len(v)}" for k, v in data.items()))
    for name in systems:
        print(f"{name}: model {models[name]} ({wheres[name]})")
    shown = work.relative_to(ROOT) if work.is_relative_to(ROOT) else work
    print(f"run folders in {shown} (resumable); service log {shown / 'runs.log'}")

    try:
        results: dict[str, dict] = {}
        for name in ("lexical", "semantic"):
            results[name] = run_system(name, None, data, work, live=False)
        for name in systems:
            opts = llm_options(backends[name], max_tokens)[name]
            results[name] = run_system(name, opts, subset.get(name, data), work, live=not args.replay)
            if not args.replay:
                timing = results[name]["timing"] or {}
                manifest.setdefault("systems", {})[name] = {
                    "model": models[name],
                    "where": wheres[name],
                    "date": time.strftime("%Y-%m-%d"),
                    "command": " ".join(["python", "benchmarks/llm_quality.py", *sys.argv[1:]]),
                    "options": {k: v for k, v in opts.items() if k not in ("backend", "models")},
                    "s_per_item": round(timing["seconds"] / timing["items"], 2) if timing else None,
                    "items_timed": timing.get("items", 0),
                    "counters": results[name]["by_lang"],
                    "langs": list(subset.get(name, data)),
                    "langs_spec": chain_spec if name == "chain" else spec,
                }
        timings = {}
        if args.prefix_check and not args.replay and chat:
            timings = prefix_check(backends[chat[0]], args.prefix_check, max_tokens, work)
            manifest["prefix_check"] = {"items": args.prefix_check, "s_per_item": timings}
    finally:
        if server is not None:
            server.stop()

    scores = {name: per_item_scores(subset.get(name, data), r["files"]) for name, r in results.items()}
    scores["stack"] = stack_scores(["lexical", "semantic"], data, work)
    forced = {}  # the stack made to keep the member (no choice): what the member alone does to it
    for name in ("llm", "pyes"):
        if name in systems:
            scores[f"stack+{name}"] = stack_scores(["lexical", "semantic", name], data, work)
            forced[name] = stack_scores(["lexical", "semantic", name], data, work, gate=[])

    # tokens and seconds per item, from the raw records (seconds: the live run's, recorded)
    usage = {}
    for name in systems:
        paths = [recorded[name]] if args.replay else sorted((work / name / "val" / "raw").glob("*.raw.jsonl"))
        recs = raw_records(paths)
        per = Counter()
        for r in recs:
            for key in ("prompt_tokens", "completion_tokens"):
                per[key] += int(r.usage.get(key, 0) or 0)
        n = sum(len(v) for v in subset.get(name, data).values())
        usage[name] = {k: v / n for k, v in per.items() if v} | {"requests": len(recs) / n}
    print()
    print(f"{'system':10s} {'lang':4s} {'n':>3s} {'IoU [95% CI]':>24s} {'Cor [95% CI]':>24s} {'failed':>6s}")
    for name, by_lang in scores.items():
        failed = results.get(name, {}).get("stats", {}).get("items.failed", 0)
        for lang, (iou, cor) in by_lang.items():
            print(f"{name:10s} {lang:4s} {len(iou):3d} {ci(iou):>24s} {ci(cor):>24s} {'':>6s}")
        all_iou = np.concatenate([v[0] for v in by_lang.values()])
        all_cor = np.concatenate([v[1] for v in by_lang.values()])
        print(f"{name:10s} {'all':4s} {len(all_iou):3d} {ci(all_iou):>24s} {ci(all_cor):>24s} {failed:6d}")

    print()
    if any(name != "pyes" for name in systems):
        print("parser counters (over all requests; located: spans placed in the answer)")
        print(
            f"{'system':6s} {'stage':10s} {'requests':>8s} "
            + " ".join(f"{label:>6s}" for label, _ in COUNTERS)
        )
    for name in systems:
        if name != "pyes":  # pyes parses nothing: it scores label texts
            for row in counter_rows(name, results[name]["stats"]):
                print(row)
    if "pyes" in systems:
        st = results["pyes"]["stats"]
        print(
            f"pyes: {st.get('pyes.pieces', 0)} pieces scored with {st.get('pyes.requests', 0)} requests; "
            f"{st.get('pyes.unusable', 0)} unusable"
        )

    print()
    print(
        f"{'system':6s} {'req/item':>8s} {'prompt tok/item':>15s} {'compl tok/item':>14s} {'s/item (live)':>13s}"
    )
    for name in systems:
        u = usage[name]
        s = manifest.get("systems", {}).get(name, {}).get("s_per_item")
        print(
            f"{name:6s} {u['requests']:8.1f} {tokens(u, 'prompt_tokens'):>15s} {tokens(u, 'completion_tokens'):>14s} "
            f"{(f'{s:.2f}' if s is not None else '-'):>13s}"
        )
    check = manifest.get("prefix_check") if "llm" in systems else None
    if check:
        on, off = check["s_per_item"]["on"], check["s_per_item"]["off"]
        print(
            f"prefix cache ({check['items']} en items, llm system, live): {on:.2f} s/item reused, "
            f"{off:.2f} s/item defeated ({off / on:.2f}x)"
        )

    # Failed items are left empty and scored as such: the numbers above would look like a
    # result. They are shown, then the script says so and exits non-zero.
    args.failed_errors = [
        results[name]["first_error"] for name in systems if results[name]["stats"].get("items.failed", 0)
    ]
    args.failed = "; ".join(
        f"{name}: {n}, the first with: {results[name]['first_error']}"
        for name in systems
        if (n := results[name]["stats"].get("items.failed", 0))
    )
    if args.replay:
        replayed = {
            n: _recorded_counters(results[n]["by_lang"], manifest["systems"][n].get("counters"))
            for n in systems
        }
        recorded = {n: manifest["systems"][n].get("counters") for n in systems}
        same = all(
            _without_policy(replayed[n]) == _without_policy(recorded[n])
            if n == "llm" and policy_explains(results[n]["by_lang"], recorded[n])
            else replayed[n] == recorded[n]
            for n in systems
        )
        moved = [
            f"{n} {', '.join(d)}"
            for n in systems
            if n == "llm" and (d := policy_differences(replayed[n], recorded[n]))
        ]
        why = (
            f" (read under a newer policy: {'; '.join(moved)}, as {POLICY_CHANGE})" if same and moved else ""
        )
        print(f"replayed counters equal the live run's: {'yes' if same else 'NO'}{why}")
        if not same:  # which ones, so a reader can tell a parser change from a broken replay
            for n in systems:
                explained = n == "llm" and policy_explains(results[n]["by_lang"], recorded[n])
                pair = (_without_policy(replayed[n]), _without_policy(recorded[n])) if explained else None
                for line in counter_differences(*(pair or (replayed[n], recorded[n]))):
                    print(f"  {n} {line}")
        args.mismatch = not same

    def mean(name: str, k: int) -> float:
        return float(np.mean([v[k].mean() for v in scores[name].values()]))

    print()
    for name in ("llm", "pyes"):
        if f"stack+{name}" in scores:
            a = np.concatenate([v[0] for v in scores[f"stack+{name}"].values()])
            b = np.concatenate([v[0] for v in scores["stack"].values()])
            p = paired_test(a, b)
            print(
                f"stack+{name} - stack, IoU paired over {p.n} items: {p.mean_diff:+.4f} "
                f"[{p.ci_low:+.4f}, {p.ci_high:+.4f}] p={p.p_value:.3f}"
            )
            a = np.concatenate([v[0] for v in forced[name].values()])
            p = paired_test(a, b)
            print(
                f"  the same stack made to keep {name}: {p.mean_diff:+.4f} "
                f"[{p.ci_low:+.4f}, {p.ci_high:+.4f}] p={p.p_value:.3f}"
            )
            if gate := GATES.get(f"stack+{name}"):
                print(
                    f"  the stack kept {name} in {gate['folds_kept']} of {gate['folds']} folds, and "
                    f"{'kept it' if gate['kept'] else 'left it out'} when fitted on all items "
                    f"(out-of-fold IoU with it {gate['iou_with']:.4f}, without {gate['iou_without']:.4f})"
                )
    if not args.replay:
        if chat:  # the top-level fields are the chat systems' (the README's line is theirs)
            manifest.update(
                {
                    "model": args.model,
                    "where": where,
                    "date": time.strftime("%Y-%m-%d"),
                    "command": " ".join(["python", "benchmarks/llm_quality.py", *sys.argv[1:]]),
                }
            )
        manifest.update({"langs": langs, "limit": limit, "langs_spec": spec, "max_tokens": max_tokens})
        for key, value in (("model", models[systems[0]]), ("where", wheres[systems[0]])):
            manifest.setdefault(key, value)  # a record of pyes alone names its model too
        record(work, args.record, manifest)
        print(f"\nrecorded the raw records and manifest in {args.record}")
        if args.failed:  # a small model's cut-off replies are routine: the replay fails them the same way
            print(f"  with the failed items ({args.failed}): a replay fails them too, and says so")
    print()
    line = [f"llm IoU {mean('llm', 0):.4f} Cor {mean('llm', 1):.4f}"] if "llm" in scores else []
    line.append(f"stack IoU {mean('stack', 0):.4f} Cor {mean('stack', 1):.4f}")
    if "stack+llm" in scores:
        line.append(f"stack+llm IoU {mean('stack+llm', 0):.4f} Cor {mean('stack+llm', 1):.4f}")
    print("(the last line: means over languages, as the task averages them; the 'all' rows pool items)")
    print("; ".join(line))
    return args


if __name__ == "__main__":
    from mushroom.errors import Interrupted

    try:
        main()
    except (KeyboardInterrupt, Interrupted):
        # the server is stopped in run()'s finally; finished items are in the work folder
        print("\ninterrupted: finished items are kept; the same command resumes from them", file=sys.stderr)
        sys.exit(130)
    except SystemExit as exc:
        if isinstance(exc.code, str):  # this script's own "error: ..." lines: bad input, as argparse's
            print(exc.code, file=sys.stderr)
            sys.exit(2)
        raise

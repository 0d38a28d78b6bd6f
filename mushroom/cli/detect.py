"""`detect`, `main-job` and `run`: the commands that run detectors into run folders."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from mushroom.backends.base import MAX_TEMPERATURE
from mushroom.cli.boundary import FLAG, output_file, print_warning
from mushroom.cli.common import (
    DEFAULT_CONTEXTS,
    AllowFailures,
    Contexts,
    Langs,
    Quiet,
    context_sources,
    items_option,
    lang_codes,
    reporter,
)
from mushroom.data.contexts import none_on_purpose
from mushroom.errors import MushroomError, did_you_mean
from mushroom.util.options import merge_options, nest_options, parse_float_list, parse_options, split_names


def detect(
    split: Annotated[
        str | None, typer.Option("--split", help="val (the default), test, train or test-labeled")
    ] = None,
    detector: Annotated[
        str | None,
        typer.Option("--detector", help="detector name (default: lexical, or llm with --backend/--model)"),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="run folder (default: a new one in runs/, named by time, detector and split)"
        ),
    ] = None,
    lang: Langs = None,
    contexts: Contexts = DEFAULT_CONTEXTS,
    option: Annotated[
        list[str] | None, typer.Option("--option", "-o", help="detector option KEY=VALUE")
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend",
            help="llm: replay, openai, transformers, vllm (default: openai with --model or --base-url, "
            "else replay)",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="llm: model name, path or registry name (mushroom models list)"),
    ] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="llm/openai: server URL")] = None,
    responses: Annotated[
        str | None, typer.Option("--responses", help="llm/replay: recorded responses or a run's raw file")
    ] = None,
    prompt: Annotated[str | None, typer.Option("--prompt", help="llm: prompt file name or path")] = None,
    temperatures: Annotated[str | None, typer.Option("--temperatures", help="llm: e.g. 0.05,0.1,0.2")] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="only the first N items per language")
    ] = None,
    items_file: Annotated[
        Path | None,
        typer.Option("--items", help="a JSONL file of items instead of a split; --contexts then takes files"),
    ] = None,
    allow_failures: AllowFailures = False,
    quiet: Quiet = False,
) -> None:
    """Run one detector on a split (or an items file); labelled items are scored.

    `--backend replay --responses FILE` re-parses recorded responses without any model. A
    re-run of the same command on the same --out folder redoes only missing or failed items.
    """
    from mushroom.detectors import build
    from mushroom.runs.detect import items_file_data, run_detect

    options = _detector_options(option, detector, backend, model, base_url, responses, prompt, temperatures)
    if backend or model or base_url or responses:
        detector = detector or "llm"
    detector = detector or "lexical"
    if items_file is None:
        split = split or "val"
    det = build(detector, options)
    sources = context_sources(contexts, f"the {detector} detector" if det.needs_contexts else None)
    data = context_files = None
    said: list[str] = []  # what the items file's check warned of, for the run's summary.json

    def warn(warning: str) -> None:
        print_warning(warning)
        said.append(warning)

    if items_file is not None:
        if split is not None:
            raise MushroomError(f"--items {items_file} replaces --split {split}: give one of them")
        split = "items"
        items_option(items_file)  # a JSONL file, or a folder of Dataset.save_to_disk
        data, context_files = items_file_data(
            items_file, lang, sources, contexts == DEFAULT_CONTEXTS, warn=warn
        )
    run_detect(
        det,
        split,
        out,
        lang,
        sources,
        data,
        context_files,
        items_file,
        limit,
        quiet,
        allow_failures,
        reporter(),
        name=detector,
        said=said,
    )


def _detector_options(
    option: list[str] | None,
    detector: str | None,
    backend: str | None,
    model: str | None,
    base_url: str | None,
    responses: str | None,
    prompt: str | None,
    temperatures: str | None,
) -> dict[str, Any]:
    """The detector's options: -o values, nested, with the shortcut flags folded in.

    The backend shortcuts configure an LLM's backend, so they imply the llm detector; a named
    detector without a backend (lexical) is refused by its options, not swapped.
    """
    options = nest_options(parse_options(option or []))
    if backend or model or base_url or responses:
        from mushroom.detectors import detector_class

        detector = detector or "llm"
        fields = detector_class(detector).Options.model_fields
        if "models" in fields and "backend" not in fields:  # pyes: a list of models
            raise MushroomError(
                f"--backend/--model/--base-url/--responses configure one LLM; detector {detector!r} takes "
                'its models as a list: -o \'models=[{"kind": "openai", "base_url": "URL", "model": "M"}]\''
            )
        if "backend" not in fields:
            raise MushroomError(
                f"--backend/--model/--base-url/--responses configure an LLM, and detector {detector!r} "
                "uses none; use --detector llm or chain, or leave them out"
            )
        _backend_options(options, backend, model, base_url, responses)
    for key, given in (("prompt", prompt), ("temperatures", temperatures)):
        if given and key in options:  # one would silently win
            raise MushroomError(f"--{key} and -o {key}=… both given; give it once")
    if prompt:
        options["prompt"] = prompt
    if temperatures is not None:  # `--temperatures=` (empty) ran at 0.0, unsaid
        options["temperatures"] = parse_float_list(
            temperatures, "--temperatures", low=0.0, high=MAX_TEMPERATURE
        )
    return options


def _backend_options(
    options: dict[str, Any],
    backend: str | None,
    model: str | None,
    base_url: str | None,
    responses: str | None,
    key: str = "backend",
) -> None:
    """Folds the --backend/--model/--base-url/--responses shortcuts into the detector options."""
    if not (backend or model or base_url or responses):
        return
    given = options.get(key, {})
    as_kind = f"-o {key}={given}" if isinstance(given, str) else None  # how a conflict names it
    if isinstance(given, str):  # `-o backend=openai` names the kind
        given = {"kind": given}
    if not isinstance(given, dict):
        raise MushroomError(
            f"-o {key}={given!r}: give the backend's settings as -o {key}.kind=…, -o {key}.model=…"
        )
    cfg = dict(given)
    for name, flag, value in (
        ("kind", "--backend", backend),
        ("model", "--model", model),
        ("base_url", "--base-url", base_url),
        ("responses", "--responses", responses),
    ):
        if value is not None:
            if name in cfg and str(cfg[name]) != value:  # the flag silently won (-o values are parsed)
                written = as_kind or f"-o {key}.{name}={cfg[name]}"
                raise MushroomError(f"{flag} {value} and {written} both given; give it once")
            cfg[name] = value
    cfg.setdefault("kind", "replay" if responses else "openai")
    options[key] = cfg


def main_job(
    ctx: typer.Context,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="run folder (default: a new one in submissions/, named by time and detector)"
        ),
    ] = None,
    detector: Annotated[
        str,
        typer.Option(
            "--detector",
            help="'stack' (lexical + semantic, combined by a stack fitted on val) or one detector",
        ),
    ] = "stack",
    lang: Annotated[
        list[str] | None, typer.Option("--lang", callback=lang_codes, help="language(s); default all 14")
    ] = None,
    contexts: Contexts = DEFAULT_CONTEXTS,
    option: Annotated[
        list[str] | None,
        typer.Option("--option", "-o", help="detector option KEY=VALUE (with stack: DETECTOR.KEY=VALUE)"),
    ] = None,
    no_val: Annotated[
        bool, typer.Option("--no-val", metavar=FLAG, help="skip the scored val run (one detector only)")
    ] = False,
    allow_failures: AllowFailures = False,
    members: Annotated[
        str | None,
        typer.Option(
            "--members",
            help="stack: its member detectors, e.g. lexical,semantic,llm (default lexical,semantic); "
            "a model-backed member takes its backend as -o llm.backend.kind=openai ...",
        ),
    ] = None,
    skip_unavailable: Annotated[
        bool,
        typer.Option(
            "--skip-unavailable",
            metavar=FLAG,
            help="stack: leave out a member whose optional package is not installed (with a warning)",
        ),
    ] = False,
    llm_budget: Annotated[
        float | None,
        typer.Option(
            "--llm-budget",
            help="stack: send model-backed members (llm, chain, pyes; --members must name one) only the "
            "most uncertain share of each language's items, a fraction in (0, 1], e.g. 0.3 for 30%; "
            "the rest keep the CPU stack's prediction (default: all)",
        ),
    ] = None,
    member_contexts: Annotated[
        str | None,
        typer.Option(
            "--member-contexts",
            help="stack: the context sources the model-backed members read, comma-separated, e.g. a "
            "source `mushroom contexts` generated for the items a cascade sends (default: --contexts)",
        ),
    ] = None,
    plan_only: Annotated[
        bool,
        typer.Option(
            "--plan-only",
            metavar=FLAG,
            help="with --llm-budget: run the CPU members, write the items the cascade would send to "
            "cascade-plan.jsonl, and stop before any model call",
        ),
    ] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help='stack: members, their options, languages, contexts and budget from a file (job = "main", '
            "e.g. configs/cascade-vllm.toml); flags given as well override it (--allow-failures and "
            "--skip-unavailable can only turn a setting on)",
        ),
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Test submission for every language (checked files + zip), then a scored val run."""
    from mushroom.runs.mainjob import DEFAULT_MEMBERS, run_main, run_main_stack

    # `backend.kind=openai`, `semantic.max_length=64`: nested the way `detect` nests them
    options = parse_options(option or [])
    job = _StackFlags(members, lang, contexts, member_contexts, llm_budget, allow_failures, skip_unavailable)
    if config is not None:
        if detector != "stack":
            raise MushroomError(
                f"--config {config} sets up the stack; it does not go with --detector {detector}"
            )
        job.take_file(ctx, config)
    _refuse_stack_flags(detector, job, no_val, plan_only)
    from mushroom.detectors import available, reads_contexts

    if detector != "stack" and detector not in available():  # 'stak' was told of every detector but stack
        choices = ["stack", *available()]
        raise MushroomError(
            f"unknown --detector {detector!r}{did_you_mean(detector, choices)}; one of {', '.join(choices)}"
        )
    names: tuple[str, ...] = ()
    if detector == "stack":
        if job.members is not None and not job.members.strip():  # it ran the default members, unsaid
            raise MushroomError(
                f"--members is empty: name the stack's members, e.g. {','.join(DEFAULT_MEMBERS)}"
            )
        names = (
            tuple(split_names(job.members, list(available()), "detector")) if job.members else DEFAULT_MEMBERS
        )
        if len(set(names)) != len(names) or not names:
            raise MushroomError(f"--members {job.members}: name each detector once")
        readers = [m for m in names if reads_contexts(m)]
        needed_by = f"the stack's {readers[0]} member" if readers else None
    else:
        needed_by = f"the {detector} detector" if reads_contexts(detector) else None
    sources = context_sources(job.contexts, needed_by, job.contexts_from)
    if detector != "stack":
        run_main(
            out=out,
            detector=detector,
            options=nest_options(options),
            sources=sources,
            langs=job.lang,
            with_val=not no_val,
            quiet=quiet,
            reporter=reporter(),
            allow_failures=job.allow_failures,
        )
        return
    for key in options:
        if "." not in key:
            raise MushroomError(
                f"with --detector stack, options are DETECTOR.KEY=VALUE (DETECTOR one of "
                f"{', '.join(names)}); got {key!r}"
            )
    run_main_stack(
        out=out,
        members=names,
        options=merge_options(job.file_options, nest_options(options)),
        sources=sources,
        langs=job.lang,
        quiet=quiet,
        reporter=reporter(),
        allow_failures=job.allow_failures,
        skip_unavailable=job.skip_unavailable,
        llm_budget=1.0 if job.llm_budget is None else job.llm_budget,
        budget_from=job.budget_from,
        member_sources=job.member_sources(),
        member_from=job.member_from,
        plan_only=plan_only,
    )


@dataclass
class _StackFlags:
    """The main job's stack settings: from its flags, then what a --config file sets that they leave out."""

    members: str | None
    lang: list[str] | None
    contexts: str
    member_contexts: str | None
    llm_budget: float | None
    allow_failures: bool
    skip_unavailable: bool
    file_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    budget_from: str | None = None  # the config file, when it set the budget
    member_from: str = "--member-contexts"  # what set the members' contexts, for messages
    contexts_from: str | None = None  # the config file's key, when it set the contexts

    def take_file(self, ctx: typer.Context, config: Path) -> None:
        """A flag on the command line wins over the file; what it leaves out comes from the file."""
        from mushroom.runs.config import check_config_sources, load_main_job_config

        cfg = load_main_job_config(config)
        self.members = self.members if self.members is not None else ",".join(cfg.members)
        self.lang = self.lang if self.lang is not None else cfg.langs
        if not _given(ctx, "contexts"):  # the file's: a missing one is named with its key
            if not none_on_purpose(cfg.contexts):  # ["none"]: none on purpose, as --contexts none
                check_config_sources(config, ["val", "test"], self.lang, cfg.contexts)
            self.contexts = ",".join(cfg.contexts)
            self.contexts_from = f"{config}: contexts = {json.dumps(cfg.contexts)}"
        if self.member_contexts is None and cfg.member_contexts is not None:
            self.member_contexts, self.member_from = (
                ",".join(cfg.member_contexts),
                f"{config}: member_contexts",
            )
        if self.llm_budget is None and cfg.llm_budget is not None:
            self.llm_budget, self.budget_from = cfg.llm_budget, str(config)
        self.allow_failures = self.allow_failures or cfg.allow_failures
        self.skip_unavailable = self.skip_unavailable or cfg.skip_unavailable
        chosen = split_names(self.members)
        # options of members that --members leaves out have nothing to set
        self.file_options = {name: opts for name, opts in cfg.options.items() if name in chosen}

    def member_sources(self) -> tuple[str, ...] | None:
        """The model-backed members' context sources (None: those of --contexts); each named once."""
        if self.member_contexts is None:
            return None
        from mushroom.data.contexts import source_names

        if none_on_purpose(self.member_contexts):  # the models read none, on purpose
            return ()
        try:
            sources = tuple(split_names(self.member_contexts, what="context source"))
            source_names(sources)  # one named twice is refused
        except MushroomError as exc:
            raise MushroomError(f"{self.member_from}: {exc}") from None
        if not sources:
            raise MushroomError(f"{self.member_from} is empty: name context sources, e.g. deepseek-r1,llm")
        return sources


def _refuse_stack_flags(detector: str, job: _StackFlags, no_val: bool, plan_only: bool) -> None:
    """Refuses the stack's own flags with one detector, and --no-val with the stack (fitted on val)."""
    if job.member_contexts is not None and detector != "stack":
        raise MushroomError(
            "--member-contexts names the contexts of the stack's model-backed members; give the "
            "contexts of one detector with --contexts"
        )
    if job.member_contexts is not None:
        job.member_sources()  # a bad list is refused before the --plan-only and --no-val checks
    if plan_only and detector != "stack":
        raise MushroomError(
            "--plan-only plans the stack's cascade (--llm-budget); it does not go with one detector"
        )
    if detector == "stack" and no_val:
        raise MushroomError(
            "--no-val: the stack (the default --detector) is fitted on val, so it always runs val; "
            "--no-val goes with one detector (--detector lexical)"
        )
    if job.members is not None and detector != "stack":
        raise MushroomError("--members names the stack's members; it does not go with one detector")
    if job.skip_unavailable and detector != "stack":
        raise MushroomError(
            "--skip-unavailable leaves out members of the stack; it does not go with one detector"
        )
    if job.llm_budget is not None:
        from mushroom.combine.cascade import check_budget

        check_budget(job.llm_budget)
        if detector != "stack":
            raise MushroomError(
                "--llm-budget chooses the items the stack's model-backed members see; it does not go "
                "with one detector"
            )


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether a parameter was set on the command line (or its environment), not left at its default."""
    # by name: typer 0.29 carries a click of its own, whose enum is not click's
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


def _check_eval_dir(eval_dir: Path, config: Path, cfg: Any) -> None:
    """`run --eval-dir`: a folder the variants' comparison can go to, checked before the run."""
    if len(cfg.variant_options()) < 2 or "val" not in cfg.splits:
        print_warning(f"--eval-dir: {config} has no variants to compare on val; nothing is written there")
        return
    # a file, '-', the official data, or a run's own files (its val/, predictions/) are refused
    output_file(eval_dir / f"variants-{cfg.name}.md", "--eval-dir")


def run_config(
    config: Annotated[
        Path, typer.Argument(metavar="CONFIG", help="a run config (TOML, YAML or JSON) from configs/")
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="run folder (default: a new one in runs/, named by time and config name)"),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="only the first N items per language")
    ] = None,
    allow_failures: AllowFailures = False,
    eval_dir: Annotated[
        Path | None, typer.Option("--eval-dir", help="variants: where the comparison goes (default: eval/)")
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Run a config: detector, backend, prompt(s), contexts, temperatures, splits, variants."""
    from mushroom.runs.config import execute, load_run_config

    cfg = load_run_config(config)
    if eval_dir is not None:  # checked now: it was read only after every variant had run
        _check_eval_dir(eval_dir, config, cfg)
    execute(
        cfg,
        out,
        quiet=quiet,
        reporter=reporter(),
        allow_failures=allow_failures,
        limit=limit,
        eval_dir=eval_dir,
    )

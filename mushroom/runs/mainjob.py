"""The main job: test submission files for all 14 languages, then a scored val run.

Both forms (one detector, or members combined by a stack) go through the run service, so
they resume per item, refuse to submit when items failed, and record honest timings.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mushroom.backends.config import NEEDS_RESPONSES
from mushroom.combine.cascade import check_budget
from mushroom.data.channels import channel_files
from mushroom.data.contexts import DEFAULT_SOURCES, OPTIONAL, check_sources, source_names, stray_contexts
from mushroom.data.languages import VAL_LANGUAGES
from mushroom.data.predictions import mark_all, submission_glob, submission_name
from mushroom.data.runfolder import made_from, new_run_folder, run_config_file, timestamp, write_json
from mushroom.data.splits import load_split, workspace
from mushroom.detectors import Detector, build
from mushroom.detectors.base import backend_settings
from mushroom.errors import MissingExtra, MushroomError, model_advice, model_flag_as
from mushroom.evaluation.submission import write_predictions
from mushroom.runs.confighash import fingerprint
from mushroom.runs.reporter import PlainReporter, Reporter, Table
from mushroom.runs.service import RunService
from mushroom.util.interrupts import fallback_hint, interrupt_hint
from mushroom.util.words import plural

if TYPE_CHECKING:
    from mushroom.combine.stack import Member, StackModel
    from mushroom.combine.stack.stream import StackChunk
    from mushroom.runs.cascade import CascadeJob

DEFAULT_MEMBERS = ("lexical", "semantic")


CASCADE_FAILED_NOTE = "where a model-backed member failed, it keeps the CPU stack's prediction"


def _drop_stack_outputs(out: Path) -> None:
    """Removes what an earlier invocation's stack wrote: test files, submission.zip, val files and scores."""
    stale = [out / "submission.zip", *out.glob(submission_glob("test"))]
    stale += (out / "val").glob(submission_glob("val"))
    stale += [out / "val" / name for name in ("scores.json", "scores.md", "comparison.json")]
    for path in stale:
        path.unlink(missing_ok=True)


def _val_langs(langs: list[str] | None) -> list[str]:
    return [lang for lang in (langs or VAL_LANGUAGES) if lang in VAL_LANGUAGES]


def _loadable_members(
    members: tuple[str, ...],
    options: dict[str, dict[str, Any]],
    sources: tuple[str, ...],
    out: Path | None,
    skip_unavailable: bool,
    member_sources: tuple[str, ...] | None = None,
) -> tuple[dict[str, Detector], dict[str, str]]:
    """The members built and checked, and (with `skip_unavailable`) those left out and why.

    A member whose optional package is missing stops the job before its folder exists,
    naming the extra and the flag; with the flag it is left out (the stack is fitted on the
    others), unless none is left. Any other problem with a member stops the job either way.
    """
    dets: dict[str, Detector] = {}
    missing: dict[str, MissingExtra] = {}
    for name in members:
        try:
            det = build(name, options.get(name))
            reads = member_sources if member_sources is not None and det.calls_model else sources
            det.check_ready(source_names(reads), out)
        except MissingExtra as exc:
            missing[name] = exc
            continue
        except MushroomError as exc:
            if "backend" not in str(exc):
                raise _member_options(exc, name) from None
            if NEEDS_RESPONSES in str(exc):  # it names detect's flags, which main-job has not
                raise MushroomError(
                    f"member {name!r} needs a backend: by default it replays recorded responses, and "
                    f"none were given. For a server: -o {name}.backend.kind=openai "
                    f"-o {name}.backend.base_url=URL -o {name}.backend.model=M; to replay a run's "
                    f"records: -o {name}.backend.responses=FILE"
                ) from None
            # the backend's own message names detect's flags (--base-url, --responses)
            advice = model_advice(str(exc), f"-o {name}.backend.model=NAME")
            advice = advice.replace("-o backend.", f"-o {name}.backend.")
            if not re.search(r"--(?:base-url|responses|model|backend)(?![\w-])", advice):
                # a hung server's message advised `-o backend.connect_timeout_s` (refused here), and
                # the lesson on how to set a backend read as if the settings given were wrong
                raise MushroomError(advice) from None
            raise MushroomError(
                f"{advice}; in main-job a member's backend is set with -o {name}.backend.KEY=VALUE, e.g. "
                f"-o {name}.backend.kind=openai -o {name}.backend.base_url=URL -o {name}.backend.model=M "
                f"(or -o {name}.backend.responses=FILE to replay)"
            ) from None
        dets[name] = det
    if missing and (not skip_unavailable or not dets):
        name, exc = next(iter(missing.items()))
        message = f"member {name!r} of the stack cannot load: {exc}"
        if dets:
            alone = " alone" if len(dets) == 1 else ""
            message += f"; or add --skip-unavailable to fit the stack on {', '.join(dets)}{alone}"
        raise MissingExtra(exc.what, exc.package, exc.extra, message=message)
    return dets, {name: str(exc) for name, exc in missing.items()}


def _refuse_unreachable(name: str, det: Detector, out: Path | None) -> None:
    """Stops a new job whose model-backed member's server is not there, before any member runs.

    A mistyped port was found only after the CPU members had run (minutes on every language),
    and left a folder of failed items. A folder with a run may hold cached answers that
    serve without the server, so only a new one is checked.
    """
    from mushroom.backends.config import OpenAIConfig

    if det.may_answer_from_cache(out):  # a shared cache_path may serve every item
        return
    for field, k, setting in backend_settings(det.options):
        if isinstance(setting, OpenAIConfig) and setting.base_url:
            from mushroom.backends.served import unreachable

            why = unreachable(setting)
            if why is not None:
                # pyes: models=[...]
                where = (
                    f"-o {name}.{field}.base_url=URL" if k is None else f"the base_url in {name}'s {field}"
                )
                raise MushroomError(
                    f"member {name!r}: {why}: start the server, or give its URL ({where}); nothing was run"
                )


def _member_options(exc: MushroomError, name: str) -> MushroomError:
    """The error with each `-o KEY=` it advises written as main-job takes it: `-o NAME.KEY=`.

    `main-job -o semantic.max_length=10000000` advised `-o max_length=512`, which main-job
    then refused as no member's option.
    """
    from mushroom.util.options import member_flags

    if type(exc) is not MushroomError:  # a file's problems name no flag
        return exc
    return MushroomError(model_advice(member_flags(str(exc), name), f"-o {name}.backend.model=NAME"))


def _check_member_sources(
    test_data: dict[str, list], val_data: dict[str, list], member_sources: tuple[str, ...], named: str
) -> None:
    """`check_sources` for --member-contexts, its errors naming the flag (or the config's key)."""
    try:
        check_sources("test", sorted(test_data), member_sources)
        check_sources("val", sorted(val_data), member_sources)
    except MushroomError as exc:
        raise type(exc)(f"{named}: {exc}") from None


def _close_to_existing(
    test_data: dict[str, list], val_data: dict[str, list], member_sources: tuple[str, ...], named: str
) -> list[str]:
    """A plan's member sources that no file has yet, but whose name is close to one that exists.

    A plan takes a source with no file as one to generate; `perplexity-sonar-pr` was planned,
    and its generation advised, where the run itself then said "did you mean".
    """
    from mushroom.data.contexts import available_sources, exists_anywhere
    from mushroom.errors import did_you_mean

    have = sorted(
        {s for split, data in (("test", test_data), ("val", val_data)) for lang in data
         for s in available_sources(split, lang)}
    )  # fmt: skip
    said = []
    for name in member_sources:
        source = name.removesuffix(OPTIONAL)
        close = did_you_mean(source, have) if not exists_anywhere(source) else ""
        if close:
            said.append(
                f"{named}: no context file has the source {source!r} yet{close}; the plan takes it as a "
                "source to generate under that name"
            )
    return said


# A Ctrl-C while the members load and the items are read said only "interrupted".
NOTHING_SAVED_YET = (
    "nothing was saved yet: the members were loading and the items being read, before the run "
    "folder is made; run the same command again"
)


def _holds_a_run(out: Path | None) -> bool:
    """Whether `--out` names a folder a run has written its config to (a resume, not a new job)."""
    return out is not None and (out / "config.json").exists()


def _until_the_folder(out: Path | None) -> Callable[[], None]:
    """Says "nothing was saved yet" on a Ctrl-C until the run folder is open; returns its withdrawal.

    Only for a new folder: a resumed one holds the earlier work, which its own hint tells of.
    """
    if _holds_a_run(out):
        return lambda: None
    return fallback_hint(NOTHING_SAVED_YET)


def _refuse_member_mix(
    members: tuple[str, ...],
    model_backed: list[str],
    llm_budget: float,
    budget_from: str | None,
    member_sources: tuple[str, ...] | None,
    member_from: str,
) -> None:
    """Refuses a budget or member contexts that the members make meaningless, before any work."""
    cascade = llm_budget != 1.0
    if member_sources is not None and not model_backed:
        raise MushroomError(
            f"{member_from} names the contexts of the model-backed members (llm, chain, pyes); "
            f"none is among {', '.join(members)}: give the contexts of every member with --contexts"
        )
    if cascade and not model_backed:
        # `budget_from`: the config file that set it, so the message does not name a flag not given
        raise MushroomError(
            f"{budget_from}: llm_budget = {llm_budget:g} limits the model-backed members (llm, chain, "
            f"pyes); none is among {', '.join(members)}: add one, or give --llm-budget 1 to send every item"
            if budget_from
            else f"--llm-budget {llm_budget:g} limits the model-backed members (llm, chain, pyes); "
            f"none is among {', '.join(members)}: add one with --members, or leave --llm-budget out"
        )
    if cascade and len(model_backed) == len(members):
        raise MushroomError(
            f"--llm-budget sends the items the CPU stack is least sure of, and every member "
            f"({', '.join(members)}) calls a model: add a CPU member, "
            f"e.g. --members lexical,{','.join(members)}"
        )


def run_main_stack(
    out: Path | None = None,
    members: tuple[str, ...] = DEFAULT_MEMBERS,
    options: dict[str, dict[str, Any]] | None = None,
    sources: tuple[str, ...] = DEFAULT_SOURCES,
    langs: list[str] | None = None,
    quiet: bool = False,
    reporter: Reporter | None = None,
    allow_failures: bool = False,
    skip_unavailable: bool = False,
    llm_budget: float = 1.0,
    budget_from: str | None = None,
    member_sources: tuple[str, ...] | None = None,
    plan_only: bool = False,
    member_from: str = "--member-contexts",
) -> Path:
    """Runs each member detector on test and val, fits the stack on val, applies it to test.

    The submission files are the stack's test predictions. The val numbers printed for the
    stack are out-of-fold (cross-validated by item) and written to val/ as files, scored
    like any other run; each member's own val files are under members/<name>/val. A re-run
    on a finished folder reuses the members' items and, when their files are unchanged, the
    fitted stack.

    Returns:
        The run folder (config.json, versions.json, members/, stack.json, submission files,
        submission.zip, val/ with the stack's out-of-fold predictions and scores).

    With `llm_budget` below 1 the job is a cascade (`mushroom.runs.cascade`): the
    model-backed members run only on that share of each language's items, those the CPU
    stack is least sure of; the folder then also holds cascade.jsonl and cascade/.
    `plan_only` stops such a job once it has chosen the items, before any model call: it
    writes the choice to cascade-plan.jsonl, so that contexts can be generated for those
    items alone (`mushroom contexts --cascade`), and touches no prediction file.

    `member_sources` are the context sources the model-backed members read (default:
    `sources`): a source generated for the items a cascade sends is theirs, and the CPU
    members, whose output chose those items, keep reading `sources`. `member_from` names
    what set them in messages (the flag, or a config file's key).
    """
    before_the_folder = _until_the_folder(out)
    from mushroom.combine.stack import Member

    reporter = reporter or PlainReporter()
    options = options or {}
    unknown = sorted(set(options) - set(members))
    if unknown:
        from mushroom.util.words import suggest

        hint = suggest(unknown[0], list(members))
        raise MushroomError(f"-o {unknown[0]}.KEY=VALUE: {unknown[0]!r} is not a member of the stack{hint}")
    cascade = llm_budget != 1.0
    if cascade:
        check_budget(llm_budget)
    if plan_only and not cascade:
        raise MushroomError(
            "--plan-only writes the items a cascade would send to its model-backed members: give "
            "--llm-budget below 1 with it"
        )
    dets, skipped = _loadable_members(members, options, sources, out, skip_unavailable, member_sources)
    members = tuple(dets)
    model_backed = [name for name, det in dets.items() if det.calls_model]
    _refuse_member_mix(members, model_backed, llm_budget, budget_from, member_sources, member_from)
    costly = model_backed if cascade else []
    # the languages are checked (and the items read) before the run folder is made
    val_langs = _val_langs(langs)
    if not val_langs:
        raise MushroomError(
            f"the stack is fitted on val: --lang must include a val language ({', '.join(VAL_LANGUAGES)}); "
            f"got {', '.join(langs or [])}"
        )
    test_data = load_split("test", langs)
    val_data = load_split("val", val_langs)
    check_sources("test", sorted(test_data), sources)  # an unknown source left a folder behind
    check_sources("val", sorted(val_data), sources)
    stray = stray_contexts("test", test_data, sources) + stray_contexts("val", val_data, sources)
    if member_sources is not None and not plan_only:  # a plan is made before they are generated
        _check_member_sources(test_data, val_data, member_sources, member_from)
    elif member_sources is not None:  # ... but a typo would be generated under its misspelt name
        for warning in _close_to_existing(test_data, val_data, member_sources, member_from):
            reporter.message(warning, lead="warning:")
    # a plan calls no model; --allow-failures takes failed items as they come
    if not plan_only and not allow_failures and not _holds_a_run(out):
        for name in model_backed:
            _refuse_unreachable(name, dets[name], out)
    out = out or new_run_folder(workspace() / "submissions", f"{timestamp()}-stack")
    config = {
        "job": "main",
        "members": [d.describe() for d in dets.values()],
        "combination": "stack",
        "sources": list(sources),
        "langs": langs,
        **made_from(None, (), sources),
    }
    if member_sources is not None:  # only when given: the folders made before it still resume
        config["member_sources"] = list(member_sources)
    if cascade:
        # kept out of the config's hash (see confighash.UNHASHED_KEYS): another budget resumes the folder
        config["llm_budget"] = llm_budget
    earlier = run_config_file(out / "config.json")
    service = RunService(out, config, reporter, quiet, allow_failures, side_pass=plan_only)
    before_the_folder()
    if cascade:  # what --allow-failures gives, in the advice of a run that stops on failures too
        service.failed_items_note = CASCADE_FAILED_NOTE
        service.failed_items_note_of = frozenset(model_backed)
    if (
        earlier is not None
        and service.resumed
        and not plan_only
        and earlier["config"].get("llm_budget") != config.get("llm_budget")
    ):
        # config.json now says this budget: an earlier budget's files, kept through a Ctrl-C,
        # sat beside it as if made at this one (an audit); they are written again at the end
        _drop_stack_outputs(out)
    for warning in stray:
        service.warn(warning)
    for name, reason in skipped.items():
        service.warn(f"member {name!r} left out of the stack (--skip-unavailable): {reason}")

    def stop_on_failures(summary: dict[str, Any] | None = None) -> None:
        if service.failures and not allow_failures and not plan_only:
            # A stack needs every item: what an earlier invocation's stack wrote (perhaps under
            # --allow-failures, on members since re-run) is no longer this run's, so it goes, as a
            # language with failed items gets no prediction file: its files, and its val scores.
            _drop_stack_outputs(out)
            service.finish(summary or {})  # raises RunFailed
        elif service.failures and not allow_failures:  # a plan: the finished run's files stay
            service.finish({})  # raises RunFailed

    reads = member_sources if member_sources is not None else sources
    for name, det in dets.items():
        if name in costly:
            continue  # the cascade sends them the items it chooses
        its = reads if name in model_backed else sources
        service.detect_split(det, "test", out / "members" / name, langs, its, data=test_data)
        service.detect_split(det, "val", out / "members" / name / "val", val_langs, its, data=val_data)
    stop_on_failures()
    if cascade:
        from mushroom.runs.cascade import CascadeJob

        job = CascadeJob(service, dets, costly, out, test_data, val_data, llm_budget)
        # the sources only the model-backed members read: generated for the items sent
        own = None
        if member_sources is not None:
            own = tuple(name.removesuffix(OPTIONAL) for name in reads if name not in sources)
        return _finish_cascade(
            job, reporter, langs, val_langs, reads, skipped, stop_on_failures, plan_only, own
        )
    # A cascade's records in this folder (an earlier run with --llm-budget) are not this run's.
    (out / "cascade.jsonl").unlink(missing_ok=True)
    (out / "cascade-plan.jsonl").unlink(missing_ok=True)
    shutil.rmtree(out / "cascade", ignore_errors=True)
    # The job knows this invocation's failures itself (it stopped above unless --allow-failures).
    member_list = [Member(name, out / "members" / name, allow_failures=True) for name in members]

    model, comparison, val_files = _fit_stage(service, out, members, member_list, val_data)
    files = _apply_stage(service, reporter, out, members, member_list, model, test_data)
    title = "val: each detector, their vote and the stack (5-fold CV by item)"
    _submit_and_score(
        service, reporter, out, files, val_files, val_data, comparison, members, model, title, skipped
    )
    return out


def _fit_stage(
    service: RunService,
    out: Path,
    members: tuple[str, ...],
    member_list: list[Member],
    val_data: dict[str, list],
) -> tuple[StackModel, dict[str, Any], dict[str, Path]]:
    """The stack fitted on val (out of fold), or the last fit's when its inputs are unchanged.

    Returns:
        The stack, the val comparison table's data, and each val language's out-of-fold file.
    """
    from mushroom.combine.stack import StackModel, fit_stack, stack_fingerprint
    from mushroom.data.jsonl import read_json_model

    # Fit on val, unless the members' val files are those of the last fit.
    val_inputs = [p for name in members for p in (out / "members" / name / "val").glob("**/*.jsonl")]
    val_inputs = [p for p in val_inputs if "items" not in p.parts]
    # The stack's own fingerprint covers its code and settings, the members' files and the items.
    fit_settings = {"stack": stack_fingerprint(member_list, val_data, "val")}
    val_files = {lang: out / "val" / submission_name(lang, "val") for lang in val_data}
    fit_outputs = [out / "stack.json", out / "val" / "comparison.json", *val_files.values()]
    t0 = time.perf_counter()
    if service.reusable("stack-fit", val_inputs, fit_settings, fit_outputs):
        model = read_json_model(out / "stack.json", StackModel)
        comparison = service.read_json(out / "val" / "comparison.json")
        service.record_stage("stack-fit", 0.0, reused=True)
    else:
        hint = (
            f"the stack was being fitted: every member's run is saved in {out / 'members'}; run the "
            "same command again to resume (only the stack is fitted again)"
        )
        with interrupt_hint(hint):
            fit = fit_stack(member_list, val_data, "val")
        model, comparison = fit.model, fit.comparison
        write_json(out / "stack.json", model.model_dump(mode="json"))
        for lang, items in val_data.items():
            write_predictions(val_files[lang], fit.oof[lang], items)
        write_json(out / "val" / "comparison.json", comparison)
        service.record_stage(
            "stack-fit",
            time.perf_counter() - t0,
            reused=False,
            fingerprint=fingerprint(val_inputs, fit_settings),
        )

    return model, comparison, val_files


def _apply_stage(
    service: RunService,
    reporter: Reporter,
    out: Path,
    members: tuple[str, ...],
    member_list: list[Member],
    model: StackModel,
    test_data: dict[str, list],
) -> list[Path]:
    """The stack applied to test a chunk at a time, or the last run's files when nothing changed.

    Returns:
        The test submission files, one per language.
    """
    from mushroom.data.predictions import load_predictions

    # Apply to test, unless the members' test files and the stack are those of the last run.
    test_inputs = [out / "stack.json"] + [
        p for name in members for p in (out / "members" / name).glob("*.jsonl")
    ]
    test_inputs += [p for name in members for p in channel_files(out / "members" / name / "raw")]
    files = [out / submission_name(lang, "test") for lang in test_data]
    t0 = time.perf_counter()
    apply_settings = {"langs": sorted(test_data)}
    if service.reusable("stack-apply", test_inputs, apply_settings, files):
        for path in files:
            load_predictions(path)  # still a readable file
        service.record_stage("stack-apply", 0.0, reused=True)
    else:
        # a chunk of items at a time, so a large test split is never held whole
        from mushroom.combine.stack.stream import iter_apply_stack
        from mushroom.runs.stack import write_stack_files

        counts: dict[str, int] = {}
        chunks = iter_apply_stack(model, member_list, "test", test_data, warn=service.warn)
        write_stack_files(_count_emptied(chunks, counts), out, "test")
        service.record_stage(
            "stack-apply",
            time.perf_counter() - t0,
            reused=False,
            fingerprint=fingerprint(test_inputs, apply_settings),
            emptied=counts,
        )
    emptied = service.stages.get("stack-apply", {}).get("emptied")
    if getattr(model, "empty_rule", None) is not None and emptied is not None:
        total = sum(len(items) for items in test_data.values())
        where = ", ".join(f"{lang} {n}" for lang, n in sorted(emptied.items()) if n)
        reporter.message(
            f"the empty rule emptied the hard labels of {sum(emptied.values())} of {total} test answers"
            + (f" ({where})" if where else "")
        )
    return files


def _count_emptied(chunks: Iterable[StackChunk], counts: dict[str, int]) -> Iterator[StackChunk]:
    """The chunks, passed on; `counts` gets each language's items the empty rule emptied."""
    for chunk in chunks:
        counts[chunk.lang] = counts.get(chunk.lang, 0) + len(chunk.emptied)
        yield chunk


def _submit_and_score(
    service: RunService,
    reporter: Reporter,
    out: Path,
    files: list[Path],
    val_files: dict[str, Path],
    val_data: dict[str, list],
    comparison: dict[str, dict[str, dict[str, float]]],
    members: tuple[str, ...],
    model: Any,
    title: str,
    skipped: dict[str, str],
    extra: dict[str, Any] | None = None,
) -> None:
    """The stack job's end: zip the test files, report and score val, write summary.json."""
    from mushroom.combine.stack import stack_behind

    zip_path = service.submit(files, out / "submission.zip")
    if zip_path is not None:
        reporter.message(f"wrote {plural(len(files), 'checked submission file')} and {zip_path}")
    for lang, items in val_data.items():
        write_predictions(out / "val" / "mark-all" / submission_name(lang, "val"), mark_all(items), items)
    reporter.table(Table(title, kind="systems", data=comparison))
    if getattr(model, "gate", None):
        reporter.message(model.gate_summary())
    advice = "`--detector {best}` runs it alone"
    if set(val_data) < set(VAL_LANGUAGES):  # --lang fitted it on a few languages' 50 items each
        n = sum(len(items) for items in val_data.values())
        advice += (
            f"; or run without --lang: the stack is then fitted on every val language, not only "
            f"{', '.join(sorted(val_data))} ({n} items), and the test files are written for all 14"
        )
    for warning in stack_behind(comparison, members, advice):
        service.warn(warning)
    baseline_files = {lang: out / "val" / "mark-all" / p.name for lang, p in val_files.items()}
    rows = service.score(
        "val",
        val_files,
        out / "val",
        "stack on val (out-of-fold, scored from the written files)",
        baseline_files,
        members={name: out / "members" / name / "val" for name in members},
    )
    service.finish(
        {
            "test_files": [p.name for p in files],
            "zip": zip_path.name if zip_path else None,
            "hard_labels_from": {"default": model.hard_from, **model.hard_sources},
            "val_iou_mean": sum(r["iou"] for r in rows) / len(rows),
            "val_cor_mean": sum(r["cor"] for r in rows) / len(rows),
            **({"skipped_members": skipped} if skipped else {}),
            **(extra or {}),
        }
    )


def _finish_cascade(
    job: CascadeJob,
    reporter: Reporter,
    langs: list[str] | None,
    val_langs: list[str],
    member_sources: tuple[str, ...],
    skipped: dict[str, str],
    stop_on_failures: Any,
    plan_only: bool = False,
    own_sources: tuple[str, ...] | None = None,
) -> Path:
    """The stack job as a cascade (`mushroom.runs.cascade`): written, zipped and scored like the stack."""
    from mushroom.runs.cascade import plan_only_report, run_cascade

    if plan_only:
        plan_only_report(job, own_sources)
        return job.out
    result = run_cascade(job, langs, val_langs, member_sources, stop_on_failures, own_sources or ())
    service, dets, costly, out, budget = job.service, job.dets, job.costly, job.out, job.budget
    test_data, val_data = job.test_data, job.val_data
    val_files = {lang: out / "val" / submission_name(lang, "val") for lang in val_data}
    for lang, items in val_data.items():
        write_predictions(val_files[lang], result.val[lang], items)
    files = [out / submission_name(lang, "test") for lang in test_data]
    for path, (lang, items) in zip(files, test_data.items()):
        write_predictions(path, result.test[lang], items)
    write_json(out / "val" / "comparison.json", result.comparison)
    spent = result.summary["cascade"]
    # out of fold, not "5-fold": the member stack has as many folds as items sent, up to 5
    title = (
        f"val: the cascade (budget {budget:g}: {spent['val']['sent']} of "
        f"{spent['val']['sent'] + spent['val']['kept']} items sent to {', '.join(costly)}), out of fold"
    )
    failed = spent["test"]["failed"] + spent["val"]["failed"]
    kept = (
        f"{failed} of the items sent failed and keep the CPU stack's prediction, as the items not sent do"
        if failed
        else "the rest keep the CPU stack's prediction"
    )
    reporter.message(
        f"{spent['test']['sent']} test and {spent['val']['sent']} val items went to {', '.join(costly)} "
        f"({spent['sent_this_run']} sent by this run); {kept} (each item's rank and reason: "
        f"{out / 'cascade.jsonl'})",
        lead="cascade:",
    )
    members = tuple(name for name in dets if name not in costly)
    _submit_and_score(
        service,
        reporter,
        out,
        files,
        val_files,
        val_data,
        result.comparison,
        members,
        result.model,
        title,
        skipped,
        result.summary,
    )
    return out


def run_main(
    out: Path | None = None,
    detector: str = "lexical",
    options: dict[str, Any] | None = None,
    sources: tuple[str, ...] = DEFAULT_SOURCES,
    langs: list[str] | None = None,
    with_val: bool = True,
    quiet: bool = False,
    reporter: Reporter | None = None,
    allow_failures: bool = False,
) -> Path:
    """Writes the test submission (14 files + zip) and scores the same detector on val.

    Returns:
        The run folder, which holds config.json, versions.json, the submission files,
        submission.zip, and val/ with predictions, the mark-all baseline and scores.
    """
    reporter = reporter or PlainReporter()
    before_the_folder = _until_the_folder(out)
    det = build(detector, options)
    with model_flag_as("-o backend.model=NAME"):  # main-job has no --model
        det.check_ready(source_names(sources), out)
    test_data = load_split("test", langs)  # bad languages stop before the run folder is made
    check_sources("test", sorted(test_data), sources)  # and unknown context sources
    stray = stray_contexts("test", test_data, sources)
    if with_val and (val_langs := _val_langs(langs)):
        check_sources("val", val_langs, sources)
    out = out or new_run_folder(workspace() / "submissions", f"{timestamp()}-{detector}")
    config = {
        "job": "main",
        **det.describe(),
        "sources": list(sources),
        "langs": langs,
        "with_val": with_val,
        **made_from(None, (), sources),
    }
    service = RunService(out, config, reporter, quiet, allow_failures)
    before_the_folder()
    for warning in stray:
        service.warn(warning)
    test = service.detect_split(det, "test", out, langs, sources, data=test_data)
    zip_path = service.submit(list(test.files.values()), out / "submission.zip")
    if zip_path is not None:
        reporter.message(f"wrote {plural(len(test.files), 'checked submission file')} and {zip_path}")
    summary: dict[str, Any] = {
        "test_files": {k: str(v.relative_to(out)) for k, v in test.files.items()},
        "test_contexts_missing": test.contexts_missing,
        "zip": zip_path.name if zip_path else None,
    }
    if with_val:
        val_langs = _val_langs(langs)
        if val_langs:
            val = service.detect_split(
                det, "val", out / "val", val_langs, sources, baseline_dir=out / "val" / "mark-all"
            )
            baseline_files = {lang: out / "val" / "mark-all" / p.name for lang, p in val.files.items()}
            rows = service.score(
                "val",
                val.files,
                out / "val",
                f"{detector} on val (scored from the written files)",
                baseline_files,
            )
            if rows:
                summary["val_iou_mean"] = sum(r["iou"] for r in rows) / len(rows)
                summary["val_cor_mean"] = sum(r["cor"] for r in rows) / len(rows)
    service.finish(summary)
    return out

"""One `contexts` run: the tiers checked, then every language of a split generated and counted.

The command line only parses and prints; what a run of context generation checks, builds and
counts is here, so a script gets the same checks and the same per-language counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mushroom.data.contexts import (
    DEFAULT_CONTEXT_DIR,
    DEFAULT_MIN_SIMILARITY,
    GRADES_SUFFIX,
    OPTIONAL,
    available_sources,
    context_file,
    grades_file,
    is_fact_check,
    skipped_where_missing,
    stray_contexts,
)
from mushroom.data.records import Item
from mushroom.errors import DataError, MushroomError, Problem
from mushroom.util import folderlock
from mushroom.util.interrupts import interrupt_hint
from mushroom.util.names import safe_name
from mushroom.util.words import plural, suggest

GRADINGS = ("none", "llm", "embedding")
COLUMNS = ["lang", "items", "from tiers", "done before", "generated", "failed", "kept", "dropped"]


@dataclass
class ContextsRun:
    """What a run did: a row of counts per language, and what went wrong."""

    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    unread: int = 0
    """LLM gradings that said neither relevant nor irrelevant (those contexts were kept)."""
    unread_files: list[Path] = field(default_factory=list)
    """The grades files that hold those verdicts, one per language that has some."""
    truncated: int = 0
    """Generated contexts cut off at max_tokens (kept as they are)."""
    from_cache: int = 0
    """Generated contexts whose answers the response cache held (asked for in an earlier run)."""
    cache: Path | None = None
    made_otherwise: list[str] = field(default_factory=list)
    """`lang: N contexts ... made with ...` for each language whose contexts done before were
    made with other settings."""
    failed: list[str] = field(default_factory=list)
    """`lang: id: error` of each context that could not be generated."""
    retried: str | None = None
    """The attempts sent again and the requests that saved (`retry_note`), or None."""
    warnings: list[str] = field(default_factory=list)
    """Tier files with contexts for ids the split does not have (`stray_contexts`)."""


def parse_tiers(
    tiers: str, split: str, data: dict[str, list[Item]], root: Path, source: str = "llm"
) -> tuple[str, ...]:
    """The tier sources of `--tiers`, each with a file for some language (`?`-optional ones aside).

    A fact-check source covers no item (it repeats the answer to correct it), so it is refused.
    """
    tier_list = tuple(t.strip() for t in tiers.split(",") if t.strip())
    from mushroom.data.contexts import check_source_name, source_names

    try:
        source_names(tier_list)  # one named twice was graded, and counted, twice
        for tier in tier_list:
            check_source_name(tier)
    except MushroomError as exc:
        raise MushroomError(f"--tiers: {exc}") from None
    for tier in tier_list:
        if is_fact_check(tier):
            raise MushroomError(
                f"--tiers: {tier!r} is a fact-check source (it repeats the answer to correct it); "
                "it covers no item, so it cannot be a tier"
            )
        if tier.removesuffix(OPTIONAL).endswith(GRADES_SUFFIX):
            raise MushroomError(
                f"--tiers: {tier!r} is the file of another source's grades, not a source of contexts"
            )
        if tier.removesuffix(OPTIONAL) == source:
            raise MushroomError(f"--tiers: {tier!r} is the source being generated (--source), not a tier")
        name = tier.removesuffix(OPTIONAL)
        if skipped_where_missing(tier, root):
            continue  # used where it has a file
        if not any(context_file(split, code, name, root) for code in data):
            have = sorted({s for code in data for s in available_sources(split, code, root)})
            raise MushroomError(
                f"--tiers: no context files for source {name!r} ({split}) in {root} (--context-dir)"
                + (", in no split or language: misspelt?" if tier.endswith(OPTIONAL) else "")
                + suggest(name, have, "available")
            )
    return tier_list


def _only(
    data: dict[str, list[Item]], only: dict[str, set[str]], asked: bool, plan: Path | None
) -> dict[str, list[Item]]:
    """The items of `data` that `only` names, in their split's order; unknown ids are refused.

    A language the plan does not cover is refused when `--lang` asked for it (`asked`), and
    left out otherwise: the plan was made for some languages. `plan` is the file `only` was
    read from, named in the errors: its ids or languages not in this split are a data error.
    """
    where = str(plan) if plan is not None else "--cascade"
    missing = [lang for lang in data if lang not in only]
    if asked and missing:
        raise MushroomError(
            f"--cascade: the plan has no items of {', '.join(missing)}; it covers {', '.join(sorted(only))}"
        )
    kept = {lang: [it for it in items if it.id in only[lang]] for lang, items in data.items() if lang in only}
    for lang, ids in only.items():
        if lang not in data:
            if not asked:
                raise DataError([Problem(where, None, "lang", f"{lang!r} is no language of this split")])
            continue
        unknown = sorted(ids - {it.id for it in kept[lang]})
        if unknown:
            message = (
                f"the plan sends {plural(len(unknown), 'item')} in {lang} that this split does not have "
                f"(e.g. {unknown[0]}): it was made on other data"
            )
            raise DataError([Problem(where, None, "id", message)])
    return kept


def generate_split(
    split: str,
    langs: list[str] | None,
    backend: dict[str, Any],
    source: str = "llm",
    tiers: str = "",
    prompt: str = "context_generation",
    topic: bool = False,
    grade: str = "none",
    min_similarity: float = DEFAULT_MIN_SIMILARITY,
    max_tokens: int = 512,
    limit: int | None = None,
    context_dir: Path | None = None,
    only: dict[str, set[str]] | None = None,
    only_from: Path | None = None,
    on_call: Callable[[str], None] | None = None,
    on_batch: Callable[[str, int], None] | None = None,
) -> ContextsRun:
    """Generates contexts for the items of a split's languages that no tier covers (resumable).

    `only` (language -> ids), when given, limits the run to those items and languages: those a
    cascade sends to its model-backed members (`mushroom.combine.cascade.planned_ids`).

    With a `grade`, tier contexts are graded too and fall through (`mushroom.retrieval.generate`).

    Every model call is recorded in CONTEXT_DIR/.raw/ and every answer cached in
    CONTEXT_DIR/.cache.<source>.jsonl, so a run that stopped goes on where it stopped.

    `on_call(lang)` is called as each model call of a language ends, and `on_batch(lang, n)` as
    n calls are sent at once (a progress bar: the calls an item needs depend on its grades, so
    the total is known a batch at a time).
    """
    from pydantic import ValidationError

    from mushroom.backends.base import retry_note
    from mushroom.backends.cache import build_cached
    from mushroom.backends.config import parse_backend_config
    from mushroom.backends.rawlog import RawLog, RecordingBackend
    from mushroom.data.splits import load_split
    from mushroom.retrieval.generate import generate_contexts, generation_prompt
    from mushroom.util.options import validation_message

    if split == "test-labeled":  # its items are test's: contexts made for test serve its runs
        raise MushroomError(
            "--split test-labeled holds the test items: make their contexts with --split test; runs of "
            "test-labeled read them (made here, they would hide those and be paid for twice)"
        )
    if grade not in GRADINGS:
        raise MushroomError(f"--grade {grade!r} is no grading" + suggest(grade, list(GRADINGS), "gradings"))
    root = context_dir or DEFAULT_CONTEXT_DIR
    generation_prompt(prompt)  # a prompt that does not exist stops the command before any folder
    whole = load_split(split, langs)
    data = _only(whole, only, langs is not None, only_from) if only is not None else whole
    tier_list = parse_tiers(tiers, split, data, root, source)
    # a tier file of another language or version of the items covered nothing, and every
    # item was generated (and paid for) with nothing said
    strays = stray_contexts(split, whole, tier_list, root, "--tiers")  # a tier file is of the whole split
    # a required tier covers nothing where it has no file
    for tier in (t for t in tier_list if not t.endswith(OPTIONAL)):
        bare = [code for code in data if not context_file(split, code, tier, root)]
        if bare:
            strays.append(
                f"--tiers: {tier} has no {split} file for {', '.join(bare)}: their items are all generated "
                f"(write {tier}? to say that is meant)"
            )
    cache = root / f".cache.{source}.jsonl"
    try:
        settings = parse_backend_config(backend)
    except ValidationError as exc:  # a setting of the kind: each named, as `detect` names them
        raise MushroomError(validation_message(exc, "backend: ").replace("\n", "; ")) from None
    except ValueError as exc:  # an unknown kind (with a suggestion), or no kind
        raise MushroomError(f"--backend: {exc}") from None
    # Checked with a cache too: a mistyped --model ran on a folder with one, recording the
    # wrong name (a server that cannot be reached passes, so cached answers still serve).
    settings.check_ready()
    settings.check_answers()  # contexts are written answers
    if root.exists() and not root.is_dir():
        raise MushroomError(f"--context-dir {root} is a file; give a folder (made if missing)")
    root.mkdir(parents=True, exist_ok=True)
    warnings: list[str] = []
    # two commands on one folder wrote every id twice to its sources, and both exited 0
    with folderlock.holding(root, "--context-dir", warnings.append):
        sink: list[RawLog | None] = [None]
        current = [""]  # the language being generated, for `on_call`
        tick = (lambda: on_call(current[0])) if on_call is not None else None
        sent = (lambda n: on_batch(current[0], n)) if on_batch is not None else None
        engine = RecordingBackend(build_cached(settings, True, cache), lambda: sink[0], tick, sent)
        # a verdict neither relevant nor irrelevant keeps the context; graded tiers fall through
        falls = grade != "none" and bool(tier_list)
        graded = grade != "none"
        run = ContextsRun(
            COLUMNS
            + ["tier rejections"] * falls
            + ["kept unread"] * (grade == "llm")
            + ["no usable context"] * graded,
            cache=cache,
            warnings=strays + warnings,
        )
        hint = (
            f"a language's contexts are appended to {root}/{split}.<lang>.{source}.jsonl once all its "
            f"answers are in, and every answer to {cache} as it comes (neither file exists before the "
            "first); run the same command again to go on (answers received are not asked again)"
        )
        with interrupt_hint(hint):
            for code, items in data.items():
                stem = f"{split}.{safe_name(code, 'language code')}.{safe_name(source, 'context source')}"
                sink[0] = RawLog(root / ".raw" / f"{stem}.jsonl")
                current[0] = code
                st = generate_contexts(
                    split,
                    code,
                    items[:limit] if limit is not None else items,
                    engine,
                    source,
                    tier_list,
                    prompt,
                    topic,
                    grade,  # type: ignore[arg-type]
                    None,
                    min_similarity,
                    root,
                    max_tokens=max_tokens,
                )
                counts = [st.items, st.covered_by_tiers, st.already_generated, st.generated]
                counts += [st.failed, st.kept, st.dropped] + [st.tier_rejected] * falls
                counts += [st.unreadable_verdicts] * (grade == "llm")
                counts += [st.without_context] * graded
                run.unread += st.unreadable_verdicts
                if st.unreadable_verdicts:
                    run.unread_files.append(grades_file(root / f"{stem}.jsonl"))
                run.warnings += st.cut_lines
                if st.asked_otherwise:
                    n = len(st.asked_otherwise)
                    run.warnings.append(
                        f"{code}: {plural(n, 'context')} done before in {stem}.jsonl "
                        f"{'was' if n == 1 else 'were'} generated for another question (the item's "
                        f"model_input has changed since: {', '.join(st.asked_otherwise[:3])}"
                        f"{', ...' if n > 3 else ''}); kept, as the source only grows: delete "
                        f"{'its line' if n == 1 else 'their lines'} to generate again"
                    )
                run.truncated += st.truncated
                run.from_cache += st.from_cache
                if st.made_otherwise:
                    run.made_otherwise.append(
                        f"{code}: {plural(st.made_otherwise_count, 'context')} done before in {stem}.jsonl "
                        f"{'was' if st.made_otherwise_count == 1 else 'were'} made with {st.made_otherwise}"
                        " (kept as they are: the source only grows)"
                        + (
                            f", and the {plural(st.generated, 'context')} made now with this command's, "
                            "so the source mixes both"
                            if st.generated
                            else ""
                        )
                    )
                run.rows.append([code, *counts])
                run.failed += [f"{code}: {err}" for err in st.errors]
        run.retried = retry_note(engine.retry_tally())
    return run

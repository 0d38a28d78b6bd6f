"""Background contexts per item, read from context files.

Two layouts are understood (`LAYOUTS`, a registry: a layout of your own can be added):
- the UCSC release in contexts/ucsc/: `<lang>-<val|tst>.v<N>_<source>.jsonl`, and its
  `<lang>-<split>-translated-English...` twins (name those sources `translated:<source>`);
- mushroom's own files: `contexts/<split>.<lang>.<source>.jsonl` (generated contexts).

A source named with a trailing `?` is optional: used where a file exists, skipped without a
word elsewhere. A source whose name starts with `qa_` is a fact-check: its text was written
by a search model that saw the answer ("... in 1984, not 2008"), so it repeats the answer's
errors in order to correct them. The lexical, semantic, NLI and P("Yes") detectors never
count a fact-check as support (see `support_contexts`); the lexical detector reads it for
what it corrects (`check_*` channels); `llm` and `chain` prompts show it under its source
name. A context file of your own whose name starts with `qa_` is read as a fact-check too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mushroom.data.jsonl import iter_json_lines, load_records, refuse_irregular
from mushroom.data.records import Context, ContextRecord, Item
from mushroom.data.splits import IN_CHECKOUT, OR_ITEMS, PROJECT_ROOT, SPLIT_TAGS
from mushroom.errors import DataError, MushroomError
from mushroom.util.names import name_problem
from mushroom.util.registry import Part, Registry
from mushroom.util.words import plural

_HERE = PROJECT_ROOT / "contexts" if IN_CHECKOUT else Path.cwd() / "contexts"
DEFAULT_CONTEXT_DIR = Path(os.environ.get("MUSHROOM_CONTEXT_DIR") or _HERE)
# The fact-check source exists for English only (val and test): optional.
DEFAULT_SOURCES = ("perplexity-sonar-pro", "deepseek-r1", "qa_perplexity-sonar-pro?")
NO_CONTEXTS = "none"  # `--contexts none`: no context on purpose (an empty value is a mistake)


def none_on_purpose(names: str | Sequence[str]) -> bool:
    """Whether a list of source names (or the option's text) says "no contexts", on purpose.

    One test for the option, the config's list and --member-contexts, so the spelling that
    means none cannot drift between them.
    """
    listed = [names] if isinstance(names, str) else list(names)
    return [name.strip() for name in listed] == [NO_CONTEXTS]


def no_source_problem(needed_by: str) -> str:
    """What an empty list of context sources is told, when `needed_by` reads contexts.

    An unset variable in a script (`--contexts "$CTX"`, `contexts = []`) ran every item against
    nothing and exited 0, with one warning: the detector's predictions were worthless.
    """
    return (
        f"names no source, and {needed_by} checks answers against contexts; name one or more (the "
        f"default: {','.join(DEFAULT_SOURCES)}), or give `--contexts {NO_CONTEXTS}` (in a config, "
        f'["{NO_CONTEXTS}"]) to run with none on purpose (it flags nothing)'
    )


# The cosine to the question below which `--grade embedding` calls a context irrelevant
DEFAULT_MIN_SIMILARITY = 0.3
GRADES_SUFFIX = ".grades"  # `<split>.<lang>.<source>.grades.jsonl`: contextgen's decisions, not a source
OPTIONAL = "?"
FACT_CHECK_PREFIX = "qa_"


def source_names(sources: tuple[str, ...] | list[str], files: list[Path] | None = None) -> list[str]:
    """The names contexts carry as `Context.source`: a source without its `?`, a file's stem.

    Raises:
        MushroomError: a source (or file) is named twice; its contexts would count twice in
            every vote over sources.
    """
    names = (
        [path.stem for path in files] if files is not None else [n.removesuffix(OPTIONAL) for n in sources]
    )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice and files is not None:
        # two files, one name: a context carries its file's stem, so their votes would be one
        same = [str(path) for path in files if path.stem in twice]
        raise MushroomError(
            f"context files {', '.join(same)} share the name {twice[0]!r}, which their contexts carry "
            "as their source; rename one (or give one of them) to keep them apart"
            if len({Path(p).resolve() for p in same}) > 1
            else f"context file {same[0]} is given twice: give each context file once"
        )
    if twice:
        raise MushroomError(f"context source {', '.join(twice)} named twice: give each context source once")
    return names


def is_fact_check(source: str) -> bool:
    """Whether a source's texts were written with the answer in view (see the module docstring)."""
    return source.removeprefix("translated:").removesuffix(OPTIONAL).startswith(FACT_CHECK_PREFIX)


def support_contexts(contexts: list[Context]) -> list[Context]:
    """The contexts that may support an answer: non-empty and not fact-checks."""
    return [c for c in contexts if c.text.strip() and not is_fact_check(c.source)]


def grades_file(source_file: Path) -> Path:
    """The grades `mushroom contexts` keeps beside a source file it wrote."""
    return source_file.with_name(f"{source_file.name.removesuffix('.jsonl')}{GRADES_SUFFIX}.jsonl")


def graded_unusable(source_file: Path) -> set[str]:
    """Ids that a grading left with no usable context, from the grades beside `source_file`.

    Read by `mushroom contexts` (to count them) and by a run that finds those items bare (to
    say why): an item missing from a source looks alike whether nothing was asked or every
    context for it was graded irrelevant, and the fix differs.
    """
    path = grades_file(source_file)
    if not path.is_file():
        return set()
    return {
        str(row["id"])
        for _, row in iter_json_lines(path, [])
        if isinstance(row, dict) and row.get("no_usable_context") and "id" in row
    }


def fact_checks(contexts: list[Context]) -> list[Context]:
    """The non-empty fact-check contexts."""
    return [c for c in contexts if c.text.strip() and is_fact_check(c.source)]


class OwnFiles:
    """mushroom's own files: `contexts/<split>.<lang>.<source>.jsonl` (generated contexts)."""

    @staticmethod
    def split_names(split: str) -> tuple[str, ...]:
        """The split names whose own files serve `split`, its own first.

        test-labeled holds the test items: contexts generated for test serve it too (they had
        to be generated, and paid for, a second time).
        """
        return (split, "test") if split == "test-labeled" else (split,)

    @staticmethod
    def find(root: Path, split: str, lang: str, source: str) -> Path | None:
        for name in OwnFiles.split_names(split):
            path = root / f"{name}.{lang}.{source}.jsonl"
            if path.is_dir():  # it was "no context file for source 'x' ... did you mean 'x'?"
                raise MushroomError(f"context source {source!r}: {path} is a folder, expected a file")
            refuse_irregular(path)  # a named pipe, as a folder, was "no context file ... did you mean"
            if path.is_file():
                return path
        return None

    @staticmethod
    def sources(root: Path, split: str | None, lang: str | None) -> set[str]:
        found = set()
        names = OwnFiles.split_names(split) if split else ()
        globs = [f"{name}.{lang}.*.jsonl" for name in names] if split and lang else ["*.*.*.jsonl"]
        for path in (path for pattern in globs for path in root.glob(pattern)):
            if path.name.startswith("."):  # contextgen's response cache, `.cache.<source>.jsonl`
                continue
            source = path.name.removesuffix(".jsonl").split(".", 2)[2]
            if not source.endswith(GRADES_SUFFIX):  # the grading record beside a generated source
                found.add(source)
        return found


class UCSCRelease:
    """The UCSC release in `contexts/ucsc/`: `<lang>-<val|tst>.v<N>_<source>.jsonl`.

    Its `<lang>-<split>-translated-English...` twins are the sources named `translated:<source>`.
    """

    @staticmethod
    def find(root: Path, split: str, lang: str, source: str) -> Path | None:
        tag = SPLIT_TAGS.get(split, split)
        translated = source.startswith("translated:")
        name = source.removeprefix("translated:")
        middle = f"{lang}-{tag}-translated-English" if translated else f"{lang}-{tag}"
        pattern = re.compile(rf"{re.escape(middle)}\.v(\d+)_{re.escape(name)}\.jsonl")
        hits = [
            (int(m.group(1)), path)
            for path in (root / "ucsc").glob(f"{middle}.v*_{name}.jsonl")
            if (m := pattern.fullmatch(path.name))
        ]
        return max(hits)[1] if hits else None  # the latest version

    @staticmethod
    def sources(root: Path, split: str | None, lang: str | None) -> set[str]:
        found = set()
        pattern = f"{lang}-{SPLIT_TAGS.get(split, split)}*.jsonl" if split and lang else "*.jsonl"
        for path in (root / "ucsc").glob(pattern):
            stem = path.name.removesuffix(".jsonl")
            source = stem.split("_", 1)[1] if "_" in stem else stem
            found.add(f"translated:{source}" if "-translated-English" in stem else source)
        return found


LAYOUTS: Registry[Any] = Registry(
    "context layout",
    [Part("own", "mushroom.data.contexts:OwnFiles"), Part("ucsc", "mushroom.data.contexts:UCSCRelease")],
)
"""How context files are named, tried in order (own files first): each layout has
`find(root, split, lang, source) -> Path | None` and `sources(root, split, lang) -> set[str]`
(split and lang None: any). A retrieval dump named another way is read by registering a
layout of its own (`@LAYOUTS.register("mine")` on such a class)."""


def _layouts() -> list[Any]:
    return [LAYOUTS.load(name) for name in LAYOUTS.ordered()]


def context_file(split: str, lang: str, source: str, context_dir: Path | None = None) -> Path | None:
    """The file holding `source` contexts for a split and language, or None."""
    root = context_dir or DEFAULT_CONTEXT_DIR
    for layout in _layouts():
        path = layout.find(root, split, lang, source)
        if path is not None:
            return path
    return None


def available_sources(split: str, lang: str, context_dir: Path | None = None) -> list[str]:
    """Every source with a file for this split and language."""
    root = context_dir or DEFAULT_CONTEXT_DIR
    return sorted(set().union(*(layout.sources(root, split, lang) for layout in _layouts())))


def exists_anywhere(source: str, context_dir: Path | None = None) -> bool:
    """Whether any split or language has a file for `source` (a misspelled optional source has none)."""
    root = context_dir or DEFAULT_CONTEXT_DIR
    return any(source in layout.sources(root, None, None) for layout in _layouts())


def shadowed_source(source: str, context_dir: Path | None = None) -> Path | None:
    """Where `source` already lives in a layout read after mushroom's own files, or None.

    A generated source of that name (`contexts --source deepseek-r1`) would be read in place
    of the release's, by every run that names the source, with nothing to say so.
    """
    root = context_dir or DEFAULT_CONTEXT_DIR
    for name in LAYOUTS.ordered():
        if name == "own":
            continue
        layout = LAYOUTS.load(name)
        if source in layout.sources(root, None, None):
            return root / name if (root / name).is_dir() else root
    return None


@dataclass
class ContextSet:
    """Contexts of one split and language, by item id, with what was missing."""

    by_id: dict[str, list[Context]] = field(default_factory=dict)
    missing: dict[str, int] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)


class MissingSource(MushroomError):
    """A named context source has no file for a split and language (and is not optional)."""


def check_source_name(source: str) -> None:
    """Refuses a source name that cannot be part of a file name (`translated:` and `?` aside).

    A name picks a file: `--contexts /../../x` read one outside the contexts folder.
    """
    problem = name_problem(source.removesuffix(OPTIONAL).removeprefix("translated:"))
    if problem is not None:
        raise MushroomError(f"context source {problem}")


def skipped_where_missing(named: str, context_dir: Path | None = None) -> bool:
    """Whether a named source is optional (`x?`) and skipped where it has no file.

    Not when no split or language has one: a typo. The default sources are skipped anyway,
    for contexts folders of one's own. `detect` and `contexts --tiers` ask the same.
    """
    return named.endswith(OPTIONAL) and (
        named in DEFAULT_SOURCES or exists_anywhere(named.removesuffix(OPTIONAL), context_dir)
    )


# The advice to give items and context files by path, which only `detect` takes: a run config
# has no --items, and `without_items_advice` takes these out of what it says.
_FILES_WITH_ITEMS = ", or give the items with --items ITEMS.jsonl, where --contexts takes files"
_OWN_WITH_ITEMS = "give your own with `--items ITEMS.jsonl --contexts FILE.jsonl`"


def without_items_advice(message: str) -> str:
    """A source error's message without the `--items` advice, for a command that has no --items."""
    return (
        message.replace(OR_ITEMS, "")
        .replace(_FILES_WITH_ITEMS, "")
        .replace(f", or {_OWN_WITH_ITEMS}", "")
        .replace(f"{_OWN_WITH_ITEMS}, or make", "make")
    )


def source_path(
    split: str,
    lang: str,
    named: str,
    sources: tuple[str, ...] | list[str] = (),
    context_dir: Path | None = None,
) -> Path | None:
    """The file of one named source, or None where an optional one is skipped.

    Raises:
        MissingSource: the source has no file here; the message names close sources.
    """
    source = named.removesuffix(OPTIONAL)
    if not source.removeprefix("translated:"):
        raise MushroomError(f"empty context source name in {', '.join(map(repr, sources or [named]))}")
    root = context_dir or DEFAULT_CONTEXT_DIR
    if "/" in source or source.endswith(".jsonl"):
        # said "cannot name a file", or "no context file for source 'mine.jsonl'", as if files
        # were not taken at all (an audit)
        raise MushroomError(
            f"context source {source!r} cannot name a file: with a split, contexts are named sources, files "
            f"{split}.<lang>.<source>.jsonl in {root} (or $MUSHROOM_CONTEXT_DIR); copy it there as "
            f"{split}.{lang}.mine.jsonl and give `mine`{_FILES_WITH_ITEMS}"
        )
    check_source_name(source)
    path = context_file(split, lang, source, context_dir)
    if path is not None:
        return path
    if skipped_where_missing(named, context_dir):
        return None
    from mushroom.util.words import suggest

    have = available_sources(split, lang, context_dir)
    if not root.is_dir():  # "it has none" of a folder that is not there (an installed package's)
        hint = (
            ": that folder does not exist; set MUSHROOM_CONTEXT_DIR to a folder of contexts (a "
            f"checkout's contexts/ holds the released ones), or {_OWN_WITH_ITEMS}"
        )
    elif have:
        hint = suggest(source, have, "available")
    else:
        hint = f"; it has none for {split} {lang}: {_OWN_WITH_ITEMS}, or make them with `mushroom contexts`"
    typo = (
        ", nor for any split or language: the '?' skips a missing file, not a misspelt name"
        * named.endswith(OPTIONAL)
    )
    raise MissingSource(f"no context file for source {source!r} ({split}, {lang}) in {root}{typo}{hint}")


def check_sources(split: str, langs: list[str], sources: tuple[str, ...] | list[str]) -> None:
    """Raises what `load_contexts` would for any of the languages, before a run starts."""
    source_names(sources)  # a source named twice is refused
    for named in sources:
        check_source(split, langs, named, sources)


def stray_contexts(
    split: str,
    data: Mapping[str, Iterable[Item]],
    sources: tuple[str, ...] | list[str],
    context_dir: Path | None = None,
    flag: str = "--contexts",
) -> list[str]:
    """Warnings for named sources whose files hold contexts for ids no item of the split has.

    A file of another language or split, or of another version of the items, gave some items
    (or none) their contexts while the others read another source's: the scores moved, unsaid.
    `data` is the whole split of each language: the ids of items a run leaves out (--limit, a
    cascade) are the file's own.
    """
    said = []
    names = {named.removesuffix(OPTIONAL) for named in sources}
    for lang, items in data.items():
        order = [item.id for item in items]  # read once: `items` may be a stream
        ids = set(order)
        foreign: list[tuple[Path, str]] = []  # files of contexts none of which is for these items
        blank: list[tuple[Path, str]] = []  # files with no context for them but blank ones, or none at all
        read = False  # whether some file has a context for one of them
        for named in sources:
            source = named.removesuffix(OPTIONAL)
            path = context_file(split, lang, source, context_dir)
            if path is None:
                continue
            # a graded `contexts` source holds the contexts it chose of its tiers (`"tier"`, which
            # the record drops: taken as the file is read): read beside them, those count twice,
            # and the ones it graded irrelevant are read all the same
            tiers: set[object] = set()

            def note_tier(_: int, row: dict, tiers: set[object] = tiers) -> dict:
                tiers.add(row.get("tier") if isinstance(row, dict) else None)
                return row

            records = load_records(path, ContextRecord, prepare=note_tier)
            theirs = [r.id for r in records]
            stray = [i for i in theirs if i not in ids]
            filled = any(r.id in ids and r.context.strip() for r in records)
            read = read or filled
            # empty beside its grades: `contexts` graded every item's context irrelevant (context.none)
            if (not filled and len(stray) < len(theirs)) or (not theirs and not grades_file(path).exists()):
                what = (
                    "an empty file (no grades file beside it says its items were graded irrelevant)"
                    if not theirs
                    else f"only blank contexts for the items of {split}/{lang}"
                )
                blank.append((path, what))
                said.append(f"{split}/{lang}: context source {source!r} ({path}) holds {what}: none is read")
            named_too = sorted(t for t in tiers if isinstance(t, str) and t in names and t != source)
            if named_too:
                said.append(
                    f"{split}/{lang}: context source {source!r} holds the contexts it chose of its tiers "
                    f"{', '.join(map(repr, named_too))}, named here too: their contexts count twice, and "
                    f"those it graded irrelevant are read; give --contexts {source} alone"
                )
            if theirs and len(stray) == len(theirs):
                foreign.append((path, theirs[0]))
            if stray:
                what = (
                    "none is"
                    if len(stray) == len(theirs)
                    else f"{len(stray)} {'is' if len(stray) == 1 else 'are'} not"
                )
                said.append(
                    f"{split}/{lang}: context source {source!r} ({path}) has "
                    f"{plural(len(theirs), 'context')}, and {what} for an item of {split}/{lang} "
                    f"(e.g. {stray[0]!r}); those are not read: a file of another split, language or "
                    "version of the items?"
                )
        # read as no context at all: every item unchecked (a tier's items are generated instead,
        # as where it has no file: said above)
        if blank and not foreign and not read and flag != "--tiers":
            path, what = blank[0]
            raise DataError.single(path, None, None, f"{what}, so no item would read a context ({flag})")
        if foreign and not read:
            # the run went on, every item unchecked, and scored "nothing wrong" (as --items refuses)
            raise MushroomError(
                f"{flag} {', '.join(str(path) for path, _ in foreign)}: none of its ids is the id "
                f"of an item of {split}/{lang} (items: {order[0] if order else '-'!r}, ...; contexts: "
                f"{foreign[0][1]!r}, ...), so no item would read a context from it: a file of another "
                "split, language or version of the items?"
            )
    return said


def check_source(split: str, langs: list[str], named: str, sources: tuple[str, ...] | list[str]) -> None:
    """Raises what `load_contexts` would for one of `sources` in any of the languages."""
    for lang in langs:
        source_path(split, lang, named, sources)


def load_contexts(
    split: str,
    lang: str,
    sources: tuple[str, ...] | list[str] = DEFAULT_SOURCES,
    item_ids: list[str] | None = None,
    context_dir: Path | None = None,
    allow_missing_source: bool = False,
) -> ContextSet:
    """Loads every named source; contexts keep the order of `sources`.

    Args:
        split: "val" or "test".
        lang: language code.
        sources: source names, in order of preference; a trailing `?` makes one optional.
        item_ids: when given, counts the items each source lacks.
        context_dir: the contexts folder (default: the project's contexts/).
        allow_missing_source: skip a source with no file instead of failing.
    """
    source_names(sources)  # a source named twice is refused
    result = ContextSet()
    for named in sources:
        source = named.removesuffix(OPTIONAL)
        try:
            path = source_path(split, lang, named, sources, context_dir)
        except MissingSource:
            if not allow_missing_source:
                raise
            result.missing[source] = len(item_ids or [])
            continue
        if path is None:
            continue
        result.files[source] = str(path)
        records = load_records(path, ContextRecord)
        texts = {r.id: r.context for r in records}
        for rid, text in texts.items():
            result.by_id.setdefault(rid, []).append(Context(source=source, text=text))
        if item_ids is not None:
            result.missing[source] = sum(1 for i in item_ids if i not in texts)
    return result


def load_context_files(paths: list[Path], item_ids: list[str] | None = None) -> ContextSet:
    """Contexts from explicit files (`{"id", "context"}` per line); each file is one source."""
    result = ContextSet()
    for path in paths:
        records = load_records(path, ContextRecord)
        result.files[path.stem] = str(path)
        texts = {r.id: r.context for r in records}
        for rid, text in texts.items():
            result.by_id.setdefault(rid, []).append(Context(source=path.stem, text=text))
        if item_ids is not None:
            result.missing[path.stem] = sum(1 for i in item_ids if i not in texts)
    return result

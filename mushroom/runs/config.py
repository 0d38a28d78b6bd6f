"""Run configs (TOML, YAML or JSON files in configs/): validated, unknown keys rejected.

A config names one detector with its options, the splits and languages, and optionally a
list of `variants`: each is a set of option overrides (a prompt file, temperatures, ...)
run on the same items with the same model, into its own folder of the run; LLM responses
are cached in one file shared by the variants, so a request two variants share is sent
once. After the variants, a comparison table against the first variant (95% CIs, paired
p-values) is printed and written to eval/ as Markdown and CSV.

A main-job config (`job = "main"`, `mushroom main-job --config FILE`) is the other kind: the
stack's members with their options, the languages, the contexts and the cascade's budget,
what main-job's flags say, kept in a file so that a cascade on a served model is one
reviewed file rather than a dozen `-o` flags.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, field_validator

from mushroom.data.contexts import DEFAULT_SOURCES, none_on_purpose
from mushroom.data.jsonl import refuse_irregular
from mushroom.data.languages import language_code
from mushroom.data.splits import LABELLED_SPLITS, load_split, same_items, workspace
from mushroom.detectors.prompts import PromptError, find_prompt
from mushroom.errors import DataError, MissingExtra, MushroomError, Problem, did_you_mean, model_flag_as
from mushroom.runs.reporter import PlainReporter, Reporter, Table
from mushroom.util.config_lines import with_lines
from mushroom.util.names import valid_name
from mushroom.util.options import error_message, field_errors, given_value, merge_options
from mushroom.util.words import plural

if TYPE_CHECKING:
    from mushroom.runs.service import SplitOutput


class DetectorSection(BaseModel):
    """Which detector, with its options (validated by the detector itself)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    options: dict[str, Any] = Field(default_factory=dict)


# What `mushroom run` writes at the top of a folder beside its variants' folders (`execute`)
VARIANT_RUN_FILES = frozenset(
    "config.json versions.json stages.json summary.json failures.jsonl responses.cache.jsonl".split()
)


class Variant(BaseModel):
    """One prompt variant: a name and the detector options it overrides."""

    model_config = ConfigDict(extra="forbid")

    name: str
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _a_folder_name(cls, value: str) -> str:
        # the variant's folder inside the run's: "." and ".." were accepted, and ".." wrote
        # its val/ and test/ beside the run folder
        valid_name(value, "a variant name")
        # "config.json" ran every variant but one, then failed on a path that is a file
        if value.lower() in VARIANT_RUN_FILES:
            raise ValueError(
                f"a variant name may not be {value!r}: the run keeps a file of its own by that name "
                "beside the variants' folders; give another name"
            )
        return value


class RunConfig(BaseModel):
    """A whole run: splits, languages, contexts, the detector and its variants."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    # `splits = []` ran nothing and exited 0; `limit = true` ran one item
    splits: list[str] = Field(default_factory=lambda: ["val"], min_length=1)

    langs: list[str] | None = Field(None, min_length=1)
    limit: StrictInt | None = Field(None, ge=1, description="only the first N items of each language")
    contexts: list[str] = Field(default_factory=lambda: list(DEFAULT_SOURCES))
    detector: DetectorSection
    variants: list[Variant] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _part_of_a_file_name(cls, value: str) -> str:
        # It ends the default run folder's name and the variants' comparison files in eval/,
        # after a time stamp: any text stays in its folder there but a path separator or a
        # control character ("my lexical run" is fine; "../x" wrote beside eval/).
        fits = value.strip() and len(value.encode()) <= 150 and value.isprintable()
        if not fits or "/" in value or "\\" in value:
            raise ValueError(
                f"a run name {value[:60]!r} must be printable text of at most 150 bytes, without '/' or '\\'"
            )
        return value

    @field_validator("limit", mode="before")
    @classmethod
    def _a_number_not_text(cls, value: Any) -> Any:
        # as an option's quoted number is told (`_detector_problems`): pydantic's words were
        # "Input should be a valid integer (got '3')", which hides what to write
        if isinstance(value, str) and value.strip().isdigit():
            raise ValueError(f"{value!r} is text, not a number: write {value.strip()} without quotes")
        if isinstance(value, bool):
            raise ValueError(f"give a number of items, not {str(value).lower()}")
        return value

    @field_validator("splits")
    @classmethod
    def _once_each(cls, value: list[str]) -> list[str]:
        twice = sorted({split for split in value if value.count(split) > 1})
        if twice:  # it ran twice and printed its table twice
            raise ValueError(f"a split is named twice: {', '.join(twice)}")
        return value

    @field_validator("detector", mode="before")
    @classmethod
    def _a_name_alone(cls, value: Any) -> Any:
        # `detector = "lexical"` was told "valid dictionary or instance of DetectorSection"
        return {"name": value} if isinstance(value, str) else value

    @field_validator("variants")
    @classmethod
    def _unique(cls, value: list[Variant]) -> list[Variant]:
        if not value:  # it ran as a plain run, without a word
            raise ValueError("an empty list runs no variant: leave `variants` out for a plain run")
        names = [v.name for v in value]
        # "a" and "A" are one folder on macOS and Windows: the second variant overwrote the first
        if len({n.casefold() for n in names}) != len(names):
            raise ValueError(
                f"variant names must be unique (ignoring case: each names a folder), got {names}"
            )
        return value

    def variant_options(self) -> list[tuple[str, dict[str, Any]]]:
        """(name, full detector options) per variant; one unnamed entry without variants."""
        if not self.variants:
            return [("", dict(self.detector.options))]
        return [(v.name, merge_options(self.detector.options, v.options)) for v in self.variants]


MAIN_JOB = "main"  # the `job` key that marks a main-job config


def _default_members() -> list[str]:
    """main-job's default members, read where they are set (importing the job only when needed)."""
    from mushroom.runs.mainjob import DEFAULT_MEMBERS

    return list(DEFAULT_MEMBERS)


class MainJobConfig(BaseModel):
    """The main job as a file: what `mushroom main-job`'s flags say, for the stack (and cascade).

    `options` is keyed by member, each the dict that `-o MEMBER.KEY=VALUE` flags build:
    `[options.llm.backend]` with `base_url = ...` is `-o llm.backend.base_url=...`.
    """

    model_config = ConfigDict(extra="forbid")

    job: Literal["main"] = Field(description='"main": this file is run by `mushroom main-job --config`')
    description: str = ""
    members: list[str] = Field(default_factory=_default_members, min_length=1)
    options: dict[str, dict[str, Any]] = Field(default_factory=dict, description="member -> its options")
    langs: list[str] | None = Field(None, min_length=1, description="languages (default: all 14)")
    # `[]` is refused by main-job when a member reads contexts; `["none"]` means none on purpose
    contexts: list[str] = Field(default_factory=lambda: list(DEFAULT_SOURCES))
    member_contexts: list[str] | None = Field(
        None, min_length=1, description="the contexts the model-backed members read (default: contexts)"
    )
    llm_budget: float | None = Field(
        None, description="share of each language's items the model-backed members see (default: all)"
    )
    # strict: a file's "no" or "false" in quotes is a mistake to name, not a silent False
    allow_failures: StrictBool = False
    skip_unavailable: StrictBool = False

    @field_validator("llm_budget", mode="before")
    @classmethod
    def _no_truth_value(cls, value: Any) -> Any:
        if isinstance(value, bool):  # `llm_budget = true` was read as 1.0: every item sent
            raise ValueError("a share of the items from 0 to 1 (0.3), not true or false")
        if isinstance(value, str):  # "0.1" in quotes was taken, where the run config's refuse it
            raise ValueError(f"a number from 0 to 1 (0.3, no quotes), not the string {value!r}")
        return value

    @field_validator("llm_budget")
    @classmethod
    def _budget(cls, value: float | None) -> float | None:
        from mushroom.combine.cascade import check_budget

        if value is None:
            return None
        try:
            return check_budget(value, "llm_budget")
        except MushroomError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("members")
    @classmethod
    def _once(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"name each detector once, got {value}")
        return value


def read_config_file(path: Path) -> dict[str, Any]:
    """A config file's top-level table (TOML, YAML with PyYAML, or JSON); errors name the file."""
    if path.is_dir():
        raise MushroomError(
            f"config {path} is a folder; give a TOML, YAML or JSON file (e.g. configs/variants.toml)"
        )
    if not path.is_file():
        from mushroom.data.splits import IN_CHECKOUT, PROJECT_ROOT

        there = PROJECT_ROOT / path
        hint = (
            f" (there is {there}: paths are read from the folder you run in)"
            if (IN_CHECKOUT and not path.is_absolute() and there.is_file())
            else ""
        )
        refuse_irregular(path)  # `run <(cat c.toml)` was told "config not found"
        raise MushroomError(f"config not found: {path}{hint}")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError([Problem(str(path), None, None, f"cannot read: {exc}")], exit_code=2) from exc
    try:
        if path.suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise MissingExtra(
                    "YAML configs",
                    "yaml",
                    "yaml",
                    message="YAML configs need PyYAML: pip install pyyaml (or use TOML)",
                ) from None
            try:
                data = yaml.load(text, Loader=_yaml_loader())  # noqa: S506 (a SafeLoader)
            except yaml.YAMLError as exc:  # its own text is six lines with carets: line and what, once
                mark = getattr(exc, "problem_mark", None)
                what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
                where = f" (column {mark.column + 1})" if mark is not None else ""
                line = mark.line + 1 if mark is not None else None
                raise DataError(
                    [Problem(str(path), line, None, f"cannot parse: {what}{where}")], exit_code=2
                ) from None
        elif path.suffix == ".json":
            data = _read_json_config(path, text)
        else:
            data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        # a JSON file named .txt, or none: its "Invalid statement" said nothing of the format
        read_as_toml = path.suffix not in (".toml", ".yaml", ".yml", ".json")
        form = " (read as TOML (configs are .toml, .yaml or .json))" if read_as_toml else ""
        raise DataError([Problem(str(path), None, None, f"cannot parse{form}: {exc}")], exit_code=2) from exc
    if not isinstance(data, dict):
        raise DataError(
            [Problem(str(path), None, None, "expected a table of settings at the top level")], exit_code=2
        )
    return data


def _yaml_loader() -> type:
    """PyYAML's SafeLoader, read as YAML 1.2 reads booleans, refusing a key given twice.

    YAML 1.1 reads unquoted yes/no/on/off as booleans: `langs: [no]` (Norwegian) became False
    and its error showed no "no". A key given twice kept its last value, where TOML refuses
    the file.
    """
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            first: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: merged below, may repeat
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    seen = first.get(key)
                except TypeError:  # a list as a key: the constructor says what is wrong
                    continue
                if seen is not None:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"key {key!r} is given twice (first on line {seen + 1})",
                        key_node.start_mark,
                    )
                first.setdefault(key, key_node.start_mark.line)
            return super().construct_mapping(node, deep)

    bool_tag = "tag:yaml.org,2002:bool"
    Loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != bool_tag]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(
        bool_tag, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
    )
    return Loader


def _read_json_config(path: Path, text: str) -> Any:
    """A JSON config; a key given twice is refused (json keeps the last), as TOML and YAML do."""
    import json

    def refuse_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise DataError([Problem(str(path), None, None, f"key {key!r} is given twice")], exit_code=2)
            out[key] = value
        return out

    try:
        return json.loads(text, object_pairs_hook=refuse_twice)
    except json.JSONDecodeError as exc:
        problem = Problem(str(path), exc.lineno, None, f"cannot parse: {exc.msg} (column {exc.colno})")
        raise DataError([problem], exit_code=2) from None


def _invalid(
    path: Path, exc: ValidationError, table_of: Callable[[tuple], type[BaseModel] | None]
) -> DataError:
    """A config's validation errors, each naming the file and the key (`table_of`: the model a key is in)."""
    return DataError(
        [
            Problem(str(path), None, ".".join(map(str, e["loc"])), _config_message(e, table_of(e["loc"])))
            for e in field_errors(exc.errors())
        ],
        exit_code=2,
    )


def load_run_config(path: Path) -> RunConfig:
    """Reads and validates a config; errors name the file, the offending key and its line."""
    try:
        return _load_run_config(path)
    except DataError as exc:
        raise with_lines(path, exc) from None


def _load_run_config(path: Path) -> RunConfig:
    data = read_config_file(path)
    if data.get("job") == MAIN_JOB:
        raise DataError(
            [
                Problem(
                    str(path),
                    None,
                    "job",
                    f"a main-job config: run it with `mushroom main-job --config {path}`",
                )
            ],
            exit_code=2,
        )
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as exc:
        # every mistake of the file at once: a top-level one hid each detector option's
        error = _invalid(path, exc, _run_config_table)
        raw = _raw_detector_tables(data)
        if raw is not None:
            said = {p.field for p in error.problems}
            more = [p for p in _detector_problems(path, *raw, build_too=False) if p.field not in said]
            error = DataError(error.problems + more, exit_code=2)
        raise error from exc
    from mushroom.data.contexts import no_source_problem, source_names
    from mushroom.data.splits import SPLIT_DIRS, split_hint
    from mushroom.detectors import reads_contexts

    # every mistake of the file at once: a typo'd detector hid the languages' and each bad
    # variant the next one's
    problems = _lang_problems(path, cfg.langs) + [
        Problem(
            str(path),
            None,
            f"splits.{k}",
            f"unknown split {split!r}{split_hint(split, '')}",
        )
        for k, split in enumerate(cfg.splits)
        if split not in SPLIT_DIRS
    ]
    try:
        source_names(cfg.contexts)
    except MushroomError as exc:
        problems.append(Problem(str(path), None, "contexts", str(exc)))
    if not cfg.contexts and reads_contexts(cfg.detector.name):
        problems.append(
            Problem(str(path), None, "contexts", no_source_problem(f"the {cfg.detector.name} detector"))
        )
    if none_on_purpose(cfg.contexts):
        cfg.contexts = []
    variants = [(v.name, v.options) for v in cfg.variants]
    problems += _detector_problems(path, cfg.detector.name, cfg.detector.options, variants, not problems)
    problems.sort(key=lambda p: p.field != "detector.name")  # the rest follow from the detector
    if problems:
        raise DataError(problems, exit_code=2)
    if cfg.langs is not None:
        cfg.langs = [language_code(lang) for lang in cfg.langs]  # as --lang takes it
    problems = _source_problems(
        path, cfg.splits, cfg.langs, cfg.contexts, splits_given="splits" in cfg.model_fields_set
    )
    if problems:
        raise DataError(problems, exit_code=2)
    return cfg


def _raw_detector_tables(data: dict[str, Any]) -> tuple[str, dict, list[tuple[str, dict]]] | None:
    """The detector's name and options and each variant's, from a config that failed to validate.

    None where the [detector] table itself is malformed (its own error says so).
    """
    det = data.get("detector")
    det = {"name": det} if isinstance(det, str) else det
    if not isinstance(det, dict) or not isinstance(det.get("name"), str):
        return None
    options = det.get("options", {})
    variants = data.get("variants", [])
    if not isinstance(options, dict) or not isinstance(variants, list):
        return None
    # a variant is named by its name, as the run's folders are; by its place where it has none
    kept = [
        (str(v.get("name", k)), v.get("options", {})) for k, v in enumerate(variants) if isinstance(v, dict)
    ]
    return det["name"], options, [(n, o) for n, o in kept if isinstance(o, dict)]


def _unquoted(text: str) -> str:
    """What a quoted number (or list of numbers) is written as: `0.1,0.2` is the list [0.1, 0.2].

    "write 0.1,0.2 without quotes" made the config file invalid TOML.
    """
    parts = [p.strip() for p in re.split(r"[,\s]+", text.strip().strip("[]")) if p.strip()]
    return f"[{', '.join(parts)}]" if len(parts) > 1 else text.strip()


def _option_key(field: str) -> str:
    """The option a problem's field names below its options table: `variants.few.options.x` -> `.x`."""
    return re.sub(r"^(detector|variants\..*?)\.options(?=\.|$)", "", field)


def _detector_problems(
    path: Path, name: str, options: dict, variants: list[tuple[str, dict]], build_too: bool = True
) -> list[Problem]:
    """The detector's name, its options table's and each variant's, each with its key.

    With `build_too` (nothing else wrong), each variant's detector is built as the run would
    build it: what only that finds (a prompt file without {{answer}}) is named with its table.
    """
    from mushroom.detectors import detector_class

    try:
        cls = detector_class(name)
    except MushroomError as exc:
        return [Problem(str(path), None, "detector.name", str(exc))]
    checks = [("detector.options", options)]
    checks += [(f"variants.{k}.options", merge_options(options, own)) for k, own in variants]
    problems = []
    for where, given in checks:
        # a variant may supply an option the detector's table leaves out
        problems += _option_problems(path, where, cls, given, where == "detector.options" and bool(variants))
    # a variant's options are the table's with its own on top: the table's mistake is said once.
    # Only the table's problems are the base: a variant's own mistake said of its whole options
    # (`variants.c.options`, "threshold: give a number, not true") matched itself and was dropped.
    base = {
        (_option_key(p.field), p.message) for p in problems if p.field and p.field.startswith("detector.")
    }
    problems = [
        p
        for p in problems
        if not (p.field and p.field.startswith("variants.") and (_option_key(p.field), p.message) in base)
    ]
    if problems or not build_too:
        return problems
    for where, given in checks[1:] if variants else checks:
        try:  # not `build`: a backend package this machine lacks is the run's to say, not the file's
            cls(cls.Options.model_validate(given))
        except DataError as exc:  # a file the detector reads (a prompt), with its own place
            problems += exc.problems
        except PromptError as exc:  # said of `options` alone, the user looked for the prompt's key
            # a variant's prompt is its own key, or the detector table's it inherits (said once)
            own = dict(variants).get(where.removeprefix("variants.").removesuffix(".options"), given)
            field = _prompt_key(where, own, exc.path)
            if field == where and where != "detector.options":
                field = _prompt_key("detector.options", options, exc.path)
            problem = Problem(str(path), None, field, str(exc))
            if problem not in problems:
                problems.append(problem)
        except MushroomError as exc:
            problems.append(Problem(str(path), None, where, str(exc)))
    return problems


def _is_prompt_key(name: str) -> bool:
    """Whether a detector option names a prompt file (`prompt`, `decompose_prompt`, ...)."""
    return name == "prompt" or name.endswith("_prompt")


def _prompt_key(where: str, options: dict[str, Any], prompt_path: str | None) -> str:
    """The key of `options` (`prompt`, `verify_prompt`) that names the prompt file at `prompt_path`."""
    for name, value in options.items():
        if _is_prompt_key(name) and isinstance(value, str):
            found = find_prompt(value)
            if found is not None and prompt_path is not None and str(found) == prompt_path:
                return f"{where}.{name}"
    return where


def _source_problems(
    path: Path,
    splits: list[str],
    langs: list[str] | None,
    sources: list[str],
    key: str = "contexts",
    split_key: str | None = "splits",
    splits_given: bool = True,
) -> list[Problem]:
    """A context source of the config that has no file for a language of a split it runs on.

    Said with the file and the key (`contexts.0`), as the config's other mistakes are; the
    run would stop on it too, naming only the source. A split folder that is missing is said
    of `splits.N` where the file names its splits, else of the file (the default split).
    """
    from mushroom.data.contexts import check_source, without_items_advice
    from mushroom.data.splits import split_files

    problems = []
    has: dict[str, list[str]] = {}  # a split's languages, read once: val lacks the test-only ones
    for j, split in enumerate(splits):
        try:
            has[split] = sorted(split_files(split))
        except MushroomError as exc:  # said once, of the split: it was said of each source
            if split_key is None:  # the config names no splits: the data folder is at fault
                raise
            field = f"{split_key}.{j}" if splits_given else None  # `splits.0` blamed a key not written
            problems.append(Problem(str(path), None, field, without_items_advice(str(exc))))
    for k, named in enumerate(sources):
        for split in (split for split in splits if split in has):
            try:
                run_on = [x for x in langs if x in has[split]] if langs is not None else has[split]
                check_source(split, run_on, named, sources)
            except MushroomError as exc:
                problems.append(Problem(str(path), None, f"{key}.{k}", without_items_advice(str(exc))))
                break
    return problems


def _run_config_table(loc: tuple) -> type[BaseModel] | None:
    """The table a run config's key is in: the top level, [detector] or one [[variants]]."""
    if len(loc) == 3 and loc[0] == "variants":
        return Variant
    return {0: RunConfig, 1: DetectorSection if loc[0] == "detector" else None}.get(len(loc) - 1)


def _config_message(err: dict, table: type[BaseModel] | None) -> str:
    """A config error's message; an unknown key names the close one it may be a typo of."""
    if err["type"] != "extra_forbidden":
        return error_message(err) + given_value(err)
    loc = err["loc"]
    names = list(table.model_fields) if table is not None else []
    return (
        "unknown key" + did_you_mean(str(loc[-1]), names) + (f"; valid: {', '.join(names)}" if names else "")
    )


def _option_problem(path: Path, where: str, cls, err: dict) -> Problem:
    """A detector option error in a config, with a close match for a misspelt name."""
    msg = error_message(err) + given_value(err)
    if err["type"] == "extra_forbidden":
        from mushroom.detectors import other_detectors_option

        names = list(cls.Options.model_fields)
        key = str(err["loc"][-1])
        owned = other_detectors_option(key, cls.name) if len(err["loc"]) == 1 else ""
        msg = "unknown option" + did_you_mean(key, names) + owned
        msg += f"; valid: {', '.join(names)}"
    return Problem(str(path), None, ".".join([where, *map(str, err["loc"])]), msg)


def _numbers_only(annotation: Any) -> bool:
    """Whether an option takes only numbers (or a list of them), so a quoted one is a mistake."""
    import types
    from typing import Annotated, Union, get_args, get_origin

    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _numbers_only(args[0])
    if origin in (Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        return bool(kinds) and all(_numbers_only(a) for a in kinds)
    if origin is list:
        return _numbers_only(args[0])
    return annotation in (int, float)


def _option_problems(
    path: Path, where: str, cls, options: dict[str, Any], skip_missing: bool = False
) -> list[Problem]:
    """Every problem of a detector's options table in a config file, each with its key.

    A yes/no option written in quotes (`channels = "no"`) is one: pydantic reads the text "no"
    or "false" as False, so the file ran with a setting its author may not have meant; the
    top-level ones (`allow_failures`) are refused for the same reason.
    """
    problems = []
    try:
        cls.Options.model_validate(options)
    except ValidationError as exc:
        errors = field_errors(exc.errors())
        if skip_missing:
            errors = [e for e in errors if e["type"] != "missing"]
        problems += [_option_problem(path, where, cls, e) for e in errors]
    from mushroom.detectors.prompts import prompt_missing

    for name, value in options.items():  # a prompt that finds no file stopped the run unplaced
        if _is_prompt_key(name) and name in cls.Options.model_fields:
            if isinstance(value, str) and find_prompt(value) is None:
                own = getattr(cls, "shipped_prompts", None) if name == "prompt" else None
                problems.append(Problem(str(path), None, f"{where}.{name}", prompt_missing(value, own)))
    for name, info in cls.Options.model_fields.items():
        given = options.get(name)
        said = any(p.field is not None and p.field.startswith(f"{where}.{name}") for p in problems)
        if _numbers_only(info.annotation) and not said:  # what pydantic took: "abc" it refuses itself
            # as the top level's `limit = "5"` is: `threshold = "0.5"` was read as 0.5
            places = [(f".{k}", x) for k, x in enumerate(given)] if isinstance(given, list) else [("", given)]
            problems += [
                Problem(
                    str(path),
                    None,
                    f"{where}.{name}{at}",
                    f"{x!r} is text, not a number: write {_unquoted(x)} without quotes",
                )
                for at, x in places
                if isinstance(x, str)
            ]
        if info.annotation in (bool, bool | None) and isinstance(given, str):
            said = given
            problems.append(
                Problem(
                    str(path),
                    None,
                    f"{where}.{name}",
                    f"{said!r} is text, not yes/no: write true or false (no quotes; YAML reads a bare "
                    "no or off as text too)",
                )
            )
    return problems


def load_main_job_config(path: Path) -> MainJobConfig:
    """Reads and validates a main-job config; errors name the file, the key and its line.

    Beyond the keys' types: every member is a detector, every `options` table is a
    member's and holds that detector's options (checked by the detector's own model, so a
    misspelt option names the close one), and every language is a Mu-SHROOM one.
    """
    try:
        return _load_main_job_config(path)
    except DataError as exc:
        raise with_lines(path, exc) from None


def _load_main_job_config(path: Path) -> MainJobConfig:
    from mushroom.detectors import detector_class

    data = read_config_file(path)
    if data.get("job") != MAIN_JOB:
        hint = " (a [detector] table: a run config, for `mushroom run`)" if "detector" in data else ""
        raise DataError(
            [Problem(str(path), None, "job", f'a main-job config says job = "main" at the top{hint}')],
            exit_code=2,
        )
    try:
        cfg = MainJobConfig.model_validate(data)
    except ValidationError as exc:
        raise _invalid(path, exc, lambda loc: MainJobConfig if len(loc) == 1 else None) from exc
    problems = []
    classes = {}
    for k, name in enumerate(cfg.members):
        try:
            classes[name] = detector_class(name)
        except MushroomError as exc:
            problems.append(Problem(str(path), None, f"members.{k}", str(exc)))
    for name, options in cfg.options.items():
        if name not in cfg.members:
            problems.append(
                Problem(
                    str(path),
                    None,
                    f"options.{name}",
                    f"{name!r} is not a member{did_you_mean(name, list(classes))}; "
                    f"members: {', '.join(cfg.members)}",
                )
            )
        elif name in classes:
            problems += _option_problems(path, f"options.{name}", classes[name], options)
    problems += _lang_problems(path, cfg.langs)
    if problems:
        raise DataError(problems, exit_code=2)
    if cfg.langs is not None:
        cfg.langs = [language_code(lang) for lang in cfg.langs]  # files say "EN", as --lang takes it
    return cfg


def check_config_sources(
    path: Path, splits: list[str], langs: list[str] | None, sources: list[str], key: str = "contexts"
) -> None:
    """A DataError naming the file and `contexts.N` (`key`.N) for a source of a config that has no file.

    The main job calls it once the command line's flags are merged (a `--contexts` or
    `--lang` given there wins over the file's).
    """
    problems = _source_problems(path, splits, langs, sources, key, split_key=None)
    if problems:
        raise with_lines(path, DataError(problems, exit_code=2))


def _lang_problems(path: Path, langs: list[str] | None) -> list[Problem]:
    """An unknown language in a config's `langs`, named with the file and its place in the list."""
    from mushroom.data.languages import LANGUAGES

    known = ", ".join(LANGUAGES)
    codes = [language_code(lang) for lang in langs or []]
    return (
        [
            Problem(
                str(path),
                None,
                f"langs.{k}",
                f"unknown language {lang!r}{did_you_mean(lang.lower(), LANGUAGES)}; one of {known}",
            )
            for k, (lang, code) in enumerate(zip(langs or [], codes))
            if code not in LANGUAGES
        ]
        + [  # "en" and "EN" are one language: it was run once, the second silently dropped
            Problem(str(path), None, f"langs.{k}", f"language {langs[k]!r} is named twice")
            for k, code in enumerate(codes)
            if code in codes[:k]
        ]
    )


def execute(
    cfg: RunConfig,
    out: Path | None,
    quiet: bool = False,
    reporter: Reporter | None = None,
    allow_failures: bool = False,
    limit: int | None = None,
    eval_dir: Path | None = None,
) -> Path:
    """Runs every split (and variant) of a config into one run folder; val is scored, test zipped."""
    from mushroom.data.runfolder import made_from, new_run_folder, timestamp
    from mushroom.detectors import build
    from mushroom.runs.service import RunService

    reporter = reporter or PlainReporter()
    limit = limit or cfg.limit
    variants = cfg.variant_options()
    dets = [(name, build(cfg.detector.name, options)) for name, options in variants]
    from mushroom.data.contexts import check_sources, source_names, stray_contexts

    for _, det in dets:
        with model_flag_as("model = NAME in the config's backend"):  # `run` has no --model
            det.check_ready(source_names(cfg.contexts), out)
    # the items are read (a language a split lacks stops the command) before the folder is made,
    # and so are the context sources: an unknown one left config.json and val/raw/ behind
    data = {split: load_split(split, cfg.langs) for split in cfg.splits}
    stray = []
    for split, items in data.items():
        check_sources(split, sorted(items), tuple(cfg.contexts))
        stray += stray_contexts(split, items, cfg.contexts)
    out = out or new_run_folder(workspace() / "runs", f"{timestamp()}-{cfg.name}")
    config = {
        "run_config": cfg.model_dump(mode="json", exclude={"limit"}),
        "limit": limit,
        "variants": [{"name": n, **d.describe()} for n, d in dets],
        **made_from(None, (), cfg.contexts),
    }
    service = RunService(out, config, reporter, quiet, allow_failures)
    for warning in stray:
        service.warn(warning)
    shared_cache = out / "responses.cache.jsonl"
    summary: dict[str, Any] = {"splits": {}}
    val_results: list[tuple[str, SplitOutput]] = []
    for name, det in dets:
        if name and hasattr(det.options, "cache_path") and det.options.cache_path is None:
            det.options.cache_path = str(shared_cache)
        root = out / name if name else out
        for split in cfg.splits:
            folder = root / split
            result = service.detect_split(
                det, split, folder, cfg.langs, tuple(cfg.contexts), data=data[split], limit=limit
            )
            label = f"{cfg.name}{'/' + name if name else ''} on {split}"
            service.report_stats(f"{label}: counts", result.stats.get("all", {}))
            entry = summary["splits"].setdefault(f"{name or cfg.name}/{split}", {})
            entry["items_failed"] = len(result.failures)
            if same_items(split, "test") and limit is not None:
                # the first N items of each language are no submission: `check` refused the zip
                entry["zip"] = None
                reporter.message(
                    f"{label}: no submission.zip, as the run has a limit ({limit} items of each "
                    "language; a submission predicts every item)",
                    lead="note:",
                )
            elif same_items(split, "test"):  # test-labeled's files are test's: a submission as well
                zipped = service.submit(list(result.files.values()), folder / "submission.zip")
                entry["zip"] = str(zipped) if zipped else None
            if split in LABELLED_SPLITS:
                if split == "val":  # variants are compared on val
                    val_results.append((name, result))
                rows = service.score(
                    split, result.files, folder, label, items=result.items if limit else None
                )
                if rows:
                    key = split.replace("-", "_")  # val_iou_mean, test_labeled_iou_mean
                    entry[f"{key}_iou_mean"] = sum(r["iou"] for r in rows) / len(rows)
                    entry[f"{key}_cor_mean"] = sum(r["cor"] for r in rows) / len(rows)
    failed = {f.id for f in service.failures if f.split == "val"}  # test failures score nothing
    prompts = {name: prompt_sources(det) for name, det in dets if det.prompt_templates()}
    if len(dets) > 1 and "val" in cfg.splits and not failed:
        summary["comparison"] = compare_variants(
            val_results, cfg.name, reporter, eval_dir, limit is not None, prompts=prompts
        )
    elif len(dets) > 1 and "val" in cfg.splits and service.allow_failures and val_results:
        # failed items left empty would weigh the failures, not the variants: compared on the
        # items every variant answered (a model that fails the same item every time, as
        # SmolLM2 does, never reached the table); a language left with none is compared in none
        kept = []
        for name, res in val_results:
            items = {lang: [it for it in its if it.id not in failed] for lang, its in res.items.items()}
            items = {lang: its for lang, its in items.items() if its}
            files = {lang: path for lang, path in res.files.items() if lang in items}
            kept.append((name, replace(res, items=items, files=files)))
        n_kept = sum(len(its) for its in kept[0][1].items.values())
        if n_kept:
            reporter.message(
                f"the variants are compared on the {plural(n_kept, 'item')} every variant answered; "
                f"{plural(len(failed), 'item')} failed in at least one of them (listed below)",
                lead="note:",
            )
            # its means are of these items; each split's own (val_iou_mean) scores the failed as empty
            summary["comparison"] = {
                **compare_variants(kept, cfg.name, reporter, eval_dir, True, frozenset(failed), prompts),
                "items_compared": n_kept,
                "items_left_out": len(failed),
            }
        else:
            reporter.message("the variants are not compared: every item failed in one of them", lead="note:")
    elif len(dets) > 1 and "val" in cfg.splits:
        reporter.message(
            f"the variants are not compared: {service.failed_count()} failed (listed below), "
            "and a comparison with failed items left empty would weigh the failures, not the variants; "
            "run the same command again to retry them, or add --allow-failures to compare the variants "
            "on the items every one answered",
            lead="note:",
        )
    elif len(cfg.variants) == 1:
        reporter.message(
            f"one variant ({cfg.variants[0].name}): nothing to compare it with; add a second "
            "[[variants]] table for a comparison",
            lead="note:",
        )
    service.finish(summary)
    return out


def prompt_sources(detector: Any) -> str:
    """A detector's prompts as a reader tells variants apart: name, shipped or the file, sha256."""
    return "; ".join(
        f"{option} {t.name} ({t.source}, sha256 {t.sha256[:12]})"
        for option, t in detector.prompt_templates().items()
    )


def compare_variants(
    runs: list[tuple[str, SplitOutput]],
    name: str,
    reporter: Reporter,
    eval_dir: Path | None,
    limited: bool,
    leave_out: frozenset[str] = frozenset(),
    prompts: dict[str, str] | None = None,
) -> dict[str, str]:
    """Reports the variants against the first (CIs, paired p-values); writes Markdown and CSV.

    `leave_out`: ids of items that failed in some variant, compared on none. `prompts`: each
    variant's prompts, listed above the Markdown table (which names only the variants).
    """
    from mushroom.data.runfolder import timestamp
    from mushroom.evaluation.compare import (
        COLUMNS,
        RunScores,
        comparison_rows,
        rows_csv,
        rows_markdown,
    )
    from mushroom.evaluation.score import ScoreResult
    from mushroom.runs.service import score_file

    scored = []
    for variant, result in runs:
        parts = [
            score_file("val", lang, path, result.items[lang] if limited else None, leave_out)
            for lang, path in sorted(result.files.items())
        ]
        folder = next(iter(result.files.values())).parent
        scored.append(RunScores(variant, folder, ScoreResult.concat(parts)))
    rows = comparison_rows(scored, 0)
    reporter.table(Table(f"variants against {runs[0][0]} (paired by item)", kind="paired", rows=rows))
    folder = eval_dir or workspace() / "eval"
    folder.mkdir(parents=True, exist_ok=True)
    stem = _new_stem(folder, f"variants-{name}-{timestamp()}")
    run_folder = os.path.commonpath([str(r.path) for r in scored])
    listed = "".join(f"- {variant}: {what}\n" for variant, what in (prompts or {}).items())
    _suffixed(stem, ".md").write_text(
        f"# {name}: prompt variants on val\n\nFrom the run {run_folder}.\n\n"
        + (f"Prompts:\n\n{listed}\n" if listed else "")
        + rows_markdown(rows, COLUMNS)
    )
    _suffixed(stem, ".csv").write_text(rows_csv(rows, COLUMNS))
    reporter.message(f"wrote {stem}.md and .csv")
    return {"markdown": str(_suffixed(stem, ".md")), "csv": str(_suffixed(stem, ".csv"))}


def _suffixed(stem: Path, suffix: str) -> Path:
    """`stem` with `suffix` added: `with_suffix` cut a run named `qwen2.5` to `variants-qwen2.md`."""
    return stem.parent / (stem.name + suffix)


def _new_stem(folder: Path, base: str) -> Path:
    """A stem no other table has: two runs in the same second wrote one file, each naming it."""
    for k in range(1, 1000):
        stem = folder / (base if k == 1 else f"{base}-{k}")
        try:
            _suffixed(stem, ".md").open("x").close()  # claimed: a run beside this one takes the next
        except FileExistsError:
            continue
        return stem
    raise MushroomError(f"{folder}: 999 tables named {base}; clear some, or give another --eval-dir")

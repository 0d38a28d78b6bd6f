"""Stack members: the detector runs whose written files the stack reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mushroom.data.channels import channel_file, find_channel_file, read_channels
from mushroom.data.predictions import load_predictions, submission_name
from mushroom.data.records import Item, Prediction
from mushroom.data.runfolder import FailureCheck, prediction_folder, run_scope
from mushroom.errors import DataError, MushroomError
from mushroom.util.files import folder_problem
from mushroom.util.words import no_prediction

MemberEvidence = tuple[Prediction, dict[str, np.ndarray]]  # one item's prediction and channels


# options that say where a run's files are, not how its evidence is made
PATH_OPTIONS = frozenset({"responses", "cache_path"})


def _without_paths(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_paths(v) for k, v in value.items() if k not in PATH_OPTIONS}
    return value


@dataclass
class Member:
    """One detector run: where its prediction files are, per split."""

    name: str
    path: Path
    # The main job's own members: it knows this invocation's failures itself (and stops on
    # them unless --allow-failures), so their files are read as they are.
    allow_failures: bool = False

    def folder(self, split: str) -> Path:
        """The folder with this split's prediction files (main-job, detect and plain layouts)."""
        return prediction_folder(
            self.path,
            split,
            "`stack apply --items ITEMS.jsonl` reads such runs; `stack fit` takes runs of a labelled split",
        )

    def files(self, split: str, lang: str) -> tuple[Path, Path]:
        """(prediction file, channel file) of one language; the channel file may not exist.

        The channel file is the compressed store, or the plain JSONL of runs made before it.
        """
        folder = self.folder(split)
        raw = folder / "raw"
        return folder / submission_name(lang, split), find_channel_file(raw, lang) or channel_file(raw, lang)

    def detector(self) -> str | None:
        """The detector this member's run was made with, from its run's config.json; None if unknown."""
        scope = run_scope(self.path)
        if scope is None:
            return None
        config = scope.config
        if isinstance(config.get("detector"), str):  # detect, main-job with one detector
            return config["detector"]
        run_config = config.get("run_config")
        if isinstance(run_config, dict) and isinstance(run_config.get("detector"), dict):
            name = run_config["detector"].get("name")  # a run config and its variants
            return name if isinstance(name, str) else None
        if config.get("job") == "main" and self.path.parent.name == "members":
            return self.path.name  # a main job's member folder is named after its detector
        return None

    def settings(self) -> dict[str, Any] | None:
        """The detector options and context sources of this member's run; None where it does not say.

        A stack weighs a member's evidence as the fitted run's settings made it: applied to a
        run made with another threshold or calibration, it is given other numbers than it
        learned from, with nothing to say so. Left out: where a run's files are (a replay's
        `responses`, a `cache_path`), which differ between a val and a test run, and the
        sources of a `detect --items` run, which are files of its own.
        """
        scope = run_scope(self.path)
        if scope is None:
            return None
        config = scope.config
        options, sources = None, config.get("sources")
        if isinstance(config.get("detector"), str):  # detect, main-job with one detector
            options = config.get("options")
        elif config.get("job") == "main" and self.path.parent.name == "members":
            for member in config.get("members") or []:
                if isinstance(member, dict) and member.get("detector") == self.path.name:
                    options = member.get("options")
        elif isinstance(config.get("run_config"), dict):  # a run config's variant
            sources = config["run_config"].get("contexts")
            for variant in config.get("variants") or []:
                if isinstance(variant, dict) and variant.get("name") in (self.path.name, ""):
                    options = variant.get("options")
        if not isinstance(options, dict):
            return None
        settings: dict[str, Any] = {"options": _without_paths(options)}
        if config.get("items") is None and isinstance(sources, list):
            settings["sources"] = sources
        return settings

    def check_file(self, path: Path, lang: str) -> None:
        """A MushroomError if the language's prediction file is missing, with the likely reason."""
        if not path.exists():
            scope = run_scope(self.path)
            hint = (
                f"; the member was run with --lang {','.join(scope.langs)}: give the stack the same --lang"
                if scope is not None and scope.langs and lang not in scope.langs
                else ""
            )
            raise MushroomError(f"{path}: missing (member {self.name!r}, language {lang}){hint}")

    def load(self, split: str, lang: str, items: list[Item]) -> tuple[dict[str, Prediction], dict]:
        """Predictions and channels of one language; every item must be predicted."""
        path, chan_path = self.files(split, lang)
        self.check_file(path, lang)
        lengths = {it.id: len(it.model_output_text) for it in items}
        # spans past an answer's end are refused here, as `ensemble` refuses them
        check = FailureCheck(path)  # an edited answer is said before its spans are found too long
        check.refuse_changed_answers(items, f"member {self.name!r}: ")
        preds = load_predictions(path, lengths, other_ids=True)
        found = (
            None
            if self.allow_failures
            else check.check({it.id: preds[it.id] for it in items if it.id in preds})
        )
        if found is not None:
            # written empty by --allow-failures: the stack would learn them as "nothing flagged"
            raise MushroomError(f"member {self.name!r}: {found.message(path)}")
        missing = [it.id for it in items if it.id not in preds]
        if missing:
            scope = run_scope(path)
            hint = (
                f"; {scope.made_with()}, and a stack needs every item: run the member without --limit"
                if scope is not None and scope.partial
                else ""
            )
            # a member short of items is a bad input file (exit 1), as in `score`
            raise DataError.single(path, None, None, f"{no_prediction(missing, total=len(items))}{hint}")
        channels = read_channels(chan_path, lengths) if chan_path.exists() else {}
        check.refuse_lost_channels(lengths, channels, chan_path, f"member {self.name!r}: ")
        return preds, channels


def _member_name_problem(name: str) -> str | None:
    """Why a member name cannot head a table's column or be written in stack.json, or None.

    Looser than a file name: a stack fitted with `llm+ctx` or `lex v2` is applied by the
    same names.
    """
    if name in ("", ".", ".."):
        return f"{name!r} names no member"
    bad = next((c for c in name if c in "|/\\" or not c.isprintable()), None)
    if bad is not None:
        return f"{name!r} holds {bad!r}, which breaks a table or a path"
    return None


def parse_members(specs: list[str]) -> list[Member]:
    """`NAME=PATH` or `PATH` (named after the folder) -> members; names must be unique."""
    out = []
    for k, spec in enumerate(specs):
        name, sep, path = spec.partition("=")
        if not sep:
            path, name = spec, Path(spec).name
        if not path.strip():  # `lexical=` read the current folder as the run
            raise MushroomError(f"member {spec!r}: no run folder after '='; give NAME=RUN_DIR")
        # a name heads a table's column and is written in stack.json: '' made an empty header
        # (and `stack apply =RUN`), 'a|b' broke the Markdown tables
        problem = _member_name_problem(name)
        if problem is not None:
            how = "give another NAME" if sep else "the name is the folder's: name it with NAME=PATH"
            raise MushroomError(f"member name in {spec!r}: {problem}; {how}")
        bare = "/" not in spec or ":" in spec  # a name, or NAME:DIR: not how a folder is given
        if not sep and bare and not Path(spec).exists():
            # `lexical:runs/LEX` and `lexical runs/LEX` were "no val prediction files (looked in
            # lexical/val, ...)", which never said how a member is named (an audit)
            after = specs[k + 1] if k + 1 < len(specs) else None
            named = spec.replace(":", "=", 1) if ":" in spec else f"{spec}={after}" if after else None
            hint = f" ({named}?)" if named and Path(named.partition("=")[2]).exists() else ""
            raise MushroomError(
                f"member {spec!r}: no such folder; a member is RUN_DIR, or NAME=RUN_DIR to name it{hint}"
            )
        out.append(Member(name, Path(path)))
    for member in out:  # every member's folder before any member's files: a later typo was unsaid
        if (problem := folder_problem(member.path)) is not None:
            raise MushroomError(f"member {member.name!r}: {member.path}: {problem}; a member is a run folder")
    names = [m.name for m in out]
    if len(set(names)) != len(names):
        raise MushroomError(f"member names must be unique, got {names}; name them with NAME=PATH")
    from mushroom.detectors import available

    known = set(available())
    for member in out:
        # a member named after a detector is read as that detector's run (its channels, its
        # column in the report); `lexical=SEMANTIC_RUN` reported semantic's score as lexical's
        made_by = member.detector() if member.name in known else None
        if made_by is not None and made_by != member.name:
            raise MushroomError(
                f"member {member.name!r}: {member.path} is a run of the {made_by!r} detector; "
                f"give a {member.name} run, or name it {made_by}={member.path}"
            )
    return out


def load_member_evidence(
    members: list[Member], split: str, data: dict[str, list[Item]]
) -> tuple[list[dict[str, MemberEvidence]], list[dict[str, list[str]]]]:
    """Each member's evidence by item id, and the channel names its files hold per language.

    Per language because a member may write channels for some languages only (the semantic
    member's are English only): what is missing must be judged language by language.
    """
    per_member: list[dict[str, MemberEvidence]] = [{} for _ in members]
    found: list[dict[str, list[str]]] = [{} for _ in members]
    for lang, items in data.items():
        for k, member in enumerate(members):
            preds, chans = member.load(split, lang, items)
            names: set[str] = set()
            for it in items:
                per_member[k][it.id] = (preds[it.id], chans.get(it.id, {}))
                names.update(chans.get(it.id, {}))
            found[k][lang] = sorted(names)
    return per_member, found

"""Prompt templates from files (the user's `prompts/`, then the package's), never strings in code.

A template file has an optional `=== system ===` section and a `=== user ===` section;
placeholders are `{{name}}` (double braces, so JSON examples in a prompt need no escaping).
Every rendered prompt carries the template's name and a hash of its text, which runs record.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mushroom.backends.base import Message
from mushroom.errors import MushroomError, did_you_mean
from mushroom.util.names import name_problem

# Package data, so a wheel install finds the prompts wherever it is run from.
PROMPT_DIR = Path(__file__).resolve().parent.parent / "resources" / "prompts"
# any letters, so that {{Answer}} is named as no placeholder rather than sent as it is
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_]+)\s*\}\}")
_SINGLE_BRACES = re.compile(r"(?<!\{)\{\s*([A-Za-z_]+)\s*\}(?!\})")  # `{context}`: a placeholder mistyped
_LOPSIDED = re.compile(r"\{\{\s*([A-Za-z_]+)\s*\}(?!\})|(?<!\{)\{\s*([A-Za-z_]+)\s*\}\}")  # `{{context}`
_SECTION = re.compile(r"^=== (system|user) ===\s*$", re.M)


# The shipped prompts of other stages, by name: each asks for JSON another parser reads, so
# `llm --prompt decompose` ran, and every reply was unreadable as spans.
STAGE_PROMPTS = {
    "decompose": "chain's decompose step",
    "verify": "chain's verify step",
    "context_generation": "the contexts command's generation",
    "context_grading": "the contexts command's grader",
    "pyes": "the pyes detector's question",
}


class PromptError(MushroomError):
    """A prompt file that cannot serve its stage; `path` is the file, for a config to name its key."""

    def __init__(self, message: str, path: str | None):
        super().__init__(message)
        self.path = path


@dataclass(frozen=True)
class PromptTemplate:
    """A loaded template: name, sha256 of its text, and its sections."""

    name: str
    sha256: str
    system: str | None
    user: str
    shipped: bool = False
    """Whether it is one of the prompts mushroom ships (not a file of the user's own)."""
    path: str = ""
    """The file it was read from, named in its errors when it is the user's own."""
    by_name: bool = False
    """Whether a name found it (`prompts/NAME.md`), not a path given."""

    @property
    def source(self) -> str:
        """Where it was read from, as a run records it: "shipped", or the full path of the user's file."""
        return "shipped" if self.shipped else str(Path(self.path).resolve())

    @property
    def stands_in(self) -> bool:
        """Whether a file of the user's, found by name, stands in for a shipped prompt of that name.

        As the lookup order means; but a forgotten copy in `prompts/` ran in place of the shipped
        prompt, and the run named only the shipped name (an audit).
        """
        return self.by_name and not self.shipped and (PROMPT_DIR / f"{self.name}.md").is_file()

    @property
    def label(self) -> str:
        """How errors name it: its name, and the file for one of the user's own."""
        return repr(self.name) if self.shipped or not self.path else f"{self.name!r} ({self.path})"

    @property
    def placeholders(self) -> set[str]:
        return set(_PLACEHOLDER.findall((self.system or "") + self.user))

    def check(self, values: Iterable[str], required: Iterable[str] = ()) -> None:
        """Raises MushroomError for a placeholder the stage has no value for, or a required one absent.

        Called when a detector is built, so a typo stops the command before a run folder; a
        template may leave out a value it does not need ({{language}}), not the one it is about.
        """
        known = set(values)
        text = (self.system or "") + self.user
        # `{context}` is sent as it is: the model never saw the context, and nothing said so.
        # Beside a real {{context}} it may be meant as it is (a prompt that names the field);
        # `{{context}` or `{context}}` never is.
        lopsided = sorted({name for pair in _LOPSIDED.findall(text) for name in pair if name in known})
        single = sorted({m for m in _SINGLE_BRACES.findall(text) if m in known} - self.placeholders)
        for name in (lopsided or single)[:1]:
            shape = "unmatched braces" if lopsided else "single braces"
            raise PromptError(
                f"prompt {self.label}: its {name} has {shape}, so it is sent as it is and the model "
                f"never sees the {name}: write {{{{{name}}}}}",
                self.path,
            )
        unknown = sorted(self.placeholders - known)
        if unknown:
            first = unknown[0]
            raise PromptError(
                f"prompt {self.label}: {{{{{first}}}}} is no placeholder of this prompt"
                f"{did_you_mean(first.lower(), known)}; its placeholders are "
                + ", ".join(f"{{{{{k}}}}}" for k in sorted(known)),
                self.path,
            )
        for name in sorted(set(required) - self.placeholders):
            raise PromptError(
                f"prompt {self.label} has no {{{{{name}}}}}: the model would never see the {name}",
                self.path,
            )

    def check_not_of_another_stage(self, stage: str, own: Iterable[str]) -> None:
        """Refuses a shipped prompt of another stage (`STAGE_PROMPTS`); `own` lists the stage's.

        A file of the user's own is theirs to name: `myprompts/verify.md` is no chain prompt.
        """
        other = STAGE_PROMPTS.get(self.name) if self.shipped else None
        if other is not None and self.name not in own:
            raise MushroomError(
                f"prompt {self.name!r} is {other}, not a prompt of {stage}; its shipped prompts: "
                + ", ".join(sorted(own))
                + " (or a prompt file of your own)"
            )

    def render(self, **values: str) -> list[Message]:
        """Chat messages with every placeholder filled; values the template does not name are left out."""
        missing = self.placeholders - values.keys()
        if missing:
            raise MushroomError(f"prompt {self.label}: no value for {sorted(missing)}")

        def fill(text: str) -> str:
            return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)

        messages = [Message(role="system", content=fill(self.system))] if self.system else []
        return messages + [Message(role="user", content=fill(self.user))]


def user_prompt_dirs() -> list[Path]:
    """Where a user keeps prompt variants: `prompts/` where mushroom runs, then in the checkout."""
    return [d for d in _looked_in() if d.is_dir()]


def _looked_in() -> list[Path]:
    """The prompt folders a name is looked up in, as `user_prompt_dirs` orders them, existing or not."""
    from mushroom.data.splits import workspace

    dirs = [Path.cwd() / "prompts", workspace() / "prompts"]
    return [d for k, d in enumerate(dirs) if d.resolve() not in [x.resolve() for x in dirs[:k]]]


def prompt_names() -> list[str]:
    """Every prompt a name finds: the user's `prompts/*.md`, then the shipped ones."""
    found = {p.stem for d in [*user_prompt_dirs(), PROMPT_DIR] for p in d.glob("*.md") if p.is_file()}
    return sorted(found - {"README"})


def prompt_missing(name_or_path: str, own: Iterable[str] | None = None) -> str:
    """What to say of a prompt name or path that finds no file: the close name, and the others.

    With `own` (the shipped prompts of the asking stage), the shipped prompts of other stages
    are not offered: the llm detector listed `decompose` and `verify`, then refused them.
    """
    names = prompt_names()
    if own is not None:
        own = set(own)
        users = {p.stem for d in user_prompt_dirs() for p in d.glob("*.md") if p.is_file()}
        names = [n for n in names if n in users or n not in STAGE_PROMPTS or n in own]
    path = Path(name_or_path)
    if path.is_dir():  # was "not found", beside the folder's name in the list
        return f"prompt {name_or_path!r} is a folder; give a prompt file or a prompt's name"
    if len(path.parts) > 1 or path.is_absolute():  # a path, not a name: said where it was read
        cwd = Path.cwd()
        where = "" if path.is_absolute() else f" (a relative path is read from the folder you run in, {cwd})"
        return f"prompt file {name_or_path} not found{where}; prompts by name: {', '.join(names)}"
    return (
        f"prompt {name_or_path!r} not found{did_you_mean(name_or_path, names)}; available: {', '.join(names)}"
        f" (a name is looked up in {' and '.join(str(d) for d in _looked_in())}, then among the "
        "shipped ones; a prompt elsewhere is given by its path)"
    )


def find_prompt(name_or_path: str) -> Path | None:
    """The file a prompt name or path means; None when there is none.

    A path to a file is that file. A name (`single_few_shot`, with or without `.md`) is looked
    up as `prompts/NAME.md` where mushroom runs, then in the checkout, then among the prompts
    shipped in the package, so a wheel install finds those anywhere. A name is a plain file
    stem: one with a separator or `..` finds no prompt folder's file.
    """
    path = Path(name_or_path)
    if path.is_file():
        return path
    stem = name_or_path.removesuffix(".md")
    if name_problem(stem) is not None:
        return None
    for folder in [*user_prompt_dirs(), PROMPT_DIR]:
        candidate = folder / f"{stem}.md"
        if candidate.is_file():
            return candidate
    return None


def load_prompt(name_or_path: str, own: Iterable[str] | None = None) -> PromptTemplate:
    """A template by name (the user's `prompts/NAME.md`, else the shipped one) or by path.

    `own`: the shipped prompts of the stage asking, the only shipped ones a miss offers.
    """
    path = find_prompt(name_or_path)
    if path is None:
        raise MushroomError(prompt_missing(name_or_path, own))
    from mushroom.data.jsonl import read_utf8
    from mushroom.errors import DataError

    try:
        text = read_utf8(path)
    except DataError as exc:  # a setting's file, as a prompt that is not found: exit 2, and a
        # config names its key (`detect` exited 1 and `run` 2 for the same file)
        raise PromptError(f"prompt {path}: {exc.problems[0].message}", str(path)) from None
    parts = _SECTION.split(text)
    sections = {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}
    if "user" not in sections:
        if len(parts) > 1:
            raise PromptError(f"{path}: has sections but no '=== user ===' section", str(path))
        sections = {"user": text.strip()}
    return PromptTemplate(
        name=path.stem,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        system=sections.get("system"),
        user=sections["user"],
        shipped=path.resolve().parent == PROMPT_DIR,
        path=str(path),
        by_name=not Path(name_or_path).is_file(),
    )

"""Prompt templates from files shipped in the package (mushroom/resources/prompts/), never strings in code.

A template file has an optional `=== system ===` section and a `=== user ===` section;
placeholders are `{{name}}` (double braces, so JSON examples in a prompt need no escaping).
Every rendered prompt carries the template's name and a hash of its text, which runs record.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from mushroom.backends.base import Message
from mushroom.errors import MushroomError

# Package data, so a wheel install finds the prompts wherever it is run from.
PROMPT_DIR = Path(__file__).resolve().parent.parent / "resources" / "prompts"
_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")
_SECTION = re.compile(r"^=== (system|user) ===\s*$", re.M)


@dataclass(frozen=True)
class PromptTemplate:
    """A loaded template: name, sha256 of its text, and its sections."""

    name: str
    sha256: str
    system: str | None
    user: str

    @property
    def placeholders(self) -> set[str]:
        return set(_PLACEHOLDER.findall((self.system or "") + self.user))

    def render(self, **values: str) -> list[Message]:
        """Chat messages with every placeholder filled; a missing or unused value is an error."""
        missing = self.placeholders - values.keys()
        unused = values.keys() - self.placeholders
        if missing or unused:
            raise MushroomError(
                f"prompt {self.name!r}: missing values {sorted(missing)}, unknown values {sorted(unused)}"
            )

        def fill(text: str) -> str:
            return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)

        messages = [Message(role="system", content=fill(self.system))] if self.system else []
        return messages + [Message(role="user", content=fill(self.user))]


def load_prompt(name_or_path: str) -> PromptTemplate:
    """A template by name (a shipped prompt file, with or without .md) or by path."""
    path = Path(name_or_path)
    if not path.is_file():
        path = PROMPT_DIR / (name_or_path if name_or_path.endswith(".md") else f"{name_or_path}.md")
    if not path.is_file():
        names = sorted(p.stem for p in PROMPT_DIR.glob("*.md") if p.stem != "README")
        raise MushroomError(f"prompt {name_or_path!r} not found; available: {', '.join(names)}")
    text = path.read_text(encoding="utf-8")
    parts = _SECTION.split(text)
    sections = {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}
    if "user" not in sections:
        if len(parts) > 1:
            raise MushroomError(f"{path}: has sections but no '=== user ===' section")
        sections = {"user": text.strip()}
    return PromptTemplate(
        name=path.stem,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        system=sections.get("system"),
        user=sections["user"],
    )

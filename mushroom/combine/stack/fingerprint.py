"""A fingerprint of everything a stack fit depends on, so a caller can skip an unchanged refit.

Refitting the stack on a finished run folder redid a minute of work whose result could not
have changed. The fingerprint hashes the stack's own code, the member names and order, the
bytes of every member file the fit reads (prediction and channel files of each language),
the labelled items, and the fit's settings: equal fingerprints mean an equal fit.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from mushroom.data.records import Item
from mushroom.util.files import sha256_file

if TYPE_CHECKING:
    from mushroom.combine.stack.fit import StackConfig
    from mushroom.combine.stack.members import Member

_CODE = Path(__file__).resolve().parent
# Code outside the package that computes stack features from the items themselves.
_FEATURE_CODE = [
    _CODE.parents[1] / "text" / name
    for name in ("logits.py", "segment.py", "tokenize.py", "normalize.py", "stopwords.py", "negation.py")
]


def _code_digest() -> str:
    digest = hashlib.sha256()
    for path in [*sorted(_CODE.glob("*.py")), *_FEATURE_CODE]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _file_digest(path: Path) -> str:
    return sha256_file(path) if path.exists() else "missing"


def stack_fingerprint(
    members: list[Member],
    data: dict[str, list[Item]],
    split: str = "val",
    folds: int = 5,
    l2: float = 1.0,
    config: StackConfig | None = None,
    model: str = "blend",
) -> str:
    """Hex digest of the inputs of `fit_stack(members, data, split, folds, l2, config, model)`."""
    parts = {
        "code": _code_digest(),
        "split": split,
        "folds": folds,
        "l2": l2,
        "model": model,
        "config": config.model_dump() if config is not None else None,
        "members": [
            {
                "name": m.name,
                "files": {lang: [_file_digest(p) for p in m.files(split, lang)] for lang in sorted(data)},
            }
            for m in members
        ],
        "items": {
            lang: hashlib.sha256(
                "\n".join(it.model_dump_json(exclude_none=False) for it in items).encode()
            ).hexdigest()
            for lang, items in sorted(data.items())
        },
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

"""How often each member channel carries evidence, so a run that lost some is not applied in silence.

A member run can hold every channel a stack was fitted with and still carry none of their
evidence: the lexical detector writes its `check_*` channels for every item, as zeros where
no fact-check context was read. A corpus run made with `--contexts` files that leave the
`qa_*` file out gave English predictions without the fact-check evidence the stack was
fitted with, and no word of it (val English IoU 0.528 -> 0.499 on copies of the val items).
The fit records, per member, language and channel, the share of items where the channel is
non-zero; applying the stack counts the same and says when a channel the fit saw on most
items is zero on every item of a language.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from mushroom.data.records import Item

MIN_ITEMS = 20  # fewer items of a language say too little: a channel may be zero on all by chance
MIN_SHARE = 0.5  # fitted share above which a channel zero on every item is no chance (< 0.5**20)


@dataclass
class ChannelUse:
    """Per language, items seen and, per (member, channel), the items where it is non-zero."""

    members: list[str]
    channels: list[list[str]]
    items: Counter[str] = field(default_factory=Counter)
    used: dict[str, Counter[tuple[str, str]]] = field(default_factory=dict)

    def add(self, items: Sequence[Item], features: Sequence[np.ndarray]) -> None:
        """Counts a chunk's items; `features` are `item_features` rows, member columns first."""
        for item, feats in zip(items, features):
            self.items[item.lang] += 1
            used = self.used.setdefault(item.lang, Counter())
            if not len(feats):
                continue
            width = sum(2 + len(chans) for chans in self.channels)
            nonzero = np.any(feats[:, :width] != 0, axis=0)
            pos = 0
            for member, chans in zip(self.members, self.channels):
                for j, chan in enumerate(chans):
                    used[(member, chan)] += bool(nonzero[pos + 2 + j])
                pos += 2 + len(chans)

    def shares(self) -> dict[str, dict[str, dict[str, float]]]:
        """Member -> language -> channel -> share of the language's items where it is non-zero."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for member, chans in zip(self.members, self.channels):
            for lang, n in self.items.items():
                counts = self.used.get(lang, Counter())
                out.setdefault(member, {})[lang] = {c: round(counts[(member, c)] / n, 4) for c in chans}
        return out

    def lost(self, fitted: dict[str, dict[str, dict[str, float]]]) -> list[str]:
        """One warning per member and language: channels the fit saw on most items, here on none."""
        notes = []
        for member, chans in zip(self.members, self.channels):
            for lang, n in sorted(self.items.items()):
                if n < MIN_ITEMS:
                    continue
                was = fitted.get(member, {}).get(lang, {})
                counts = self.used.get(lang, Counter())
                gone = [c for c in chans if was.get(c, 0.0) >= MIN_SHARE and not counts[(member, c)]]
                if not gone:
                    continue
                low = min(was[c] for c in gone)
                fact_checks = any(c.startswith("check") for c in gone)
                notes.append(
                    f"member {member!r}: channel{'s' * (len(gone) > 1)} {', '.join(gone)} "
                    f"{'are' if len(gone) > 1 else 'is'} 0 on all {n} {lang} items, where {low:.0%} or "
                    f"more of the {lang} items the stack was fitted on had evidence in them: this run "
                    "lacks evidence the fit had (a context source it read then?), and its predictions "
                    "there are made without it"
                    + (
                        "; check_* channels come from fact-check contexts, a source or a --contexts file "
                        "named qa_*"
                        if fact_checks
                        else ""
                    )
                )
        return notes

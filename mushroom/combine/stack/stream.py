"""Applying a fitted stack a chunk at a time: a corpus too large to hold, in flat memory.

`apply_stack` reads every member's predictions and evidence channels of a split into memory
and builds every item's feature matrix at once: fine for the shared task's few thousand
items, not for the million answers of an items file (an item's features alone are a few
hundred floats per character). Here the members' files are read as streams, beside the
items, a chunk of `CHUNK_ITEMS` items at a time; each chunk's predictions are yielded before
the next is read. An item's prediction depends on its own features alone, so the
predictions are those of `apply_stack`, item for item.

What is held besides a chunk: per member and language, the ids of the items that have
evidence channels (the channel store is appended in the order items finished, which a
resumed run or a concurrent detector makes differ from the items' order, so the store is
indexed once, ids only) and the records read ahead of their item (none when the files are
in the items' order, as the run service writes them).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mushroom.combine.stack.features import StackData, check_channels, item_features
from mushroom.combine.stack.fit import applicable_channels, stack_predictions
from mushroom.combine.stack.members import Member, MemberEvidence
from mushroom.combine.stack.model import StackModel
from mushroom.combine.stack.usage import ChannelUse
from mushroom.data.channels import iter_channel_records
from mushroom.data.predictions import iter_predictions, prediction_span_problems
from mushroom.data.records import ChannelRecord, Item, Prediction
from mushroom.data.runfolder import FailureCheck, run_scope
from mushroom.data.spans import soft_to_vector
from mushroom.errors import DataError, MushroomError, duplicate_id
from mushroom.util.words import no_prediction

# Items whose features are built and scored at a time. A chunk's feature matrices (a few
# hundred floats per character, copied once more to go through the model together) are
# most of the memory: on 3,000 English items, chunks of 100, 250 and 1,000 items took
# 14.8, 13.6 and 14.3 s and peaked at 242, 330 and 716 MiB (benchmarks/scale.py --stack).
CHUNK_ITEMS = 250


@dataclass
class StackChunk:
    """One chunk of a language's items and the stack's predictions of them, in the items' order."""

    lang: str
    items: list[Item]
    predictions: list[Prediction]
    emptied: list[str] = field(default_factory=list)  # ids whose hard labels the empty rule emptied


class _Predictions:
    """A member's prediction file read once, in order, handed out by item id."""

    def __init__(self, path: Path):
        self.path = path
        self.records = iter_predictions(path)
        self.waiting: dict[str, Prediction] = {}  # read ahead of their items
        # every id read so far, so that a repeat is refused as everywhere: about 130 bytes an id
        # (130 MB for a million), as `_Channels.last` keeps per member
        self.line_of: dict[str, int] = {}

    def _read(self) -> Iterator[Prediction]:
        for line, pred in self.records:
            first = self.line_of.setdefault(pred.id, line)
            if first != line:
                raise DataError([duplicate_id(self.path, line, pred.id, first)])
            yield pred

    def take(self, ids: list[str]) -> dict[str, Prediction]:
        """The predictions of `ids` found in the file (a missing id reads the file to its end)."""
        out: dict[str, Prediction] = {}
        for item_id in ids:
            if item_id in self.waiting:
                out[item_id] = self.waiting.pop(item_id)
                continue
            for pred in self._read():
                if pred.id == item_id:
                    out[item_id] = pred
                    break
                self.waiting[pred.id] = pred
        return out

    def finish(self) -> None:
        """Reads the rest of the file: a repeated id after the last item's was never seen."""
        for _ in self._read():
            pass


class _Channels:
    """A member's channel store read once, in file order, handed out by item id; last line wins."""

    def __init__(self, path: Path | None):
        self.path = path
        self.last: dict[str, int] = {}  # id -> number of its last record in the file
        self.names: set[str] = set()
        if path is not None:
            for k, rec in enumerate(iter_channel_records(path)):
                self.last[rec.id] = k
                self.names.update(rec.channels)
        self.records = enumerate(iter_channel_records(path)) if path is not None else iter(())
        self.waiting: dict[str, ChannelRecord] = {}

    def take(self, ids: list[str]) -> dict[str, ChannelRecord]:
        out: dict[str, ChannelRecord] = {}
        for item_id in ids:
            if item_id not in self.last:
                continue  # the member wrote no channels for it (an item without contexts)
            if item_id in self.waiting:
                out[item_id] = self.waiting.pop(item_id)
                continue
            for k, rec in self.records:
                if self.last[rec.id] != k:
                    continue  # a line a later one for the same item replaces
                if rec.id == item_id:
                    out[item_id] = rec
                    break
                self.waiting[rec.id] = rec
        return out


class _MemberStream:
    """One member's evidence for one language's items, a chunk at a time."""

    def __init__(self, member: Member, split: str, lang: str):
        self.member = member
        self.path, chan_path = member.files(split, lang)
        member.check_file(self.path, lang)
        self.check = FailureCheck(self.path)
        self.failures = None if member.allow_failures else self.check
        self.predictions = _Predictions(self.path)
        self.channels = _Channels(chan_path if chan_path.exists() else None)
        # every item the run calls done whose evidence went, counted at once before the first
        # chunk (not a chunk's): `Member.load` counts the items it applies to, which are all
        # of them where the ledger and the items file agree
        ledger = self.check.ledger
        lost_from = sorted(ledger.channelled) if ledger is not None else []
        self.check.refuse_lost_channels(lost_from, self.channels.last, chan_path, f"member {member.name!r}: ")

    def evidence(self, items: list[Item]) -> list[MemberEvidence]:
        """Each item's prediction and channels; refused as `Member.load` refuses a whole file."""
        ids = [it.id for it in items]
        preds = self.predictions.take(ids)
        if self.failures is not None and (found := self.failures.check(preds)) is not None:
            raise MushroomError(f"member {self.member.name!r}: {found.message(self.path)}")
        self.check.refuse_changed_answers(items, f"member {self.member.name!r}: ")
        missing = [i for i in ids if i not in preds]
        if missing:
            scope = run_scope(self.path)
            hint = (
                f"; {scope.made_with()}, and a stack needs every item: run the member without --limit"
                if scope is not None and scope.partial
                else ""
            )
            raise DataError.single(self.path, None, None, f"{no_prediction(missing, total=len(ids))}{hint}")
        # spans past an answer's end are refused, as `ensemble` and `Member.load` refuse them
        line_of = self.predictions.line_of
        wrong = [
            p
            for it in items
            for p in prediction_span_problems(
                preds[it.id], len(it.model_output_text), (str(self.path), line_of.get(it.id))
            )
        ]
        if wrong:
            raise DataError(wrong)
        chans = self.channels.take(ids)
        out: list[MemberEvidence] = []
        for it in items:
            rec = chans.get(it.id)
            n = len(it.model_output_text)
            vectors: dict[str, np.ndarray] = (
                {name: soft_to_vector(spans, n) for name, spans in rec.channels.items()} if rec else {}
            )
            out.append((preds[it.id], vectors))
        return out


def iter_apply_stack(
    model: StackModel,
    members: list[Member],
    split: str,
    data: Mapping[str, Iterable[Item]],
    warn: Callable[[str], None] | None = None,
    chunk_items: int | None = None,
) -> Iterator[StackChunk]:
    """`apply_stack` a chunk at a time: each language's items are read once, in order.

    Every member's files are opened and checked (members, features, channels) before the
    first chunk is yielded, so a stack that does not fit its members is refused before
    anything is written.

    Args:
        model: a fitted stack.
        members: its members' runs, same names and order as when fitted.
        split: the split (or "items") whose files the members' runs wrote.
        data: each language's items, any iterables (a list, an items file's languages).
        warn: told of what the predictions may lack (a member without channels somewhere).
        chunk_items: items per chunk (default `CHUNK_ITEMS`).

    Yields:
        Each chunk's items and predictions, language by language, in the items' order.
    """
    size = chunk_items or CHUNK_ITEMS
    members, channels = applicable_channels(model, members, warn)
    streams = {lang: [_MemberStream(m, split, lang) for m in members] for lang in data}
    found = [{lang: sorted(streams[lang][k].channels.names) for lang in data} for k in range(len(members))]
    check_channels(members, split, channels, found, model.channels_by_lang, warn)
    for lang, items in data.items():
        iterator = iter(items)
        use = ChannelUse([m.name for m in members], channels)
        while batch := list(itertools.islice(iterator, size)):
            evidence = [s.evidence(batch) for s in streams[lang]]
            feats = [
                item_features(item, [ev[j] for ev in evidence], channels, model.languages)
                for j, item in enumerate(batch)
            ]
            use.add(batch, feats)
            emptied: list[str] = []
            preds = stack_predictions(model, StackData(batch, feats), emptied)
            yield StackChunk(lang, batch, preds, emptied)
        for stream in streams[lang]:
            stream.predictions.finish()
        del streams[lang]  # its files' handles and read-ahead go with it
        for note in use.lost(model.channel_use) if warn is not None else []:
            warn(note)

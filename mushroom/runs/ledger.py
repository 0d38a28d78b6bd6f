"""The per-item ledger of a run folder: which items are done, failed, or computed on other input.

One `ItemResult` line per finished item, appended and flushed as the detector emits it, so
a kill -9 loses at most the items in flight and a re-run sends only the missing or failed
ones. It holds per item only where its line is, never the results (a run over a million
items would hold gigabytes).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mushroom.data.jsonl import mend_cut_line
from mushroom.data.records import ChannelRecord, Context, Item
from mushroom.detectors.base import ItemResult
from mushroom.errors import MushroomError


def item_digest(item: Item, contexts: Iterable[Context]) -> str:
    """A short hash of what a detector reads of an item: its answer, question, tokens, logits, contexts.

    Kept on the item's ledger line, so that a re-run of the folder on an edited items or
    contexts file computes the edited items again instead of resuming past them with
    predictions of another text (whose spans may not even fit the new answer). The gold
    labels are left out: they do not change a prediction.
    """
    blob = {
        "lang": item.lang,
        "input": item.model_input,
        "output": item.model_output_text,
        "tokens": item.model_output_tokens,
        "logits": item.model_output_logits,
        "contexts": [[c.source, c.text] for c in contexts],
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


_DIGEST_KEY = b'"input_digest":"'  # as model_dump_json writes the ledger line (no spaces)


class Ledger:
    """One language's item outcomes: an append-only JSONL file, the last line per id wins.

    Holds per item only where its last line starts and whether it failed, never the results
    themselves (a run over a million items would hold gigabytes): what the end of a run needs
    (predictions, errors, stats) is read back from the file as a stream. An item's evidence
    channels go to the language's channel store (`raw/channels.<lang>.jsonl.gz`), written
    before its ledger line, so an item the ledger calls done always has its channels there.
    """

    def __init__(self, path: Path, channels: Path | None = None):
        self.path = path
        self.channel_path = channels
        self.last: dict[str, int] = {}  # id -> byte offset of its last readable line
        self.failed: set[str] = set()  # ids whose last line says failed
        # id -> seconds of every line, attempts a later line replaced included: a resumed run's
        # stage time dropped the failed first tries of the items it did again
        self.spent: dict[str, float] = {}
        self.unreadable = 0
        self.inline_channels = False  # lines of a run before the channel store carry channels
        self.lost_channels = 0  # items done whose evidence the store lacks: done again
        self._lock = threading.Lock()
        self._out: Any = None
        self._size = 0
        self._channels: Any = None
        self.cut_line = False  # a kill cut the last line: its item is done again (said by the run)
        if path.exists():
            self.cut_line = mend_cut_line(path, drop=True) is not None
            channelled: set[str] = set()  # ok items whose last line says they wrote channels
            for offset, result in self._lines():
                if result is None:
                    self.unreadable += 1  # that item is simply done again
                    continue
                self._note(result, offset)
                self.inline_channels = self.inline_channels or bool(result.channels)
                if result.status == "ok" and result.stored_channels:
                    channelled.add(result.id)
                else:
                    channelled.discard(result.id)
            self._forget_lost_channels(channelled)

    def _forget_lost_channels(self, channelled: set[str]) -> None:
        """Items done whose channels the store lacks are done again.

        A store cut or deleted by hand kept its ledger's "done": the stack then read those
        items as having no evidence and wrote another submission, with nothing said.
        """
        from mushroom.data.channels import iter_channel_ids

        if not channelled or self.channel_path is None:
            return
        stored = set(iter_channel_ids(self.channel_path)) if self.channel_path.exists() else set()
        lost = channelled - stored
        for item_id in lost:
            del self.last[item_id]
            self.failed.discard(item_id)
        self.lost_channels = len(lost)

    def _lines(self, wanted: set[int] | None = None) -> Iterator[tuple[int, ItemResult | None]]:
        """(offset, result or None if unreadable) of each line; with `wanted`, the lines starting there."""
        if not self.path.exists():
            return
        with self.path.open("rb") as handle:
            offset = 0
            for raw in handle:
                start, offset = offset, offset + len(raw)
                if not raw.strip() or (wanted is not None and start not in wanted):
                    continue
                try:
                    yield start, ItemResult.model_validate_json(raw)
                except ValidationError:
                    yield start, None

    def _note(self, result: ItemResult, offset: int) -> None:
        self.last[result.id] = offset
        self.spent[result.id] = self.spent.get(result.id, 0.0) + (result.seconds or 0.0)
        if result.status == "ok":
            self.failed.discard(result.id)
        else:
            self.failed.add(result.id)

    def __len__(self) -> int:
        return len(self.last)

    def add(self, result: ItemResult) -> None:
        # the ledger's own word, whatever a detector's result said: the channels go to the store
        result = result.model_copy(update={"stored_channels": bool(result.channels)})
        line = (result.model_dump_json(exclude_defaults=True, exclude={"channels"}) + "\n").encode("utf-8")
        with self._lock:
            if result.channels:
                self._channel_writer().add(ChannelRecord(id=result.id, channels=result.channels))
            if self._out is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._out = self.path.open("ab")
                self._size = self._out.seek(0, 2)
            self._out.write(line)
            self._out.flush()
            self._note(result, self._size)
            self._size += len(line)

    def _channel_writer(self):
        from mushroom.data.channels import ChannelWriter

        if self._channels is None:
            if self.channel_path is None:
                raise MushroomError(f"{self.path}: this ledger has no channel store")
            fresh = not self.channel_path.exists()
            self._channels = ChannelWriter(self.channel_path)
            if fresh and self.inline_channels:
                # a run before the channel store kept channels in the ledger: carried over, so
                # that the store holds every item's channels
                for _, old in self._lines(set(self.last.values())):
                    if old is not None and old.status == "ok" and old.channels:
                        self._channels.add(ChannelRecord(id=old.id, channels=old.channels))
        return self._channels

    def close(self) -> None:
        with self._lock:
            if self._out is not None:
                self._out.close()
                self._out = None
            if self._channels is not None:
                self._channels.close()
                self._channels = None

    def ok(self, item_id: str) -> bool:
        return item_id in self.last and item_id not in self.failed

    def changed(self, digests: dict[str, str]) -> set[str]:
        """The ids done here whose inputs have changed since (`digests`: id -> item_digest now).

        Read from the file, not held: a run over a million items keeps no digest in memory.
        Only the key is looked for in each line, not the line parsed (a model-backed item's
        detail can be long). A line of a run before digests were kept has none, and is taken
        as unchanged.
        """
        done = [i for i in digests if self.ok(i)]
        if not done:
            return set()
        if self._out is not None:
            self._out.flush()
        found = set()
        with self.path.open("rb") as handle:
            for item_id in done:
                handle.seek(self.last[item_id])
                line = handle.readline()
                # the last key of the line: a key of that name inside `detail` comes before it
                at = line.rfind(_DIGEST_KEY)
                if at >= 0:
                    start = at + len(_DIGEST_KEY)
                    if line[start : start + 16].decode("ascii", "replace") != digests[item_id]:
                        found.add(item_id)
        return found

    def read(self, ids: Iterable[str]) -> Iterator[ItemResult | None]:
        """The last outcome of each of `ids`, in their order (None for an id without one)."""
        if self._out is not None:
            self._out.flush()
        with self.path.open("rb") if self.last else nullcontext() as handle:
            for item_id in ids:
                offset = self.last.get(item_id)
                if offset is None or handle is None:
                    yield None
                    continue
                handle.seek(offset)
                yield ItemResult.model_validate_json(handle.readline())

    def error(self, item_id: str) -> str | None:
        """Why an item failed (its last line's error); None if it has no line."""
        return next(iter(self.read([item_id]))).error if item_id in self.last else None

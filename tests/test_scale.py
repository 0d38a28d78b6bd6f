"""Runs over many items: read a chunk at a time, resumable mid-chunk, channels stored once."""

import gc
import gzip
import weakref

import numpy as np
import pytest
from pydantic import Field

import mushroom.runs.service as service
from mushroom.combine.stack.members import Member
from mushroom.data.channels import (
    channel_file,
    find_channel_file,
    iter_channel_ids,
    iter_channel_records,
    legacy_channel_file,
    read_channels,
)
from mushroom.data.jsonl import write_jsonl
from mushroom.data.predictions import prediction_from_vectors
from mushroom.data.records import ChannelRecord, Item, Prediction
from mushroom.detectors.base import DetectorOptions, ItemResult, VectorDetector
from mushroom.errors import DataError, Interrupted

CHUNK = 4
N = 10  # three chunks: 4, 4, 2


class Options(DetectorOptions):
    threshold: float = Field(0.5)


class Vowels(VectorDetector):
    """A detector with evidence channels whose output depends on each item alone."""

    name = "vowels"
    Options = Options

    def __init__(self, options=None, stop_after: int | None = None):
        super().__init__(options or Options())
        self.seen: list[str] = []
        self.stop_after = stop_after  # a Ctrl-C after this many items

    def item_vector(self, item, contexts):
        if self.stop_after is not None and len(self.seen) == self.stop_after:
            raise KeyboardInterrupt
        self.seen.append(item.id)
        text = item.model_output_text
        vec = np.array([0.9 if ch in "aeiou" else 0.1 for ch in text])
        self.channels[item.id] = {"vowel": vec, "place": np.linspace(0.0, 1.0, len(text)) / 3}
        return vec


def rows() -> list[dict]:
    words = ["Alice won in 1990.", "In Paris, on a bridge.", "It was blue and old.", "Nobody knows."]
    return [
        {"id": f"s-{k}", "lang": "en", "model_input": "Q?", "model_output_text": f"{words[k % 4]} ({k})"}
        for k in range(N)
    ]


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(service, "CHUNK_ITEMS", CHUNK)


def ledger_lines(folder) -> int:
    path = folder / "items" / "en.jsonl"
    return len(path.read_bytes().splitlines()) if path.exists() else 0


class OnePass:
    """Items made as they are read, once, never ahead of the chunk being run."""

    def __init__(self, folder):
        self.folder = folder
        self.read = 0
        self.made: list[weakref.ref] = []

    def __iter__(self):
        assert not self.read, "the items were read twice"
        for k, row in enumerate(rows()):
            finished = ledger_lines(self.folder)
            assert finished >= (k // CHUNK) * CHUNK, f"item {k} read with {finished} items finished"
            self.read += 1
            item = Item.model_validate(row)
            self.made.append(weakref.ref(item))
            yield item


def run(tmp_path, name, data, det=None):
    svc = service.RunService(tmp_path / name, {"detector": "vowels"}, quiet=True)
    folder = tmp_path / name / "predictions"
    try:
        res = svc.detect_split(det or Vowels(), "items", folder, data={"en": data}, context_files=[])
    finally:
        svc.release()
    return res, folder


def outputs(folder):
    lengths = {r["id"]: len(r["model_output_text"]) for r in rows()}
    pred = (folder / "mushroom.en-items.jsonl").read_bytes()
    return pred, read_channels(find_channel_file(folder / "raw", "en"), lengths)


def same_channels(a, b) -> bool:
    return a.keys() == b.keys() and all(
        a[i].keys() == b[i].keys() and all(np.array_equal(a[i][c], b[i][c]) for c in a[i]) for i in a
    )


def test_a_run_reads_a_generator_once_a_chunk_at_a_time_and_keeps_none_of_its_items(tmp_path):
    source = OnePass(tmp_path / "lazy" / "predictions")
    res, folder = run(tmp_path, "lazy", source)
    assert source.read == N and res.done_now == N and not res.failures
    gc.collect()
    assert not [ref for ref in source.made if ref() is not None]  # no item outlives its chunk
    # the same files as a run over a list
    _, listed = run(tmp_path, "list", [Item.model_validate(r) for r in rows()])
    assert outputs(folder)[0] == outputs(listed)[0] and same_channels(outputs(folder)[1], outputs(listed)[1])


def test_a_run_stopped_mid_chunk_resumes_with_only_the_unfinished_items(tmp_path):
    items = [Item.model_validate(r) for r in rows()]
    with pytest.raises(Interrupted):
        run(tmp_path, "cut", items, Vowels(stop_after=6))  # two items into the second chunk
    folder = tmp_path / "cut" / "predictions"
    assert ledger_lines(folder) == 6 and not (folder / "mushroom.en-items.jsonl").exists()
    # a kill -9 leaves the store without its gzip trailer: the resumed run mends it first
    store = channel_file(folder / "raw", "en")
    store.write_bytes(store.read_bytes()[:-8])
    det = Vowels()
    res, _ = run(tmp_path, "cut", items, det)
    assert det.seen == [f"s-{k}" for k in range(6, N)] and res.reused == 6 and res.done_now == 4
    _, whole = run(tmp_path, "whole", items)
    assert outputs(folder)[0] == outputs(whole)[0] and same_channels(outputs(folder)[1], outputs(whole)[1])
    assert len(gzip.decompress(store.read_bytes()).splitlines()) == N  # readable by any gzip reader


class _InterruptedOnce:
    """A file whose next write is cut by Ctrl-C (or fails): the bytes never reach it."""

    def __init__(self, raw, error: BaseException | None = None):
        self.raw, self.armed, self.error = raw, True, error or KeyboardInterrupt()

    def write(self, data):
        if self.armed:
            self.armed = False
            raise self.error
        return self.raw.write(data)

    def __getattr__(self, name):
        return getattr(self.raw, name)


def test_a_record_cut_by_ctrl_c_leaves_the_store_readable_and_resumable(tmp_path):
    """Ctrl-C inside a write, then the close on the way out, wrote a gzip trailer whose
    checksum did not match the stream: every later run failed on "incorrect data check"."""
    from mushroom.data.channels import ChannelWriter, iter_channel_records

    store = tmp_path / "raw" / "channels.en.jsonl.gz"
    record = lambda k: ChannelRecord(id=f"s-{k}", channels={"c": [{"start": 0, "end": 3, "prob": 0.5}]})  # noqa: E731
    out = ChannelWriter(store)
    out.add(record(0))
    out._raw = _InterruptedOnce(out._raw)
    with pytest.raises(KeyboardInterrupt):
        out.add(record(1))
    out.close()  # as the run's `finally` closes it
    assert [r.id for r in iter_channel_records(store)] == ["s-0"]
    with ChannelWriter(store) as again:  # the resumed run mends the cut and appends
        again.add(record(1))
    assert [r.id for r in iter_channel_records(store)] == ["s-0", "s-1"]
    assert len(gzip.decompress(store.read_bytes()).splitlines()) == 2  # any gzip reader agrees


def test_a_store_whose_write_failed_takes_no_more_records(tmp_path):
    """A full disk mid-record, then more records: the stream after the lost bytes could not
    be decoded, and its trailer would not match."""
    from mushroom.data.channels import ChannelWriter, iter_channel_records
    from mushroom.errors import MushroomError

    store = tmp_path / "raw" / "channels.en.jsonl.gz"
    record = lambda k: ChannelRecord(id=f"s-{k}", channels={"c": [{"start": 0, "end": 3, "prob": 0.5}]})  # noqa: E731
    out = ChannelWriter(store)
    out.add(record(0))
    out._raw = _InterruptedOnce(out._raw, OSError(28, "No space left on device"))
    with pytest.raises(OSError):
        out.add(record(1))
    with pytest.raises(MushroomError, match="an earlier write to it failed"):
        out.add(record(2))
    out.close()
    assert [r.id for r in iter_channel_records(store)] == ["s-0"]


def test_a_damaged_store_is_named_with_what_to_remove(tmp_path):
    from mushroom.data.channels import ChannelWriter, iter_channel_records
    from mushroom.errors import DataError

    store = tmp_path / "predictions" / "raw" / "channels.en.jsonl.gz"
    with ChannelWriter(store) as out:
        out.add(ChannelRecord(id="s-0", channels={"c": [{"start": 0, "end": 3, "prob": 0.5}]}))
    data = bytearray(store.read_bytes())
    data[-8] ^= 0xFF  # the trailer's checksum
    store.write_bytes(bytes(data))
    for read in (lambda: list(iter_channel_records(store)), lambda: ChannelWriter(store)):
        with pytest.raises(DataError) as err:
            read()
        said = str(err.value)
        assert str(store) in said and "damaged" in said
        assert str(tmp_path / "predictions" / "items" / "en.jsonl") in said


def test_the_channel_store_reads_back_equal_to_the_plain_file_runs_wrote_before(tmp_path):
    items = [Item.model_validate(r) for r in rows()]
    _, folder = run(tmp_path, "new", items)
    store = channel_file(folder / "raw", "en")
    assert store.name == "channels.en.jsonl.gz" and not legacy_channel_file(folder / "raw", "en").exists()
    assert b'"vowel"' not in (folder / "items" / "en.jsonl").read_bytes()  # stored once, not in the ledger
    # the file the run service wrote before: one ChannelRecord a line, from each item's result
    det, old = Vowels(), []
    for item in items:
        det.item_vector(item, [])
        result = ItemResult.ok(Prediction(id=item.id), det.channels[item.id])
        old.append(ChannelRecord(id=item.id, channels=result.channels))
    legacy = write_jsonl(tmp_path / "channels.en.jsonl", old)
    assert gzip.decompress(store.read_bytes()) == legacy.read_bytes()  # the same lines, compressed
    assert [r.id for r in iter_channel_records(store)] == [r.id for r in iter_channel_records(legacy)]
    lengths = {it.id: len(it.model_output_text) for it in items}
    assert same_channels(read_channels(store, lengths), read_channels(legacy, lengths))
    # a run folder of the old form is still read by the stack's members
    store.unlink()
    legacy.rename(legacy_channel_file(folder / "raw", "en"))
    _, chans = Member("old", tmp_path / "new").load("items", "en", items)
    assert same_channels(chans, read_channels(legacy_channel_file(folder / "raw", "en"), lengths))


def test_a_ledger_of_the_old_form_carries_its_channels_into_the_store_on_resume(tmp_path):
    items = [Item.model_validate(r) for r in rows()]
    _, whole = run(tmp_path, "whole", items)
    # an older run stopped after 6 items: channels inside its ledger lines, no store yet
    det, lines = Vowels(), []
    for item in items[:6]:
        vec = det.item_vector(item, [])
        result = ItemResult.ok(prediction_from_vectors(item.id, vec, vec > 0.5), det.channels[item.id])
        lines.append(result.model_dump_json(exclude_defaults=True) + "\n")
    folder = tmp_path / "old" / "predictions"
    (folder / "items").mkdir(parents=True)
    (folder / "items" / "en.jsonl").write_text("".join(lines), encoding="utf-8")
    (tmp_path / "old" / "versions.json").write_text("{}")  # as every run's folder has (a run's mark)
    det = Vowels()
    run(tmp_path, "old", items, det)
    assert det.seen == [f"s-{k}" for k in range(6, N)]
    assert outputs(folder)[0] == outputs(whole)[0] and same_channels(outputs(folder)[1], outputs(whole)[1])


def stack_items(n: int) -> list[Item]:
    """Labelled answers of a few words each: one word of each but every third is wrong."""
    items = []
    for k in range(n):
        words = [f"w{k}x{j}" for j in range(4 + k % 3)]
        text = " ".join(words)
        hard = [] if k % 3 == 0 else [[text.index(words[1]), text.index(words[1]) + len(words[1])]]
        soft = [{"start": s, "end": e, "prob": 1.0} for s, e in hard]
        items.append(
            Item(
                id=f"t-{k}",
                lang="en",
                model_input="q",
                model_output_text=text,
                hard_labels=hard,
                soft_labels=soft,
            )
        )
    return items


def member_vector(item: Item, noise: float) -> np.ndarray:
    """A member's soft labels: the gold word high, the rest a fixed function of the position."""
    vec = np.array(
        [0.3 + noise * ((j * 7 + len(item.id)) % 5) / 10 for j in range(len(item.model_output_text))]
    )
    for s, e in item.hard_labels:
        vec[s:e] = 0.8
    return vec


def write_stack_member(folder, items, split, noise, shuffle_channels=False):
    """A member run's files; its channel store in another order than the items, one item twice."""
    from mushroom.data.channels import ChannelWriter
    from mushroom.data.predictions import submission_name
    from mushroom.data.spans import vector_to_soft

    preds = []
    for it in items:
        vec = member_vector(it, noise)
        preds.append(prediction_from_vectors(it.id, vec, vec > 0.5).submission_dict())
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / submission_name("en", split), preds)
    order = list(items)
    if shuffle_channels:  # as a resumed run or a concurrent detector appends them
        order = order[5:] + order[:5][::-1]
    with ChannelWriter(channel_file(folder / "raw", "en")) as out:
        for k, it in enumerate(order):
            if k % 7 == 3:
                continue  # no channels for some items (no contexts)
            vec = np.linspace(0, 1, len(it.model_output_text))
            if k == 1:  # written once wrong, then again: the last line wins
                out.add(ChannelRecord(id=it.id, channels={"place": vector_to_soft(vec[::-1])}))
            out.add(ChannelRecord(id=it.id, channels={"place": vector_to_soft(vec)}))


def test_a_fitted_stack_applied_a_chunk_at_a_time_equals_it_applied_whole(tmp_path, monkeypatch):
    from mushroom.combine.stack import apply_stack, fit_stack, parse_members
    from mushroom.combine.stack import stream as stack_stream
    from mushroom.data.predictions import load_predictions, submission_name
    from mushroom.runs.stack import apply_stack_run

    monkeypatch.setattr(stack_stream, "CHUNK_ITEMS", CHUNK)
    fit_on, corpus = stack_items(24), stack_items(19)
    for name, noise in (("a", 0.2), ("b", 0.5)):
        write_stack_member(tmp_path / name, fit_on, "val", noise)
        write_stack_member(tmp_path / name / "predictions", corpus, "items", noise, shuffle_channels=True)
    members = parse_members([f"a={tmp_path / 'a'}", f"b={tmp_path / 'b'}"])
    model = fit_stack(members, {"en": fit_on}, folds=3).model
    assert model.channels == {"a": ["place"], "b": ["place"]}
    whole = apply_stack(model, members, "items", {"en": corpus})["en"]

    class Once:
        """The corpus read once, never a chunk ahead of the predictions taken."""

        def __init__(self):
            self.read, self.taken, self.iterated = 0, 0, False

        def __iter__(self):
            assert not self.iterated, "the items were read twice"
            self.iterated = True
            for k, item in enumerate(corpus):
                assert k - self.taken < CHUNK, f"item {k} read with {self.taken} predictions taken"
                self.read += 1
                yield item

    source = Once()
    chunked = []
    for chunk in stack_stream.iter_apply_stack(model, members, "items", {"en": source}):
        assert len(chunk.items) <= CHUNK
        chunked += chunk.predictions
        source.taken += len(chunk.predictions)
    assert source.read == len(corpus)
    assert [p.model_dump() for p in chunked] == [p.model_dump() for p in whole]
    assert any(p.hard_labels for p in whole) and any(not p.hard_labels for p in whole)
    # `stack apply --items`: the same predictions, written a chunk at a time, scored
    items_file = write_jsonl(tmp_path / "corpus.jsonl", corpus)
    out = apply_stack_run(model, members, tmp_path / "applied", items_file=items_file)
    written = load_predictions(out / submission_name("en", "items"))
    assert [written[p.id].model_dump() for p in whole] == [p.model_dump() for p in whole]
    assert (out / "scores.json").exists()
    # an item a member lacks is refused, as when applied whole
    (tmp_path / "b" / "predictions" / submission_name("en", "items")).write_text("")
    with pytest.raises(DataError, match=r"no prediction for 4 of 4 items"):
        list(stack_stream.iter_apply_stack(model, members, "items", {"en": corpus}))


@pytest.mark.parametrize("damage", ["deleted", "cut"])
def test_a_channel_store_cut_or_deleted_is_refused_by_the_stack_and_mended_by_a_rerun(tmp_path, damage):
    """The ledger still said "done": a stack read the items as having no evidence, exit 0, unsaid."""
    from mushroom.combine.stack.stream import _MemberStream

    items = [Item.model_validate(r) for r in rows()]
    _, whole = run(tmp_path, "whole", items)
    _, folder = run(tmp_path, "run", items)
    store = channel_file(folder / "raw", "en")
    if damage == "deleted":
        store.unlink()
    else:  # the first records only: a cut a kill would not make (the ledger has every item)
        kept = [line for line in gzip.decompress(store.read_bytes()).splitlines(keepends=True)][:3]
        store.write_bytes(gzip.compress(b"".join(kept)))
    member = Member("vowels", tmp_path / "run")
    for read in (
        lambda: member.load("items", "en", items),
        lambda: _MemberStream(member, "items", "en").evidence(items),
    ):
        with pytest.raises(DataError) as err:
            read()
        said = str(err.value)
        assert str(store) in said and f"of {N - (0 if damage == 'deleted' else 3)} items" in said, said
        assert "Run that run's command again on the same folder" in said
    warned = []
    det = Vowels()
    svc = service.RunService(tmp_path / "run", {"detector": "vowels"}, quiet=True)
    svc.warn = warned.append
    try:
        svc.detect_split(det, "items", folder, data={"en": items}, context_files=[])
    finally:
        svc.release()
    assert len(det.seen) == N - (0 if damage == "deleted" else 3)  # only the items whose evidence went
    assert any("lacks the evidence of" in w and "computed again" in w for w in warned), warned
    assert outputs(folder)[0] == outputs(whole)[0] and same_channels(outputs(folder)[1], outputs(whole)[1])
    member.load("items", "en", items)  # read again without complaint


def test_a_stores_ids_read_alone_are_its_records_ids_whatever_they_hold(tmp_path):
    """A resume reads every store's ids; parsing each record whole cost 0.2 ms a record."""
    import json

    from mushroom.data.channels import ChannelWriter

    store = tmp_path / "channels.en.jsonl.gz"
    odd = ['a"b', "c\\d", "日本-1", "e\nf", "s-0"]
    spans = {"c": [{"start": 0, "end": 1, "prob": 0.5}]}
    with ChannelWriter(store) as out:
        for item_id in odd:
            out.add(ChannelRecord(id=item_id, channels=spans))
    hand = json.dumps({"channels": spans, "id": "by-hand"}) + "\n"  # keys in another order
    store.write_bytes(store.read_bytes() + gzip.compress(hand.encode()))
    assert list(iter_channel_ids(store)) == [r.id for r in iter_channel_records(store)] == [*odd, "by-hand"]
    # a record cut inside the file, or a line of garbage: named, not taken as an id (a resume
    # went on, and every stack that read the store failed on that line after)
    for bad in ('{"id": "x", "channels": {"vo', "garbage", '{"id": 5, "channels": {}}'):
        damaged = tmp_path / "damaged.jsonl.gz"
        damaged.write_bytes(store.read_bytes() + gzip.compress((bad + "\n" + hand).encode()))
        with pytest.raises(DataError, match=f"{damaged}:7"):
            list(iter_channel_ids(damaged))

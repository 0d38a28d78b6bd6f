"""The library API: one call from an answer and its contexts to hallucinated spans.

    import mushroom
    pred = mushroom.detect("Paris is the capital of Italy.", contexts=["Paris is the capital of France."],
                           question="What is Paris?", method="lexical")
    pred.hard_labels, pred.soft_labels, pred.probs

No run folder, no item files: the detector is built once per (method, options) and kept,
so calling `detect` in a loop does not reload a model. `detect_batch` sends many items at
once (model-backed methods batch their requests); `detect_stream` does the same a chunk at a
time over an iterable of any length (a generator, a `datasets.Dataset`), yielding each
chunk's predictions before it reads the next. A failed model call raises `RunFailed` rather
than returning an empty prediction.
"""

from __future__ import annotations

import itertools
import numbers
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, model_validator

from mushroom.data import records
from mushroom.data.languages import language_code, unknown_language_hint
from mushroom.data.records import Context, Item
from mushroom.errors import MushroomError, RunFailed
from mushroom.runs import CHUNK_ITEMS
from mushroom.util.words import close_match, swapped_letters


class Prediction(records.Prediction):
    """Spans of one answer, with the per-character probabilities as a list.

    `soft_labels` and `hard_labels` are in the official submission format (Python string
    indices, end exclusive); `probs[i]` is the probability that character `i` of `text` is
    part of a hallucination. With a `text`, each span must lie inside it (`0 <= start < end
    <= len(text)`), when made and when a list of spans is assigned; a list edited in place
    is not checked again.
    """

    model_config = ConfigDict(validate_assignment=True)

    text: str = Field("", description="the answer the spans index into")

    @model_validator(mode="before")
    @classmethod
    def _plain_offsets(cls, data: Any) -> Any:
        # a notebook's offsets are often numpy integers, which the strict int of a file
        # refused ("Input should be a valid integer"); converted here, files stay strict and fast
        if isinstance(data, dict):
            data = {k: _plain_labels(k, v) for k, v in data.items()}
            if "text" not in data and isinstance(data.get("model_output_text"), str):
                data["text"] = data["model_output_text"]  # a submission line that carries it
        return data

    @model_validator(mode="after")
    def _both_label_kinds(self) -> Prediction:
        # One kind given, the other is what the official scorer derives from it (hard: soft
        # above 0.5; soft: 1.0 over the hard spans). Left [], `submission_dict` wrote
        # "hard_labels": [] for a soft-only prediction: `mushroom.score` said IoU 1.0 of it
        # and the file it wrote scored 0.0 (an audit). Set outside `model_fields_set`, so the
        # record still says which kind was given, and derived again when the other is assigned.
        # Here, not on the file record: a run's item ledger leaves an empty hard_labels out
        # (exclude_defaults), and read back it was derived as soft > 0.5 (an audit: a threshold
        # of 0.9 that marked nothing scored as 0.5).
        given = self.model_fields_set
        if "soft_labels" in given and "hard_labels" not in given:
            self.__dict__["hard_labels"] = records.hard_from_soft(self.soft_labels)
        elif "hard_labels" in given and "soft_labels" not in given:
            self.__dict__["soft_labels"] = records.soft_from_hard(self.hard_labels)
        return self

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Prediction:
        """A copy; with new spans or text in `update`, checked and derived as a new record is.

        pydantic's copy takes `update` unchecked: new soft labels kept the hard labels derived
        from the old ones, and spans past the text were taken.
        """
        if not update or not set(update) & {"soft_labels", "hard_labels", "text"}:
            return super().model_copy(update=update, deep=deep)
        data = {name: getattr(self, name) for name in self.model_fields_set}
        data.update(self.__pydantic_extra__ or {})
        data.update(update)
        return type(self).model_validate(data)

    @model_validator(mode="after")
    def _inside_text(self) -> Prediction:
        # exported, it took spans past its text or reversed (and an edit of them), and wrote
        # files `check` refuses; without a text there is nothing to check them against
        if "text" in self.model_fields_set:
            n = len(self.text)
            soft, hard = self.given_labels()  # a kind derived from the other is inside when that one is
            spans = [(f"soft_labels.{i}", s.start, s.end) for i, s in enumerate(soft or [])]
            spans += [(f"hard_labels.{i}", s, e) for i, (s, e) in enumerate(hard or [])]
            for where, start, end in spans:
                if not 0 <= start < end <= n:
                    raise ValueError(f"{where}: [{start}, {end}) is not inside the text ({n} characters)")
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        # pydantic assigns before the check above runs: a refused assignment stayed in place,
        # and the invalid spans were written out (an audit). The old value comes back.
        if name not in type(self).model_fields:
            super().__setattr__(name, value)
            return
        # every field comes back: the label kind derived from the refused value stayed (an audit)
        before = dict(self.__dict__)
        was_set = set(self.model_fields_set)
        try:
            super().__setattr__(name, _plain_labels(name, value))
        except ValidationError:
            self.__dict__.clear()
            self.__dict__.update(before)
            self.model_fields_set.intersection_update(was_set)
            raise

    def _needs_text(self, what: str) -> None:
        # made without a text, probs came back [] and spans with '' for every span: wrong
        # answers that looked like "nothing marked"
        if "text" not in self.model_fields_set and (self.soft_labels or self.hard_labels):
            raise ValueError(
                f"Prediction {self.id!r}: {what} needs the answer's text, and this one was made "
                "without it; give text=... (the spans index into it)"
            )

    @property
    def probs(self) -> list[float]:
        """One probability per character of `text`.

        Raises:
            ValueError: the prediction has spans but was made without its text.
        """
        from mushroom.data.spans import soft_to_vector

        self._needs_text("probs")
        return [float(v) for v in soft_to_vector(self.soft_labels, len(self.text))]

    def _repr_html_(self) -> str | None:
        """The answer in a notebook: red as deep as each character's probability, the hard spans underlined.

        None (the plain repr) for a prediction made without its text.
        """
        if "text" not in self.model_fields_set:
            return None
        import html

        from mushroom.data.spans import hard_to_mask, soft_to_vector
        from mushroom.evaluation.report import highlighted_answer

        n = len(self.text)
        if not n:
            return f"<div>{html.escape(self.id)}: an empty answer</div>"
        # the hard spans travel as the report's "gold" class, underlined here
        body = highlighted_answer(
            self.text, hard_to_mask(self.hard_labels, n), soft_to_vector(self.soft_labels, n)
        )
        head = (
            f"{html.escape(self.id)}: {len(self.hard_labels)} span(s) marked (underlined); red: probability"
        )
        return (
            '<div class="mushroom-prediction"><style>.mushroom-prediction .gold'
            "{border-bottom:2px solid #a00}</style>"
            f'<div style="font-size:smaller;opacity:.7">{head}</div><div>{body}</div></div>'
        )

    @property
    def spans(self) -> list[tuple[int, int, str]]:
        """The hard spans with their text: [(start, end, text)].

        Raises:
            ValueError: the prediction has spans but was made without its text.
        """
        self._needs_text("spans")
        return [(s, e, self.text[s:e]) for s, e in self.hard_labels]


def _plain_int(value: Any) -> Any:
    """A numpy integer as Python's; anything else (a bool, a float) as given, for the check to refuse."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool | int):
        return int(value)
    return value


def _plain_labels(name: str, value: Any) -> Any:
    """hard_labels or soft_labels with numpy integer offsets made Python's; other fields as given."""
    if name in ("hard_labels", "soft_labels") and callable(getattr(value, "tolist", None)):
        value = value.tolist()  # a numpy array of spans: its rows as lists of Python ints
    if not isinstance(value, list | tuple):
        return value
    if name == "hard_labels":
        return [tuple(_plain_int(v) for v in s) if isinstance(s, list | tuple) else s for s in value]
    if name == "soft_labels":
        return [
            {**s, **{k: _plain_int(s[k]) for k in ("start", "end") if k in s}} if isinstance(s, dict) else s
            for s in value
        ]
    return value


def _without_channels(method: str, options: dict[str, Any]) -> dict[str, Any]:
    """The options with evidence channels off unless asked for: a call returns predictions only.

    Channels are what a run folder keeps for `stack`; here they were computed and dropped,
    3.4 times the time of `lexical` on 1,500 items, and 1.7 GB for one 2 MB answer.
    """
    from mushroom.detectors import detector_class

    if "channels" in options:
        return options
    try:
        takes = "channels" in detector_class(method).Options.model_fields
    except MushroomError:  # an unknown method: said as the detector is built
        return options
    return {**options, "channels": False} if takes else options


def _options_key(options: dict[str, Any]) -> str:
    import json

    return json.dumps(options, sort_keys=True, default=str)


def _close_each(detectors: dict[tuple[str, str], Any]) -> None:
    """Closes every detector of a dict, emptying it; one that fails to close keeps no other open."""
    while detectors:
        try:
            detectors.popitem()[1].close()
        except Exception:  # noqa: BLE001 - at exit, or as a thread ends: the others must still close
            continue


class _Holder:
    """One thread's kept detectors; closed when the thread ends (its `_Kept` slot goes) or at exit."""

    def __init__(self) -> None:
        self.detectors: dict[tuple[str, str], Any] = {}
        # a thread per request (a web server's) left each its model and connections for good
        weakref.finalize(self, _close_each, self.detectors)


class _Kept(threading.local):
    """Per thread, (method, options) -> built detector, kept between calls.

    One dict for all threads let one thread's failed call close the detector (and its HTTP
    connections) another thread was using, whose healthy request then failed with "Bad file
    descriptor"; its `last_stats` were shared too. A thread makes one call at a time, so what
    it drops or evicts is never in use.
    """

    def __init__(self) -> None:
        self.holder = _Holder()


_KEPT = _Kept()
_KEEP = 8  # per thread
_ITEM_KEYS = frozenset({"answer", "model_output_text", "contexts", "question", "model_input", "lang", "id"})
# other words for a key, which no close match finds: {"language": "de"} ran as English
_SYNONYMS = {
    "language": "lang",
    "ctx": "contexts",
    "prompt": "question",
    # other datasets' words for the same columns: each was ignored, the item checked against nothing
    "query": "question",
    "documents": "contexts",
    "passages": "contexts",
    "evidence": "contexts",
    "response": "answer",
}
# the same, for the API calls' own arguments
_ARGUMENT_SYNONYMS = {"detector": "method", "context": "contexts", "references": "contexts"}


def _forget(key: tuple[str, str]) -> None:
    """Drops a kept detector (the next call builds it afresh), closing its connections or model."""
    det = _KEPT.holder.detectors.pop(key, None)
    if det is not None:
        det.close()


def _detector(method: str, options_json: str):
    """The detector for (method, options), built and checked once; the last few are kept."""
    import json

    from mushroom.detectors import build

    key = (method, options_json)
    kept = _KEPT.holder.detectors
    det = kept.pop(key, None)
    if det is None:
        det = build(method, json.loads(options_json))
        det.check_ready()  # what the CLI checks before a run: a device, a model folder, a URL
    kept[key] = det  # the most recently used last: the first is dropped past _KEEP
    while len(kept) > _KEEP:
        kept.pop(next(iter(kept))).close()  # its connections or model go with it
    return det


def _either(entry: dict[str, Any], name: str, record_name: str, k: int) -> Any:
    """An item's value under its API name or its record name; both given must agree.

    A question given twice, differently, was read from `question` alone, without a word: the
    spans found depend on it. A datasets row has both columns, None in the one not used.
    """
    given = [entry[key] for key in (name, record_name) if not records.left_out(entry.get(key))]
    if len(given) == 2 and all(isinstance(v, str) for v in given) and given[0] != given[1]:
        raise ValueError(f"item {k}: {name!r} and {record_name!r} differ; give one of them")
    return given[0] if given else entry.get(name, entry.get(record_name))


def _key_given(entry: dict[str, Any], name: str, record_name: str) -> str:
    """The key an item gave a value under, for messages: `model_input` was called "question"."""
    return record_name if records.left_out(entry.get(name)) and record_name in entry else name


def _text(value: Any, what: str, k: int) -> str:
    if records.left_out(value):
        return ""
    if not isinstance(value, str):
        # str() of None, NaN or a list became the question ("None", "nan", "['Italy']")
        raise TypeError(f"item {k}: {what} must be a string, not {type(value).__name__}")
    return value


def _contexts(value: Any, k: int = 0) -> list[Context]:
    """An item's contexts, in the forms `records.given_contexts` takes; a bad one names its item.

    A named source is what the lexical detector's `source_weights` and the fact-check
    reading go by.
    """
    try:
        given = records.given_contexts(value)
    except TypeError as exc:
        raise TypeError(f"item {k}: {exc}") from None
    return [
        _valid(k, Context, f"contexts[{j}]", source=source, text=text)
        for j, (source, text) in enumerate(given)
    ]


def _valid(k: int, record: type[Item] | type[Context], where: str | None = None, **fields: Any) -> Any:
    """A record of item `k`'s fields; a value no such record can hold is a ValueError with its place.

    A lone surrogate in the text or a language code that could name a path came out as
    pydantic's own error, with no item number.
    """
    from pydantic import ValidationError

    try:
        return record(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        field = f"{where}.{loc}" if where and loc else where or loc  # contexts[0].text, not contexts[0]
        raise ValueError(f"item {k}: {field}: {first['msg'].removeprefix('Value error, ')}") from None


def _misspelt_key(key: str, entry: dict) -> str | None:
    """The item key `key` looks a misspelling of, when that key is not given too.

    "langauge" (near "language") and "lnag" (difflib's ratio 0.75 to "lang") were taken as
    keys of the record's own, and the item ran as English. Only "language" among the
    synonyms is matched loosely: near the others are a dataset's own columns ("prompt_id",
    "passage"). A key near one that the item gives is a column of another use ("languages").
    """
    folded = key.lower()
    near = close_match(folded, sorted(_ITEM_KEYS), cutoff=0.8)
    if near is None and close_match(folded, ["language"], cutoff=0.8):
        near = "lang"
    if near is None:
        near = next((w for w in sorted(_ITEM_KEYS) if swapped_letters(folded, w)), None)
    return None if near is None or _given(near, entry) else near


def _given(key: str, entry: dict) -> bool:
    """Whether an item gives `key`, under its name or its record name (answer: model_output_text)."""
    also = {
        "answer": "model_output_text",
        "model_output_text": "answer",
        "question": "model_input",
        "model_input": "question",
    }
    return key in entry or also.get(key, key) in entry


SINGLE_ID = "item"  # detect()'s id when none is given


def _with_id(exc: Exception, k: int, entry: Any) -> Exception:
    """The error about item `k`, naming its id too: "item 0" alone sent a user counting rows.

    Not `detect()`'s own default id ("item"): a single call has no rows to count.
    """
    named = entry.get("id") if isinstance(entry, dict) else None
    said, prefix = str(exc), f"item {k}:"
    if type(exc) not in (TypeError, ValueError) or not said.startswith(prefix):
        return exc
    if isinstance(named, bool) or not isinstance(named, str | int) or named in ("", SINGLE_ID):
        return exc
    return type(exc)(f"item {k} (id {named!r}):{said[len(prefix) :]}")


def _item(k: int, entry: Any, lang: str) -> tuple[Item, list[Context]]:
    """One input of `detect_batch` as an Item and its contexts; a malformed one is a TypeError."""
    if isinstance(entry, Item):
        return entry, []
    if not isinstance(entry, dict):
        raise TypeError(
            f"item {k}: mushroom takes dicts with 'answer', 'contexts', 'question' (or Item records), "
            f"not {type(entry).__name__}"
        )
    # A misspelt "context" was ignored, and the item checked against nothing; the other keys of
    # a record from the data files (annotations, soft_labels, ...) are left alone.
    for key in sorted(set(entry) - _ITEM_KEYS - set(Item.model_fields)):
        # "Lang" or "ID" (a case apart) ran as English with an id of its own, unsaid
        folded = key.lower() if isinstance(key, str) else None
        near = (folded if folded in _ITEM_KEYS else _SYNONYMS.get(folded)) if folded else None
        if near is not None and _given(near, entry):
            near = None  # the key it would mean is given too: a column of some other use
        if isinstance(key, str) and (near := near or _misspelt_key(key, entry)):
            raise TypeError(
                f"item {k}: unknown key {key!r} (did you mean {near!r}?); an item has "
                f"{', '.join(sorted(_ITEM_KEYS))}"
            )
    answer = _either(entry, "answer", "model_output_text", k)
    if not isinstance(answer, str):
        given = next((key for key in ("answer", "model_output_text") if key in entry), None)
        if given is not None:  # `detect(None)`: the key is there, its value is not text
            raise TypeError(f"item {k}: {given} must be a string, not {type(answer).__name__}")
        keys = ", ".join(map(repr, list(entry)[:8])) or "none"
        raise TypeError(f"item {k}: needs an 'answer' string (its keys: {keys})")
    # a datasets row has every column, None where a record lacked it: missing, as documented
    item_lang = lang if records.left_out(entry.get("lang")) else entry["lang"]
    if not isinstance(item_lang, str) or not item_lang:
        raise TypeError(f"item {k}: lang must be a language code such as 'en', not {item_lang!r}")
    item_lang = language_code(item_lang)
    item_id = f"item-{k}" if records.left_out(entry.get("id")) else entry["id"]
    if isinstance(item_id, bool) or not isinstance(item_id, str | numbers.Integral) or item_id == "":
        raise TypeError(f"item {k}: id must be a non-empty string or an integer, not {item_id!r}")
    item = _valid(
        k,
        Item,
        None,
        id=str(item_id),
        lang=item_lang,
        model_input=_text(
            _either(entry, "question", "model_input", k), _key_given(entry, "question", "model_input"), k
        ),
        model_output_text=answer,
        # a record of the data files keeps the answering model's tokens and logits
        model_output_tokens=entry.get("model_output_tokens"),
        model_output_logits=entry.get("model_output_logits"),
    )
    contexts = entry.get("contexts")
    return item, _contexts(None if records.left_out(contexts) else contexts, k)


def detect_batch(
    items: Iterable[dict[str, Any] | Item],
    method: str = "lexical",
    lang: str = "en",
    **options: Any,
) -> list[Prediction]:
    """Detects hallucinated spans in many answers at once.

    Args:
        items: dicts with `answer` (or `model_output_text`), optional `contexts` (a string or
            a list of strings), `question` (or `model_input`), `lang` and `id`; or `Item`
            records, which carry no contexts.
        method: a registered detector name (`mushroom detectors` lists them).
        lang: the language of items that do not say.
        **options: detector options, as on the command line (`threshold=0.4`, `backend={...}`).

    Returns:
        One Prediction per item, in order.

    Warns (RuntimeWarning) where the command line would: items without contexts, a language
    mushroom does not know, most model output unusable.

    Raises:
        TypeError, ValueError: an item or argument of the wrong kind, named by its place.
        MushroomError: an unknown method or option, or a model that cannot be loaded.
        RunFailed: some items failed (a model call, or replies cut off, empty, unreadable or
            naming only text the answer does not hold); the others are in its `predictions`,
            each failure in its `errors`.
    """
    _check_call(items, method, "detect_batch", options, ("items", "method", "lang"))
    return _detect(items, method, lang, options)


DEFAULT_CHUNK = CHUNK_ITEMS  # a detector call as large as a run's


def detect_stream(
    items: Iterable[dict[str, Any] | Item],
    method: str = "lexical",
    lang: str = "en",
    chunk_size: int = DEFAULT_CHUNK,
    **options: Any,
) -> Iterator[Prediction]:
    """Detects hallucinated spans in an iterable of any length, a chunk at a time, lazily.

    `detect_batch` returns a list, so it must read and hold every item first: fine for a
    split, not for a corpus of a million answers read from a generator or a `datasets.Dataset`.
    This reads `chunk_size` items, runs them in one detector call (model-backed methods batch
    within it) and yields their predictions, in order, before reading the next chunk; memory
    holds one chunk. It is a separate function, not a lazy mode of `detect_batch`, so that
    `detect_batch(generator)` keeps returning a list its callers can index and `len()`.

    Args:
        items: what `detect_batch` takes, as any iterable; it is read once, in order.
        method: a registered detector name.
        lang: the language of items that do not say.
        chunk_size: items per detector call (and the most held at once).
        **options: detector options, as for `detect_batch`.

    Yields:
        One Prediction per item, in order.

    Raises:
        RunFailed: items of a chunk failed; the chunk's others are in its `predictions`, the
            earlier chunks' predictions were already yielded, later chunks are not read.
        ValueError: an id of an earlier chunk given again, said before the chunk runs (ids are
            kept, not items).
    """
    _check_call(items, method, "detect_stream", options, ("items", "method", "lang", "chunk_size"))
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, numbers.Integral) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, not {chunk_size!r}")
    chunk_size = int(chunk_size)  # a numpy integer, as offsets are taken
    _detector(method, _options_key(options))  # a wrong method or option is said now, not at next()
    return _stream(iter(items), method, lang, chunk_size, options)


def _stream(
    iterator: Iterator[dict[str, Any] | Item],
    method: str,
    lang: str,
    chunk_size: int,
    options: dict[str, Any],
) -> Iterator[Prediction]:
    """`detect_stream`'s generator; the call's arguments were checked before the first `next`."""
    first: dict[str, str] = {}  # every id so far: checked before a chunk's detection, not after
    start = 0
    while chunk := list(itertools.islice(iterator, chunk_size)):
        preds = _detect(chunk, method, lang, options, start=start, first=first)
        start += len(chunk)
        del chunk
        yield from preds


def _check_call(
    items: Any, method: Any, name: str, options: dict[str, Any], arguments: tuple[str, ...]
) -> None:
    """A TypeError for arguments no call could use (a DataFrame, a single item, a method that is no name)."""
    if not isinstance(method, str):
        raise TypeError(f"method must be a detector name such as 'lexical', not {method!r}")
    if isinstance(items, dict | str) or not isinstance(items, Iterable) or hasattr(items, "columns"):
        hint = " (for a DataFrame: df.to_dict('records'))" if hasattr(items, "columns") else ""
        if isinstance(items, dict) and items and all(hasattr(v, "column_names") for v in items.values()):
            hint = f" (a DatasetDict: give one split, e.g. items[{next(iter(items))!r}])"
        what = "an iterable" if name == "detect_stream" else "a list"
        raise TypeError(f"{name} takes {what} of items (dicts), not a {type(items).__name__}{hint}")
    _check_argument_names(options, method, name, arguments)


def _check_argument_names(
    options: dict[str, Any], method: str, name: str, arguments: tuple[str, ...]
) -> None:
    """A TypeError for an option that is one of the call's own arguments under another name.

    `detect(answer, context=...)` went to the detector as an option, and the error listed the
    lexical options, none of which was meant. A detector's own option of that name (the llm
    detector's `prompt`) is an option.
    """
    from mushroom.detectors import detector_class
    from mushroom.errors import MushroomError

    try:
        takes = set(detector_class(method).Options.model_fields)
    except MushroomError:  # an unknown method is said by the detector's build
        return
    for key in options:
        if key in takes:
            continue
        folded = key.lower()
        meant = folded if folded in arguments else _SYNONYMS.get(folded, _ARGUMENT_SYNONYMS.get(folded))
        meant = meant if meant in arguments else close_match(folded, list(arguments), cutoff=0.8)
        if meant is None and "lang" in arguments and close_match(folded, ["language"], cutoff=0.8):
            meant = "lang"  # "langauge": far from "lang", near its long form
        if meant is not None:
            raise TypeError(f"{name}() got an unexpected keyword argument {key!r} (did you mean {meant}=?)")
        if key == "chunk_size" and name == "detect_batch":  # read as a detector option
            raise TypeError(
                "detect_batch() got an unexpected keyword argument 'chunk_size': detect_stream "
                "takes it, and reads the items a chunk at a time"
            )


def _detect(
    items: Iterable[dict[str, Any] | Item],
    method: str,
    lang: str,
    options: dict[str, Any],
    start: int = 0,
    first: dict[str, str] | None = None,
) -> list[Prediction]:
    """`detect_batch` on checked arguments; its warnings point at the line that called the API.

    `start` is the place of the first item in the caller's whole input: an item without an
    id is named after it, so that a stream's chunks give distinct ids. `first` holds the ids
    of a stream's earlier chunks (id -> which item had it), and takes this chunk's.
    """
    import warnings

    from mushroom.data.contexts import support_contexts
    from mushroom.data.languages import LANGUAGES
    from mushroom.runs.service import partly_read_warning, unusable_warnings

    rows: list[Item] = []
    contexts: dict[str, list[Context]] = {}
    first = {} if first is None else first  # id -> how the first item holding it got it
    for k, entry in enumerate(items, start=start):
        try:
            item, ctx = _item(k, entry, lang)
        except (TypeError, ValueError) as exc:
            raise _with_id(exc, k, entry) from None
        # an id made for an item without one ("item-0") is no id "given": say whose it is
        made = isinstance(entry, dict) and records.left_out(entry.get("id"))
        whose = f"item {k}" + (" (made for it: it gives no id)" if made else "")
        if item.id in first:
            raise ValueError(
                f"items need distinct ids: {item.id!r} is the id of {first[item.id]} and of {whose}"
            )
        first[item.id] = whose
        rows.append(item)
        contexts[item.id] = ctx
    for code in sorted({it.lang for it in rows} - set(LANGUAGES)):
        warnings.warn(
            f"language {code!r}{unknown_language_hint(code)} is not one mushroom knows "
            f"({', '.join(LANGUAGES)}): no stopword list, "
            "calibration or word splitting of its own is used",
            RuntimeWarning,
            stacklevel=3,
        )
    weights = options.get("source_weights")
    names = {c.source for ctx in contexts.values() for c in ctx}
    if isinstance(weights, dict) and names:  # the CLI refuses them; here a chunk sees some items only
        unknown = sorted(set(weights) - names, key=str)
        if unknown:
            warnings.warn(
                f"source_weights: {unknown[0]!r} names no context of these items, so its weight is "
                "unused; contexts are named context0, context1, ... in the order each item gives them",
                RuntimeWarning,
                stacklevel=3,
            )
    key = (method, _options_key(_without_channels(method, options)))
    detector = _detector(*key)
    detector.new_call()  # a kept detector: this call's answers must not depend on the last one's
    said_before = len(getattr(detector, "warnings", []))  # a kept detector's list only grows
    # an empty or blank text, or fact-checks alone, supports nothing: as good as no context
    bare = sum(1 for it in rows if not support_contexts(contexts.get(it.id, [])))
    if bare and detector.needs_contexts:
        warnings.warn(
            f"{bare} of {len(rows)} items have no contexts that can support an answer (none, empty ones, "
            f"or fact-checks alone): {method} checks answers against contexts and has nothing to check "
            "these against",
            RuntimeWarning,
            stacklevel=3,
        )
    by_lang: dict[str, list[Item]] = {}
    for item in rows:
        by_lang.setdefault(item.lang, []).append(item)
    found: dict[str, records.Prediction] = {}
    errors: dict[str, str] = {}
    for code, group in by_lang.items():  # a detector call serves one language
        try:
            found.update(zip((it.id for it in group), detector.detect(group, contexts)))
        except RunFailed as exc:  # the language's other items, and the other languages, go on
            found.update(exc.predictions)
            errors.update(exc.errors)
            # a detector's own RunFailed may name no item: the rest of the language failed with it
            errors.update({it.id: str(exc) for it in group if it.id not in found and it.id not in errors})
        except MushroomError as exc:
            # A detector that failed as a whole (a model that could not be loaded) is built
            # afresh by the next call, which tries again; the others are kept. What other
            # languages gave is not lost: it comes with the RunFailed below.
            _forget(key)
            if not found:
                raise
            errors.update(
                {
                    it.id: str(exc)
                    for lang_items in by_lang.values()
                    for it in lang_items
                    if it.id not in found and it.id not in errors
                }
            )
            break
        for warning in unusable_warnings(f"{method} ({code})", detector.last_stats, in_run=False):
            warnings.warn(warning, RuntimeWarning, stacklevel=3)
        partly = partly_read_warning(f"{method} ({code})", detector.last_stats)
        if partly is not None:
            warnings.warn(partly, RuntimeWarning, stacklevel=3)
    # the detector's own warnings (a collapsed pyes calibration) reached runs only; a backend's
    # were warned as they happened
    told = {w for backend in detector.built_backends() for w in backend.warnings}
    for warning in dict.fromkeys(getattr(detector, "warnings", [])[said_before:]):
        if warning not in told:
            warnings.warn(warning, RuntimeWarning, stacklevel=3)
    texts = {item.id: item.model_output_text for item in rows}

    def with_text(pred: records.Prediction) -> Prediction:
        return Prediction(
            id=pred.id, soft_labels=pred.soft_labels, hard_labels=pred.hard_labels, text=texts[pred.id]
        )

    if errors:
        _forget(key)
        first = next(iter(errors))
        raise RunFailed(
            f"{method}: {len(errors)} of {len(rows)} items failed (first: {first}: {errors[first]}); "
            + (
                "the others are in the exception's `predictions` (id -> Prediction)"
                if found
                else "none was predicted"
            ),
            predictions={i: with_text(p) for i, p in found.items()},
            errors=errors,
        )
    return [with_text(found[item.id]) for item in rows]


def detect(
    answer: str,
    contexts: str | Sequence[str] | None = None,
    question: str = "",
    method: str = "lexical",
    lang: str = "en",
    id: str | int | None = None,  # noqa: A002 (the official records' name for it)
    **options: Any,
) -> Prediction:
    """Detects hallucinated spans in one answer.

    Args:
        answer: the LLM answer to check.
        contexts: background text(s) the answer should agree with; they are named context0,
            context1, ... where an option names sources (the lexical `source_weights`).
        question: the question the answer replies to (its words are not flagged).
        method: a registered detector name (`lexical`, `semantic`, `llm`, ...).
        lang: the answer's language code.
        id: the item's id, as its prediction's (default "item"): predictions of several
            calls go into one submission file under their own ids.
        **options: detector options (see `mushroom detectors`).

    Returns:
        The Prediction: `.hard_labels`, `.soft_labels`, `.probs`, `.spans`.

    Raises:
        TypeError: an argument of the wrong kind or name (a list as the answer, `contxts=`).
        ValueError: an argument that cannot be right (an id given twice).
        MushroomError: an unknown method or option, or a model that cannot be loaded.
        RunFailed: the model call failed, or every reply was cut off, empty, unreadable or
            named only text the answer does not hold; never an empty Prediction in its place.
    """
    item = {
        "id": SINGLE_ID if id is None else id,
        "answer": answer,
        "contexts": contexts,
        "question": question,
        "lang": lang,
    }
    arguments = ("answer", "contexts", "question", "method", "lang", "id")
    _check_call([item], method, "detect", options, arguments)
    return _detect([item], method, lang, options)[0]

"""The library API: one call from an answer and its contexts to hallucinated spans.

    import mushroom
    pred = mushroom.detect("Paris is the capital of Italy.", contexts=["Paris is the capital of France."],
                           question="What is Paris?", method="lexical")
    pred.hard_labels, pred.soft_labels, pred.probs

No run folder, no item files: the detector is built once per (method, options) and kept,
so calling `detect` in a loop does not reload a model. `detect_batch` sends many items at
once (model-backed methods batch their requests). A failed model call raises `RunFailed`
rather than returning an empty prediction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from pydantic import Field

from mushroom import records
from mushroom.errors import MushroomError
from mushroom.records import Context, Item


class Prediction(records.Prediction):
    """Spans of one answer, with the per-character probabilities as a list.

    `soft_labels` and `hard_labels` are in the official submission format (Python string
    indices, end exclusive); `probs[i]` is the probability that character `i` of `text` is
    part of a hallucination.
    """

    text: str = Field("", exclude=True)

    @property
    def probs(self) -> list[float]:
        from mushroom.spans import soft_to_vector

        return [float(v) for v in soft_to_vector(self.soft_labels, len(self.text))]

    @property
    def spans(self) -> list[tuple[int, int, str]]:
        """The hard spans with their text: [(start, end, text)]."""
        return [(s, e, self.text[s:e]) for s, e in self.hard_labels]


def _options_key(options: dict[str, Any]) -> str:
    import json

    return json.dumps(options, sort_keys=True, default=str)


@lru_cache(maxsize=8)
def _detector(method: str, options_json: str):
    import json

    from mushroom.detectors import build

    return build(method, json.loads(options_json))


def _contexts(value: str | Sequence[str] | None) -> list[Context]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"contexts must be a string or a list of strings, not {type(value).__name__}")
    return [Context(source=f"context{k}", text=str(text)) for k, text in enumerate(value)]


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
    """
    rows: list[Item] = []
    contexts: dict[str, list[Context]] = {}
    for k, entry in enumerate(items):
        if isinstance(entry, Item):
            rows.append(entry)
            continue
        answer = entry.get("answer", entry.get("model_output_text"))
        if not isinstance(answer, str):
            raise TypeError(f"item {k}: needs an 'answer' string")
        item = Item(
            id=str(entry.get("id", f"item-{k}")),
            lang=str(entry.get("lang", lang)),
            model_input=str(entry.get("question", entry.get("model_input", ""))),
            model_output_text=answer,
        )
        rows.append(item)
        contexts[item.id] = _contexts(entry.get("contexts"))
    if len({it.id for it in rows}) != len(rows):
        raise ValueError("items need distinct ids")
    detector = _detector(method, _options_key(options))
    out: list[Prediction] = []
    by_lang: dict[str, list[Item]] = {}
    for item in rows:
        by_lang.setdefault(item.lang, []).append(item)
    found: dict[str, records.Prediction] = {}
    try:
        for group in by_lang.values():  # a detector call serves one language
            for item, pred in zip(group, detector.detect(group, contexts)):
                found[item.id] = pred
    except MushroomError:
        # the detector is kept between calls; one that failed (a model that could not be
        # loaded, a server that was down) is built afresh by the next call, which retries
        _detector.cache_clear()
        raise
    for item in rows:
        pred = found[item.id]
        out.append(
            Prediction(
                id=pred.id,
                soft_labels=pred.soft_labels,
                hard_labels=pred.hard_labels,
                text=item.model_output_text,
            )
        )
    return out


def detect(
    answer: str,
    contexts: str | Sequence[str] | None = None,
    question: str = "",
    method: str = "lexical",
    lang: str = "en",
    **options: Any,
) -> Prediction:
    """Detects hallucinated spans in one answer.

    Args:
        answer: the LLM answer to check.
        contexts: background text(s) the answer should agree with.
        question: the question the answer replies to (its words are not flagged).
        method: a registered detector name (`lexical`, `semantic`, `llm`, ...).
        lang: the answer's language code.
        **options: detector options (see `mushroom detectors`).

    Returns:
        The Prediction: `.hard_labels`, `.soft_labels`, `.probs`, `.spans`.
    """
    item = {"id": "item", "answer": answer, "contexts": contexts, "question": question, "lang": lang}
    return detect_batch([item], method=method, lang=lang, **options)[0]

"""The `nli` detector: each sentence or clause of the answer checked against the contexts by NLI.

Claim-level grounding as in the NLI-based Mu-SHROOM systems: the context is the premise, the
answer piece the hypothesis. A long context is cut into chunks that fit the model's window
together with the piece (whole context sentences per chunk where possible); over all chunks
of all contexts the piece keeps its best entailment and its strongest contradiction, since
one supporting passage is enough and one contradicting passage is a strong signal. The piece
probability is P(contradiction) of the strongest chunk plus `neutral_weight` times P(neutral)
of the best-entailing chunk, clipped to 1: neutral means "the context does not say", which
is weaker evidence than a contradiction.

The three parts are also kept apart, since "the context does not say" is no verdict of
falsehood: each piece is supported, contradicted or unverifiable (whichever of best
entailment, strongest contradiction and the best-entailing chunk's neutral is largest),
counted per piece (`nli.supported`, `nli.contradicted`, `nli.unverifiable`), the
unverifiable pieces listed in the item's record (`detail["unverifiable"]`), and
P(neutral) and P(contradiction) written as evidence channels of their own (`neutral`,
`contradiction`, beside `piece`), which the stack weighs separately. An item with no
usable context scores 0 and is counted as `context.none`.

The label order is read from the model's config (`id2label`), never assumed: MNLI and XNLI
checkpoints disagree on it. Recommended checkpoints (not downloadable here; any local folder
works): `microsoft/deberta-large-mnli` or `cross-encoder/nli-deberta-v3-base` for English,
`MoritzLaurer/mDeBERTa-v3-base-xnli-multilingual-nli-2mil7` for all 14 languages.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from mushroom.data.contexts import support_contexts
from mushroom.data.records import Context, Item
from mushroom.detectors.base import DetectorOptions, HardThreshold, VectorDetector
from mushroom.detectors.pieces import Unit, answer_pieces, paint
from mushroom.errors import MushroomError, load_failure
from mushroom.models.devices import check_device, check_encoder_model
from mushroom.text.segment import sentences


class NLIOptions(DetectorOptions):
    """Options of the nli detector."""

    model: str = Field(..., description="sequence-classification NLI model: folder or hub name")
    device: str | None = Field(None, description="cpu, cuda, ... (default: cuda if available)")
    batch_size: int = Field(16, ge=1)
    max_length: int | None = Field(None, ge=16, description="window in tokens (default: the model's)")
    unit: Unit = Field("sentence", description="sentence or clause")
    neutral_weight: float = Field(0.5, ge=0.0, le=1.0, description="weight of P(neutral) in the piece score")
    threshold: HardThreshold = Field(0.5, description="hard label: probability above this")


def _folder_config(folder: Path, model: str) -> dict[str, Any]:
    """A local model folder's config.json, read as JSON (no weights, no torch)."""
    import json

    path = folder / "config.json"
    where = f"nli option model {model!r}"
    if not path.is_file():
        raise MushroomError(f"{where}: {folder} has no config.json, so it is no transformers model folder")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MushroomError(f"{where}: {path} cannot be read as JSON ({exc})") from None
    if not isinstance(config, dict):
        raise MushroomError(f"{where}: {path} is not a JSON object")
    return config


def label_indices(id2label: Any) -> dict[str, int]:
    """Entailment / neutral / contradiction -> output index, from the config's id2label.

    A config file is read as JSON: a list, or a key that is no number, is refused as such.
    """
    if not isinstance(id2label, dict):
        raise MushroomError(f"the NLI model's id2label {id2label!r} is no mapping of output index to label")
    found: dict[str, int] = {}
    for idx, label in id2label.items():
        name = str(label).lower()
        for key in ("entail", "neutral", "contradict"):
            if name.startswith(key[:7]):
                try:
                    found[key] = int(idx)
                except (TypeError, ValueError):
                    raise MushroomError(
                        f"the NLI model's id2label {dict(id2label)} has {idx!r} for an output index"
                    ) from None
    missing = [k for k in ("entail", "neutral", "contradict") if k not in found]
    if missing:
        raise MushroomError(
            f"the NLI model's id2label {dict(id2label)} has no label for {missing}; "
            "an NLI checkpoint names entailment, neutral and contradiction"
        )
    return {"entailment": found["entail"], "neutral": found["neutral"], "contradiction": found["contradict"]}


_VERDICTS = ("supported", "unverifiable", "contradicted")
"""A piece's verdict by the largest of its [entailment, neutral, contradiction]."""


class NLIDetector(VectorDetector):
    """Sentence/clause NLI against chunked contexts.

    How, and why so, is in the module docstring.
    """

    name = "nli"
    needs_contexts = True
    without_context = "flags nothing in them"
    Options = NLIOptions
    options: NLIOptions

    def __init__(self, options: NLIOptions, model: Any = None, tokenizer: Any = None):
        super().__init__(options)
        self._model = model
        self._tokenizer = tokenizer
        self._load_error: str | None = None

    def check_ready(self, sources: Sequence[str] | None = None, out: Path | None = None) -> None:
        """Also refuses a device this torch cannot use and a model folder that does not exist.

        Found item by item, either failed every item with the hub client's words for it.
        """
        super().check_ready(sources, out)
        if self.options.device is not None:
            check_device(self.options.device, "nli option device")
        check_encoder_model(self.options.model, "nli option model", nli=True)
        folder = Path(self.options.model).expanduser()
        if folder.is_dir():  # read without loading: a folder of no NLI model left a run folder behind
            from mushroom.models.embedding import folder_window_limit

            config = _folder_config(folder, self.options.model)  # read once: labels and window
            self._check_model(config.get("id2label"), folder_window_limit(str(folder), config))

    def _check_model(self, id2label: Any, most: int | None) -> None:
        """Refuses a model without NLI labels, or one that reads fewer tokens than `max_length`.

        A `max_length` past the model's positions failed every item with a tensor-size error,
        and the advice to run again failed the same way.
        """
        try:
            label_indices(id2label)
        except MushroomError as exc:
            raise MushroomError(f"nli option model {self.options.model!r}: {exc}") from None
        if self.options.max_length and most is not None and self.options.max_length > most:
            raise MushroomError(
                f"nli option max_length {self.options.max_length} is more than the {most} tokens the "
                f"model {self.options.model!r} reads at once; leave it out (the model's own) or give at "
                f"most {most}"
            )

    def _load(self) -> None:
        if self._model is not None and self._tokenizer is not None:
            return
        if self._load_error is None:  # a failed load is not tried again (see Encoder._load)
            from transformers import AutoModelForSequenceClassification, AutoTokenizer

            name = self.options.model
            try:
                self._tokenizer = self._tokenizer or AutoTokenizer.from_pretrained(name)
                self._model = self._model or AutoModelForSequenceClassification.from_pretrained(name)
            except Exception as exc:
                self._load_error = load_failure("NLI model", name, exc)
            else:  # a hub model's config is known only now
                from mushroom.models.embedding import window_limit

                try:
                    self._check_model(self._model.config.id2label, window_limit(self._tokenizer, self._model))
                except MushroomError as exc:
                    self._load_error = str(exc)
                    self._model = self._tokenizer = None  # the next call says so too, loading nothing
        if self._load_error is not None:
            raise MushroomError(self._load_error)

    @property
    def window(self) -> int:
        limit = self.options.max_length or getattr(self._tokenizer, "model_max_length", 512)
        return int(min(limit, 4096))

    def chunks(self, context: str, hypothesis: str) -> list[str]:
        """Context chunks that fit the window beside the hypothesis (whole sentences if possible)."""
        tok = self._tokenizer
        budget = self.window - len(tok(hypothesis, add_special_tokens=False)["input_ids"]) - 4
        budget = max(budget, 8)
        out: list[str] = []
        current: list[str] = []
        used = 0
        for sent in sentences(context):
            ids = tok(sent.text, add_special_tokens=False)["input_ids"]
            if len(ids) > budget:  # a sentence longer than the window: cut by tokens
                if current:
                    out.append(" ".join(current))
                    current, used = [], 0
                for k in range(0, len(ids), budget):
                    out.append(tok.decode(ids[k : k + budget]))
                continue
            if used + len(ids) > budget and current:
                out.append(" ".join(current))
                current, used = [], 0
            current.append(sent.text)
            used += len(ids)
        if current:
            out.append(" ".join(current))
        return out

    def _probs(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        import torch

        model = self._model
        device = self.options.device or ("cuda" if torch.cuda.is_available() else "cpu")
        model.to(device)
        model.eval()
        out = []
        with torch.inference_mode():
            for k in range(0, len(pairs), self.options.batch_size):
                batch = pairs[k : k + self.options.batch_size]
                enc = self._tokenizer(
                    [p for p, _ in batch],
                    [h for _, h in batch],
                    truncation=True,
                    max_length=self.window,
                    padding=True,
                    return_tensors="pt",
                ).to(device)
                out.append(torch.softmax(model(**enc).logits.float(), dim=-1).cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 3))

    def piece_scores(self, item: Item, contexts: list[Context]) -> tuple[list, list[float]]:
        """The answer's pieces and each one's hallucination probability (0 without context)."""
        pieces, evidence = self.piece_evidence(item, contexts)
        if evidence is None:
            return pieces, [0.0] * len(pieces)
        return pieces, [self._score(row) for row in evidence]

    def _score(self, row: np.ndarray) -> float:
        """P(contradiction) plus `neutral_weight` times P(neutral), clipped to 1."""
        return float(min(row[2] + self.options.neutral_weight * row[1], 1.0))

    def piece_evidence(self, item: Item, contexts: list[Context]) -> tuple[list, np.ndarray | None]:
        """The answer's pieces and, per piece, [entailment, neutral, contradiction].

        Entailment and neutral are those of the best-entailing chunk, contradiction the
        strongest over all chunks; None when there is no context (or no piece) to compare.
        """
        self._load()
        idx = label_indices(self._model.config.id2label)
        pieces = answer_pieces(item.model_output_text, self.options.unit)
        texts = [c.text for c in support_contexts(contexts)]
        if not texts or not pieces:
            return pieces, None
        pairs, owner = [], []
        for k, piece in enumerate(pieces):
            for text in texts:
                for chunk in self.chunks(text, piece.text):
                    pairs.append((chunk, piece.text))
                    owner.append(k)
        probs = self._probs(pairs)
        owner_arr = np.array(owner)
        evidence = np.zeros((len(pieces), 3))
        for k in range(len(pieces)):
            rows = probs[owner_arr == k]
            best = rows[np.argmax(rows[:, idx["entailment"]])]
            contradiction = rows[:, idx["contradiction"]].max()
            evidence[k] = [best[idx["entailment"]], best[idx["neutral"]], contradiction]
        return pieces, evidence

    def item_vector(self, item: Item, contexts: list[Context]) -> np.ndarray:
        """Per-character probability (each piece's score); records the evidence and verdicts."""
        pieces, evidence = self.piece_evidence(item, contexts)
        n = len(item.model_output_text)
        stats = {"nli.pieces": len(pieces)}
        if evidence is None:
            zeros = [0.0] * len(pieces)
            vec = paint(n, pieces, zeros)
            self.channels[item.id] = {"piece": vec, "neutral": vec.copy(), "contradiction": vec.copy()}
            # each piece is supported, contradicted or unverifiable: these were checked against
            # nothing (`VectorDetector.run` counts the item as `context.none`)
            none = {"nli.unverifiable": len(pieces)} if not support_contexts(contexts) else {}
            self.item_stats[item.id] = {**stats, **none}
            return vec
        vec = paint(n, pieces, [self._score(row) for row in evidence])
        self.channels[item.id] = {
            "piece": vec,
            "neutral": paint(n, pieces, [float(row[1]) for row in evidence]),
            "contradiction": paint(n, pieces, [float(row[2]) for row in evidence]),
        }
        unverifiable = []
        for piece, row in zip(pieces, evidence):
            verdict = _VERDICTS[int(np.argmax(row))]
            stats[f"nli.{verdict}"] = stats.get(f"nli.{verdict}", 0) + 1
            if verdict == "unverifiable":
                reason = f"no context passage entails or contradicts it (P(neutral) {row[1]:.2f})"
                unverifiable.append(
                    {"start": piece.start, "end": piece.end, "text": piece.text, "reason": reason}
                )
        self.item_stats[item.id] = stats
        self.item_details[item.id] = {"unverifiable": unverifiable}
        return vec

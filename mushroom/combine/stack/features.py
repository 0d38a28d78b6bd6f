"""Per-character features of the stack: member evidence, members together, neighbourhood, text.

Features come from each member run's written files (soft probability, hard label, and the
evidence channels some detectors write next to their predictions: the lexical detector's
word frequency, word-pair and sentence evidence, the semantic detector's similarities), from
the members together (mean, vote share, max), from the neighbourhood (the mean probability
around the character, the item's maximum, the mean pooled over the word and the sentence),
from the text (number, capitalised word, function word, negation, word length, place in its
sentence), from the answering model's own token logits when the item carries them
(`mushroom.text.logits`), and the language as a one-hot (pooled model: languages without
labelled data use the shared weights).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mushroom.combine.stack.members import Member, MemberEvidence, load_member_evidence
from mushroom.data.channels import channel_files
from mushroom.data.predictions import prediction_vectors
from mushroom.data.records import Item
from mushroom.data.spans import soft_to_vector
from mushroom.errors import MushroomError
from mushroom.text.logits import LOGIT_FEATURES, logit_columns
from mushroom.text.negation import negation_mask
from mushroom.text.segment import sentences
from mushroom.text.stopwords import stopwords
from mushroom.text.tokenize import tokenize

_WINDOW = 8  # characters on each side for the neighbourhood mean

TEXT_FEATURES = [
    "is_number",
    "is_capitalised",
    "is_stopword",
    "is_negation",
    "word_length",
    "word_mean",
    "sentence_mean",
    "sentence_position",
    "first_sentence",
    "answer_length",
    *LOGIT_FEATURES,
]


def _neighbour_mean(vec: np.ndarray) -> np.ndarray:
    n = len(vec)
    csum = np.concatenate([[0.0], np.cumsum(vec)])
    lo = np.clip(np.arange(n) - _WINDOW, 0, n)
    hi = np.clip(np.arange(n) + _WINDOW + 1, 0, n)
    return (csum[hi] - csum[lo]) / np.maximum(hi - lo, 1)


def item_features(
    item: Item,
    member_data: list[MemberEvidence],
    channel_names: list[list[str]],
    languages: list[str],
) -> np.ndarray:
    """Feature matrix (characters x features) of one item; see `feature_names` for columns."""
    text = item.model_output_text
    n = len(text)
    cols: list[np.ndarray] = []
    softs, masks = [], []
    for (pred, chans), names in zip(member_data, channel_names):
        soft, mask = prediction_vectors(pred, n)
        softs.append(soft)
        masks.append(mask.astype(float))
        cols += [soft, mask.astype(float)]
        cols += [chans.get(name, np.zeros(n)) for name in names]
    mean = np.mean(softs, axis=0)
    cols += [mean, np.mean(masks, axis=0), np.max(softs, axis=0), _neighbour_mean(mean)]
    cols.append(np.full(n, mean.max() if n else 0.0))
    cols.append(np.array([ch.isalnum() for ch in text], dtype=float))
    cols.append(np.arange(n) / max(n - 1, 1))
    cols += [np.full(n, float(item.lang == lang)) for lang in languages]
    # Language-specific slopes: a probability from the lexical table means different
    # things in languages whose annotators marked more or less.
    cols += [mean * float(item.lang == lang) for lang in languages]
    cols += _text_columns(item, mean)
    return np.stack(cols, axis=1) if n else np.zeros((0, len(cols)))


def _text_columns(item: Item, mean: np.ndarray) -> list[np.ndarray]:
    """Each character's word kind, pooled evidence, place in its sentence and model confidence.

    Annotators mark numbers, names and dates far more often than function words, negations
    far more often than other function words (`mushroom.text.negation`), and they
    mark whole words: a detector's evidence varies inside a word (the lexical table grades
    characters of a compound differently) while the gold label rarely does. Pooling the mean
    over the word and the sentence lets the model smooth along the units annotators used.
    """
    text = item.model_output_text
    n = len(text)
    is_num, is_cap, is_stop, length, word_mean = (np.zeros(n) for _ in range(5))
    function_words = stopwords(item.lang)
    for tok in tokenize(text):
        span = slice(tok.start, tok.end)
        is_num[span] = tok.kind == "num"
        is_cap[span] = tok.text[:1].isupper()
        is_stop[span] = tok.norm in function_words
        length[span] = min(len(tok.text), 15) / 15
        word_mean[span] = mean[span].mean()
    sentence_mean, position, first = np.zeros(n), np.zeros(n), np.zeros(n)
    for k, piece in enumerate(sentences(text)):
        sentence_mean[piece.start : piece.end] = mean[piece.start : piece.end].mean()
        position[piece.start : piece.end] = np.arange(piece.end - piece.start) / max(
            piece.end - piece.start, 1
        )
        first[piece.start : piece.end] = float(k == 0)
    logits = logit_columns(text, item.model_output_tokens, item.model_output_logits)
    size = np.full(n, min(np.log1p(n) / 8.0, 1.0))
    negation = negation_mask(text, item.lang)
    return [
        is_num,
        is_cap,
        is_stop,
        negation,
        length,
        word_mean,
        sentence_mean,
        position,
        first,
        size,
        *logits.T,
    ]


POOLED = ["mean_prob", "vote_share", "max_prob", "neighbour_mean", "item_max", "is_alnum", "position"]
"""The columns over all members, after each member's own and before the language columns."""
POOLED_FEATURES = len(POOLED)


def feature_names(members: list[str], channels: list[list[str]], languages: list[str]) -> list[str]:
    """Column names matching `item_features`."""
    names = []
    for member, chans in zip(members, channels):
        names += [f"{member}.prob", f"{member}.hard"] + [f"{member}.{c}" for c in chans]
    names += POOLED
    names += [f"lang={lang}" for lang in languages] + [f"mean_prob*lang={lang}" for lang in languages]
    return names + TEXT_FEATURES


def member_columns(channels: list[list[str]]) -> list[int]:
    """Column of each member's probability (its hard label is the next column)."""
    cols, pos = [], 0
    for chans in channels:
        cols.append(pos)
        pos += 2 + len(chans)
    return cols


@dataclass
class StackData:
    """Features of a labelled or unlabelled set of items, with their item boundaries."""

    items: list[Item]
    features: list[np.ndarray]

    def stacked(self, idx: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(features, gold, weights) of the chosen items; each item weighs the same in total."""
        xs, ys, ws = [], [], []
        for k in idx:
            item, feats = self.items[k], self.features[k]
            n = len(item.model_output_text)
            if n == 0:
                continue
            xs.append(feats)
            ys.append(soft_to_vector(item.soft_labels or [], n))
            ws.append(np.full(n, 1.0 / n))
        return np.vstack(xs), np.concatenate(ys), np.concatenate(ws)


def expected_channels(by_lang: dict[str, list[str]], lang: str) -> set[str]:
    """The channels a member's run must hold for `lang`, from what it held when the stack was fitted.

    A language the stack was not fitted on (a test-only language) is owed only the channels
    the member wrote for every fitted language; one it was fitted on, what it had then.
    """
    if lang in by_lang:
        return set(by_lang[lang])
    sets = [set(names) for names in by_lang.values()]
    return set.intersection(*sets) if sets else set()


def load_stack_data(
    members: list[Member],
    split: str,
    data: dict[str, list[Item]],
    channels: list[list[str]] | None,
    languages: list[str],
    fitted_channels: dict[str, dict[str, list[str]]] | None = None,
    warn: Callable[[str], None] | None = None,
) -> tuple[StackData, list[list[str]], list[dict[str, list[str]]]]:
    """Features of every item of the split; channel names default to those found in files.

    `fitted_channels` (member -> language -> channels when the stack was fitted) checks the
    runs a stack is applied to language by language; a stack saved before it was recorded
    has its runs checked over all languages together. `warn` is told of languages where a
    member wrote no channels while it did elsewhere.

    Returns:
        The features, the channel names of each member (in feature order) and the channels
        each member's files hold per language (what a fitted stack records).
    """
    per_member, found = load_member_evidence(members, split, data)
    if channels is not None:
        check_channels(members, split, channels, found, fitted_channels, warn)
    union = [sorted({c for names in have.values() for c in names}) for have in found]
    names = channels if channels is not None else union
    all_items = [it for items in data.values() for it in items]
    feats = [
        item_features(it, [per_member[k][it.id] for k in range(len(members))], names, languages)
        for it in all_items
    ]
    return StackData(all_items, feats), names, found


def check_channels(
    members: list[Member],
    split: str,
    channels: list[list[str]],
    found: list[dict[str, list[str]]],
    fitted_channels: dict[str, dict[str, list[str]]] | None = None,
    warn: Callable[[str], None] | None = None,
) -> None:
    """Refuses member runs that lack evidence channels a fitted stack was fitted with.

    `channels` are each member's channels in the stack's features; `found`, the channels each
    member's files hold per language. Checked before any item is predicted, so a stack
    applied a chunk at a time refuses as early as one applied whole.
    """
    # Applying a fitted stack: a member run without the channels it was fitted with (an
    # older version, or the lexical detector with channels=false) would give all-zero
    # features and silently worse labels.
    for member, wanted, have in zip(members, channels, found):
        fitted = fitted_channels.get(member.name) if fitted_channels else None
        if fitted is not None:
            owed = {lang: expected_channels(fitted, lang) for lang in have}
            gaps = {lang: owed[lang] - set(have[lang]) for lang in have}
        else:
            owed = {"": set(wanted)}
            gaps = {"": set(wanted) - {c for names in have.values() for c in names}}
        gaps = {lang: names for lang, names in gaps.items() if names}
        # A language the stack was not fitted on is owed what the member wrote in every fitted
        # one, but a member may write a channel in some languages only by design (the semantic
        # member's English encoder): a stack fitted on English alone owes German its English
        # channels, which no run can give. Its features there are zeros, as said. (A run of an
        # older version that lacks a newer channel is said, not refused, there too: the stack
        # cannot tell the two apart in a language it has no record of.)
        writes_channels = bool(channel_files(member.folder(split) / "raw"))
        # (a run with channels off altogether is refused below)
        unseen = sorted(lang for lang in gaps if lang and writes_channels and lang not in (fitted or {}))
        if unseen and warn is not None:
            lacking = sorted({c for lang in unseen for c in gaps[lang]})
            warn(
                f"{member.folder(split)}: member {member.name!r} has no channels {', '.join(lacking)} "
                f"for {', '.join(unseen)}, which the stack was not fitted on; it was fitted with them on "
                f"{', '.join(sorted(fitted or {}))}, and sees zeros there (a stack fitted "
                "on such languages too learns what their absence means)"
            )
        gaps = {lang: names for lang, names in gaps.items() if lang not in unseen}
        # A language with none of its channels from a run that writes channels (it has a
        # channel file of some language): the member wrote them for no item there (no item
        # had contexts, say), and its features are zeros, as they were for such items when
        # the stack was fitted. A run with no channel file at all (channels off, an older
        # version) is refused below.
        empty = sorted(lang for lang in gaps if lang and not have[lang])
        if empty and writes_channels:
            if warn is not None:
                warn(
                    f"{member.folder(split)}: member {member.name!r} has no evidence channels for "
                    f"{', '.join(empty)} (did no item there have contexts?): the stack sees none of "
                    "its evidence there"
                )
            gaps = {lang: names for lang, names in gaps.items() if lang not in empty}
        missing = sorted({c for names in gaps.values() for c in names})
        if missing:
            where = ", ".join(lang for lang in sorted(gaps) if lang)
            raise MushroomError(
                f"{member.folder(split)}: the stack was fitted with the evidence of member "
                f"{member.name!r}, channels {', '.join(missing)}, which this run of it lacks"
                + (f" (language {where})" if where else "")
                + "; run the member again with this version and its default options, or fit the stack "
                "on runs like it"
            )

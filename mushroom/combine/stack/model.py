"""The stack's model: per-character features -> probability, fitted on val and saved as JSON.

Hand-tuned mixing weights overfit whatever the tuner looked at last; the model is fitted
once, cross-validated by item, and saved with the run so the same model is applied to test.
The target is the gold soft probability (annotator share), so the model learns the
annotators' rate rather than a majority label. Three kinds: a weighted logistic regression
(`LinearScorer`), boosted trees (`mushroom.combine.stack.trees`) and their mean (`BlendScorer`,
the default).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from mushroom.combine.stack.empty import EmptyRule
from mushroom.combine.stack.features import StackData
from mushroom.combine.stack.logistic import check_shapes, design, fit_logistic, predict
from mushroom.combine.stack.trees import TreeScorer, TreeSettings, fit_trees
from mushroom.detectors.base import HardThreshold
from mushroom.errors import MushroomError, did_you_mean

ModelKind = Literal["blend", "trees", "logistic"]
MODEL_KINDS: tuple[str, ...] = get_args(ModelKind)
Probability = Annotated[float, Field(ge=0.0, le=1.0)]


def check_model_kind(kind: str, where: str = "stack model") -> ModelKind:
    """`kind` if it names a model kind; otherwise an error listing the kinds."""
    if kind not in MODEL_KINDS:
        raise MushroomError(
            f"{where} {kind!r}{did_you_mean(kind, MODEL_KINDS)}: choose {', '.join(MODEL_KINDS[:-1])} "
            f"or {MODEL_KINDS[-1]}"
        )
    return kind  # type: ignore[return-value]


class LinearScorer(BaseModel):
    """A fitted logistic regression on standardised features."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["logistic"] = "logistic"
    coef: list[float]
    mean: list[float] = Field(description="feature means used for standardising")
    scale: list[float] = Field(description="feature scales used for standardising")
    l2: float = 1.0

    @model_validator(mode="after")
    def _shapes_agree(self) -> LinearScorer:
        # a hand-edited stack.json failed at apply time as "internal error: operands could not
        # be broadcast together"
        if not {"coef", "mean", "scale"} <= self.__dict__.keys():
            return self  # put together with `model_construct`
        check_shapes(self.coef, self.mean, self.scale)
        return self

    def __call__(self, feats: np.ndarray) -> np.ndarray:
        """Per-character probability of one feature matrix."""
        return predict(np.array(self.coef), np.array(self.mean), np.array(self.scale), feats)


class BlendScorer(BaseModel):
    """The mean of a logistic model and boosted trees fitted on the same characters.

    The two err differently: the linear model ranks smoothly but cannot see interactions,
    the trees see interactions but rank in steps. Their mean ranked characters better (Cor)
    than either on val; see `mushroom.combine.stack.trees` for the figures.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["blend"] = "blend"
    linear: LinearScorer
    trees: TreeScorer
    weight: float = Field(0.5, ge=0.0, le=1.0, description="share of the logistic model")

    def __call__(self, feats: np.ndarray) -> np.ndarray:
        """Per-character probability of one feature matrix."""
        return self.weight * self.linear(feats) + (1 - self.weight) * self.trees(feats)


Scorer = Annotated[LinearScorer | TreeScorer | BlendScorer, Field(discriminator="kind")]


class StackModel(BaseModel):
    """A fitted stack, saved as JSON with the run."""

    model_config = ConfigDict(extra="forbid")

    members: list[str] = Field(description="member names, in feature order")
    channels: dict[str, list[str]] = Field(description="member -> channel names used")
    channels_by_lang: dict[str, dict[str, list[str]]] = Field(
        default_factory=dict,
        description="member -> language -> channel names its files held when fitted (empty in "
        "stacks saved before: their runs are checked over all languages together)",
    )
    channel_use: dict[str, dict[str, dict[str, float]]] = Field(
        default_factory=dict,
        description="member -> language -> channel -> share of the fitted items where it is non-zero "
        "(a run applied with none of a channel the fit saw on most items is said; empty in stacks "
        "saved before)",
    )
    member_detectors: dict[str, str] = Field(
        default_factory=dict,
        description="member -> the detector its run was made with, where its run folder says so "
        "(a run of another detector given for a member is refused when the stack is applied)",
    )
    member_settings: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="member -> its run's detector options and context sources, where its run folder "
        "says so (a run made otherwise is warned of when the stack is applied; empty in stacks "
        "saved before)",
    )
    languages: list[str] = Field(description="languages with a one-hot feature")
    features: list[str]
    scorer: Scorer | None = Field(None, description="the fitted model (None in stacks saved before trees)")
    threshold: HardThreshold = Field(description="hard-label threshold for languages without their own")
    floor: Probability = Field(description="probability floor for languages without their own")
    thresholds: dict[str, HardThreshold] = Field(default_factory=dict, description="per-language threshold")
    floors: dict[str, Probability] = Field(default_factory=dict, description="per-language floor")
    hard_from: str = Field(
        "stack",
        description="for languages without their own choice: 'stack' (its own threshold) or the "
        "member whose hard labels are kept",
    )
    hard_sources: dict[str, str] = Field(default_factory=dict, description="per-language hard_from")
    empty_rule: EmptyRule | None = Field(
        None,
        description="item-level rule emptying hard labels (stack.empty); None in stacks saved before",
    )
    cv: dict[str, dict[str, float]] = Field(default_factory=dict, description="cross-validated val scores")
    fitted_on: str = ""
    fingerprint: str = Field("", description="hash of the inputs it was fitted from (stack_fingerprint)")
    config: dict = Field(default_factory=dict, description="the StackConfig it was fitted with")
    word_pooling: bool = Field(
        False, description="probabilities pooled over each word (max); False for stacks saved before"
    )
    fitted_members: list[str] = Field(
        default_factory=list,
        description="every member given when it was fitted, in order, where some are left out "
        "(empty: the same as `members`); the stack is applied with all of them",
    )
    gate: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="each model-backed member it could leave out -> whether it was kept, and the "
        "out-of-fold IoU with and without it that decided (stack.fit.gate_members)",
    )
    unseen_hard: StackModel | None = Field(
        None,
        description="the stack fitted without language columns, whose hard labels a language not "
        "in `languages` takes (its soft labels stay this stack's); None in stacks saved before",
    )

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        # Stacks saved before the model kinds kept a logistic model in these keys; they load
        # (and `apply_stack` asks for a refit, since their features differ) instead of
        # failing as "not a stack".
        if isinstance(data, dict) and "coef" in data:
            data = {k: v for k, v in data.items() if k not in ("coef", "mean", "scale", "l2")}
        return data

    @model_validator(mode="after")
    def _names_and_shapes_agree(self) -> StackModel:
        # A hand-edited stack.json failed at apply time as "internal error: KeyError" (a hard
        # label source that is no member) or a broadcast error (a scorer of other features).
        # (pydantic runs this on an instance put together with `model_construct` too: what
        # that left out is not checked.)
        if not {"members", "features", "hard_from", "hard_sources", "scorer"} <= self.__dict__.keys():
            return self
        sources = ("stack", *self.members)
        for field_name, value in (
            ("hard_from", self.hard_from),
            *((f"hard_sources.{lang}", src) for lang, src in self.hard_sources.items()),
        ):
            if value not in sources:
                raise ValueError(
                    f"{field_name}: {value!r} is neither 'stack' nor a member ({', '.join(self.members)})"
                )
        n = len(self.features)
        linear = self.scorer.linear if isinstance(self.scorer, BlendScorer) else self.scorer
        if isinstance(linear, LinearScorer) and len(linear.mean) != n:
            raise ValueError(f"scorer: its logistic model has {len(linear.mean)} features, the stack {n}")
        trees = self.scorer.trees if isinstance(self.scorer, BlendScorer) else self.scorer
        if isinstance(trees, TreeScorer) and any(f >= n for t in trees.trees for f in t.feature):
            raise ValueError(f"scorer: a tree splits on a feature past the stack's {n}")
        other = self.unseen_hard if "unseen_hard" in self.__dict__ else None
        if other is not None and (other.members != self.members or other.languages):
            # it reads this stack's features less the language columns: of other members, or
            # with language columns of its own, it would read the wrong columns (a hand edit)
            raise ValueError(
                "unseen_hard: the second stack must have the same members and no languages "
                f"(it has members {other.members}, languages {other.languages})"
            )
        return self

    def gate_summary(self) -> str:
        """One line saying which model-backed members the stack kept, and on what numbers."""
        parts = []
        for name, g in self.gate.items():
            verdict = f"kept {name}" if g["kept"] else f"left {name} out"
            parts.append(
                f"{verdict} (out-of-fold IoU {g['iou_with']:.4f} with it, {g['iou_without']:.4f} without; "
                f"kept in {g['folds_kept']} of {g['folds']} folds)"
            )
        if not parts:
            return ""
        tail = "; a member left out is still given when the stack is applied" if self.fitted_members else ""
        return "the stack " + "; ".join(parts) + tail

    def hard_label_summary(self) -> str:
        """One line saying where each language's hard labels come from (for logs and tables)."""
        langs = ", ".join(f"{lang}: {src}" for lang, src in sorted(self.hard_sources.items()))
        rule = "; none where the empty rule says marking nothing pays" if self.empty_rule is not None else ""
        return f"hard labels from {self.hard_from} by default" + (f" ({langs})" if langs else "") + rule


def fit_items(
    data: StackData,
    idx: list[int],
    kind: ModelKind = "blend",
    l2: float = 1.0,
    trees: TreeSettings | None = None,
) -> LinearScorer | TreeScorer | BlendScorer:
    """The model fitted on the chosen items (each item weighs the same in total)."""
    check_model_kind(kind)
    x, y, w = data.stacked(idx)
    w = w * len(idx)
    if kind == "trees":
        return fit_trees(x, y, w, trees or TreeSettings())
    mean, scale = x.mean(0), x.std(0) + 1e-6
    coef = fit_logistic(design(x, mean, scale), y, w, l2)
    linear = LinearScorer(coef=coef.tolist(), mean=mean.tolist(), scale=scale.tolist(), l2=l2)
    if kind == "logistic":
        return linear
    return BlendScorer(linear=linear, trees=fit_trees(x, y, w, trees or TreeSettings()))

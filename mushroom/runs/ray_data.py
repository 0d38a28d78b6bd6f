"""A fitted stack over a corpus too big for one machine, on Ray Data (the `ray` extra).

Past one machine the run service's folder, ledger and chunks are the wrong tool: Ray Data
already splits a dataset into blocks, sends them to workers, retries failed tasks and
streams the output to storage. So nothing here schedules anything: `StackBatches` is a
callable class for `Dataset.map_batches`. Each of Ray's actors builds the members'
detectors and loads the fitted stack once, then for every batch runs the members in
memory (their predictions and evidence channels, exactly what a member's run folder
would hold) and applies the stack, returning the submission fields.

- CPU members (lexical, ...) run inside the actor.
- A model-backed member (`llm`, `chain`, `pyes`) is a member whose options name a served
  endpoint: `{"backend": {"kind": "openai", "base_url": "http://gpu-node:8000/v1", ...}}`,
  vLLM's OpenAI-compatible server or any other, one per GPU node; the actor only sends
  requests, so it needs no GPU.
- The stack is fitted beforehand (`mushroom stack fit` on val) and read from its stack.json.
- `select` is where a cascade plugs in: it is told each batch's items and the evidence of
  the members before the first `selective` one, and picks the items the selective members
  see; the others get an empty prediction from them. Which items a cascade sends on is
  `mushroom.combine.cascade`'s rule, not this module's.

Each item's prediction depends on its own features and its members' outputs alone, so the
predictions equal those of the same members and stack run in one process (tested on a
local Ray with two CPUs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from mushroom.combine.stack.features import StackData, item_features
from mushroom.combine.stack.fit import stack_predictions
from mushroom.combine.stack.members import MemberEvidence
from mushroom.combine.stack.model import StackModel
from mushroom.data.records import Context, Item, Prediction
from mushroom.data.spans import soft_to_vector
from mushroom.errors import MissingExtra, MushroomError

if TYPE_CHECKING:
    import pyarrow
    import ray.data

# Told a batch's items (one language) and, per member run so far, each item's evidence;
# returns, per item, whether the `selective` members see it.
Selector = Callable[[list[Item], list[list[MemberEvidence]]], list[bool]]

_ITEM_COLUMNS = (
    "id",
    "lang",
    "model_input",
    "model_output_text",
    "model_output_tokens",
    "model_output_logits",
)


def require_ray(what: str = "running the stack on Ray Data"):
    """The `ray` module with Ray Data, or MissingExtra naming the `ray` extra."""
    try:
        import ray
        import ray.data  # noqa: F401 (the Data library is a separate part of the ray package)
    except ImportError:
        raise MissingExtra(what, "ray", "ray") from None
    return ray


class MemberSpec(BaseModel):
    """One stack member as a detector to build in each worker: what its run folder's config says."""

    model_config = ConfigDict(extra="forbid")

    name: str
    detector: str
    options: dict[str, Any] = Field(default_factory=dict)
    selective: bool = Field(
        False, description="runs only on the items `select` picks (a cascade's later stage)"
    )

    @classmethod
    def from_run(cls, name: str, path: Path) -> MemberSpec:
        """The member a `detect` run folder was made with (its detector and options)."""
        from mushroom.data.runfolder import run_scope

        scope = run_scope(Path(path))
        config = scope.config if scope is not None else {}
        if not isinstance(config.get("detector"), str):
            raise MushroomError(f"{path}: not a `mushroom detect` run folder (its config names no detector)")
        return cls(name=name, detector=config["detector"], options=config.get("options") or {})


class RayStack(BaseModel):
    """What every worker needs: the fitted stack and how to build each of its members."""

    model_config = ConfigDict(extra="forbid")

    stack: StackModel
    members: list[MemberSpec]

    @classmethod
    def load(cls, stack_json: Path, members: list[MemberSpec]) -> RayStack:
        """A stack.json saved by `stack fit` (or the main job) with its members, checked to match."""
        from mushroom.data.jsonl import read_json_model

        spec = cls(stack=read_json_model(stack_json, StackModel), members=members)
        spec.check()
        return spec

    def check(self) -> None:
        """Refuses members other than the fitted ones (names, order, detectors)."""
        names = [m.name for m in self.members]
        if names != self.stack.members:
            raise MushroomError(
                f"the stack was fitted on members {self.stack.members}; got {names} (same names and order)"
            )
        for member in self.members:
            fitted = self.stack.member_detectors.get(member.name)
            if fitted is not None and fitted != member.detector:
                raise MushroomError(
                    f"member {member.name!r} was fitted on the {fitted!r} detector, not {member.detector!r}"
                )
        if self.stack.scorer is None:
            raise MushroomError(
                "the stack was saved by an older version; fit it again with `mushroom stack fit`"
            )


def item_row(item: Item, contexts: list[Context]) -> dict[str, Any]:
    """One row of the items dataset: the item's fields and its contexts as {source, text}."""
    row = {k: v for k, v in item.model_dump(mode="json", include=set(_ITEM_COLUMNS)).items() if v is not None}
    row["contexts"] = [c.model_dump() for c in contexts]
    return row


def items_dataset(rows: Iterable[dict[str, Any]]) -> ray.data.Dataset:
    """A Ray dataset of `item_row` rows held by the driver (for data on disk, `ray.data.read_json`)."""
    ray = require_ray()
    return ray.data.from_items(list(rows))


def _row_item(row: dict[str, Any]) -> tuple[Item, list[Context]]:
    fields = {k: row[k] for k in _ITEM_COLUMNS if row.get(k) is not None}
    contexts = []
    for k, ctx in enumerate(row.get("contexts") or []):
        contexts.append(
            Context(source=f"context{k}", text=ctx) if isinstance(ctx, str) else Context.model_validate(ctx)
        )
    return Item.model_validate(fields), contexts


def _schema():
    import pyarrow as pa

    span = pa.struct([("start", pa.int64()), ("end", pa.int64()), ("prob", pa.float64())])
    return pa.schema(
        [
            ("id", pa.string()),
            ("lang", pa.string()),
            ("soft_labels", pa.list_(span)),
            ("hard_labels", pa.list_(pa.list_(pa.int64()))),
        ]
    )


class StackBatches:
    """The callable class for `map_batches`: members in memory, then the stack, per batch.

    Built once per Ray actor (the detectors' resources and models load once); called on
    `pyarrow` batches of `item_row` rows, it returns the submission fields of each item
    (id, lang, soft_labels, hard_labels). A failed item fails the batch, loudly: Ray retries
    or stops the job, and no empty prediction passes for "nothing hallucinated".
    """

    def __init__(self, spec: dict[str, Any] | RayStack, select: Selector | None = None):
        from mushroom.detectors import build

        self.spec = RayStack.model_validate(spec) if isinstance(spec, dict) else spec
        self.spec.check()
        self.model = self.spec.stack
        self.channels = [self.model.channels[m] for m in self.model.members]
        self.detectors = [build(m.detector, m.options) for m in self.spec.members]
        for det in self.detectors:
            det.check_ready()
        self.select = select

    def __call__(self, batch: pyarrow.Table) -> pyarrow.Table:
        import pyarrow as pa

        rows: list[dict[str, Any]] = []
        by_lang: dict[str, list[tuple[Item, list[Context]]]] = {}
        for row in batch.to_pylist():
            item, contexts = _row_item(row)
            by_lang.setdefault(item.lang, []).append((item, contexts))
        for lang, group in by_lang.items():  # a detector call serves one language
            items = [it for it, _ in group]
            for pred in self.predict(items, {it.id: ctx for it, ctx in group}):
                rows.append({"lang": lang, **pred.submission_dict()})
        return pa.Table.from_pylist(rows, schema=_schema())

    def predict(self, items: list[Item], contexts: dict[str, list[Context]]) -> list[Prediction]:
        """The stack's predictions of one language's items, from its members run here."""
        evidence: list[list[MemberEvidence]] = []
        chosen: list[bool] | None = None  # what `select` picked, asked once, at the first selective member
        for spec, det in zip(self.spec.members, self.detectors):
            picked = items
            if spec.selective and self.select is not None:
                if chosen is None:
                    chosen = list(self.select(items, evidence))
                    if len(chosen) != len(items):
                        raise MushroomError(f"select gave {len(chosen)} choices for {len(items)} items")
                picked = [it for it, keep in zip(items, chosen) if keep]
            found = _member_evidence(spec.name, det, picked, contexts)
            evidence.append([found.get(it.id, (Prediction(id=it.id), {})) for it in items])
        feats = [
            item_features(it, [ev[k] for ev in evidence], self.channels, self.model.languages)
            for k, it in enumerate(items)
        ]
        return stack_predictions(self.model, StackData(items, feats))


def _member_evidence(name: str, detector, items: list[Item], contexts) -> dict[str, MemberEvidence]:
    """One member's prediction and channels of each item, as its run folder would hold them."""
    from mushroom.detectors.base import ItemResult

    results: dict[str, ItemResult] = {}
    if items:
        detector.run(items, contexts, lambda result: results.__setitem__(result.id, result))
    failed = {i: r.error for i, r in results.items() if r.status != "ok"}
    missing = [it.id for it in items if it.id not in results]
    if failed or missing:
        first = next(iter(failed.items()), (missing[0] if missing else "", "no result"))
        raise MushroomError(
            f"member {name!r}: {len(failed) + len(missing)} of {len(items)} items failed "
            f"(first: {first[0]}: {first[1]})"
        )
    out: dict[str, MemberEvidence] = {}
    for it in items:
        res = results[it.id]
        n = len(it.model_output_text)
        chans = {ch: soft_to_vector(spans, n) for ch, spans in res.channels.items()}
        out[it.id] = (res.prediction or Prediction(id=it.id), chans)
    return out


def stack_on_ray(
    dataset: ray.data.Dataset,
    spec: RayStack,
    batch_size: int = 256,
    concurrency: int = 1,
    select: Selector | None = None,
) -> ray.data.Dataset:
    """The stack's predictions of a dataset of `item_row` rows, as a lazy Ray dataset.

    Args:
        dataset: items with their contexts (`items_dataset`, or `ray.data.read_json` of such rows).
        spec: the fitted stack and its members.
        batch_size: items per call of a worker (a model-backed member batches its requests in it).
        concurrency: how many actors (each builds the members once).
        select: a cascade's choice of the items its `selective` members see.

    Returns:
        A dataset of id, lang, soft_labels, hard_labels: `.write_json(folder)` writes it where
        Ray writes (a shared file system, object storage); `.iter_rows()` streams it back.
    """
    require_ray()
    return dataset.map_batches(
        StackBatches,
        fn_constructor_kwargs={"spec": spec.model_dump(mode="json"), "select": select},
        batch_size=batch_size,
        batch_format="pyarrow",
        concurrency=concurrency,
    )


def prediction_rows(rows: Iterable[dict[str, Any]]) -> dict[str, list[Prediction]]:
    """Output rows of `stack_on_ray` by language, as checked Prediction records."""
    out: dict[str, list[Prediction]] = {}
    for row in rows:
        pred = Prediction.model_validate({k: row[k] for k in ("id", "soft_labels", "hard_labels")})
        out.setdefault(row["lang"], []).append(pred)
    return out

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

Each item's prediction depends on its own features and its members' outputs alone, so the
predictions equal those of the same members and stack run in one process (tested on a
local Ray with two CPUs).

The cascade (`mushroom main-job --llm-budget B`, `mushroom.combine.cascade`) cannot be one
map: whether an item is sent depends on the uncertainty of every other item of its
language. `cascade_on_ray` does it in two passes of Ray Data's own operations. Pass 1 maps
the CPU members and the CPU stack over every item and adds its uncertainty; a `groupby` of
the language, id and uncertainty columns alone gives each language's `Cut` (the last item
the budget sends, by the single-process rule); pass 2 maps every row again, and on the
items within the cut runs the model-backed members and the member stack, while the others
keep the CPU stack's prediction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mushroom.combine.cascade import Cut, check_budget, cut, prediction_uncertainty
from mushroom.combine.stack.features import StackData, item_features
from mushroom.combine.stack.fit import stack_predictions
from mushroom.combine.stack.members import MemberEvidence
from mushroom.combine.stack.model import StackModel
from mushroom.data.records import Context, Item, Prediction, given_contexts
from mushroom.data.runfolder import read_summary
from mushroom.data.spans import soft_to_vector
from mushroom.errors import MissingExtra, MushroomError
from mushroom.util.options import merge_options

if TYPE_CHECKING:
    import pyarrow
    import ray.data

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

    @classmethod
    def from_run(cls, name: str, path: Path) -> MemberSpec:
        """The member a `detect` run folder was made with (its detector and options)."""
        from mushroom.data.runfolder import run_scope

        if not Path(path).is_dir():
            raise MushroomError(
                f"member {name!r}: {path}: no such folder (give a `mushroom detect` run folder)"
            )
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

    @model_validator(mode="after")
    def _drop_left_out(self) -> RayStack:
        # a stack that left a model-backed member out (stack.fit.gate_members) is given every
        # member it was fitted with; no worker builds the ones it does not read
        if self.stack.fitted_members and [m.name for m in self.members] == self.stack.fitted_members:
            for m in self.members:
                fitted = self.stack.member_detectors.get(m.name)
                if m.name not in self.stack.members and fitted is not None and fitted != m.detector:
                    raise MushroomError(
                        f"member {m.name!r} was fitted on the {fitted!r} detector, not {m.detector!r}"
                    )
            self.members = [m for m in self.members if m.name in self.stack.members]
        return self

    @classmethod
    def load(cls, stack_json: Path, members: list[MemberSpec]) -> RayStack:
        """A stack.json saved by `stack fit` (or the main job) with its members, checked to match."""
        from mushroom.data.jsonl import read_json_model

        return cls.of(read_json_model(stack_json, StackModel), members)

    @classmethod
    def of(cls, model: StackModel, members: list[MemberSpec]) -> RayStack:
        """A fitted stack with its members, checked to match (those it left out are dropped)."""
        spec = cls(stack=model, members=members)
        spec.check()
        return spec

    def check(self) -> None:
        """Refuses members other than the fitted ones (names, order, detectors)."""
        names = [m.name for m in self.members]
        if names != self.stack.members:
            given = self.stack.fitted_members or self.stack.members
            raise MushroomError(f"the stack was fitted on members {given}; got {names} (same names, order)")
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

    def check_members(self) -> None:
        """Each member's settings, checked here before any Ray worker starts.

        A missing URL or model file stopped each actor as it was built, as an error inside
        Ray's own; here it is the one-line error the main job gives.
        """
        from mushroom.detectors import build

        for member in self.members:
            try:
                build(member.detector, member.options).check_ready()
            except MushroomError as exc:
                raise MushroomError(f"member {member.name!r}: {exc}") from None


def item_row(
    item: Item | Mapping[str, Any], contexts: Sequence[Context | Mapping[str, Any] | str] | None = ()
) -> dict[str, Any]:
    """One row of the items dataset: the item's fields and its contexts as {source, text}.

    Takes what a user has at hand: an `Item` or a row of the official JSONL files, and
    contexts as `Context` records, {source, text} dicts or plain strings (named context0,
    context1, ... as in the Python API). A row that is no item is a MushroomError naming
    its field, here on the driver rather than inside a Ray worker.
    """
    if not isinstance(item, Item | Mapping):
        raise MushroomError(
            f"item_row: an item is an Item or a dict of its fields, not {type(item).__name__}"
        )
    if not isinstance(item, Item):
        try:
            item = Item.model_validate({k: v for k, v in dict(item).items() if k in Item.model_fields})
        except ValidationError as exc:
            where = ", ".join(".".join(map(str, e["loc"])) + ": " + e["msg"] for e in exc.errors()[:3])
            raise MushroomError(f"item_row: not an item ({where})") from None
    row = {k: v for k, v in item.model_dump(mode="json", include=set(_ITEM_COLUMNS)).items() if v is not None}
    try:  # None: a datasets row with no contexts
        given = given_contexts(contexts)
    except TypeError as exc:
        raise MushroomError(f"item_row: {exc}") from None
    row["contexts"] = [_context(k, source, text).model_dump() for k, (source, text) in enumerate(given)]
    return row


def _context(k: int, source: str, text: object) -> Context:
    try:
        return Context(source=source, text=text)
    except ValidationError as exc:
        raise MushroomError(f"item_row: contexts[{k}]: {exc.errors()[0]['msg']} ({text!r:.60})") from None


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

    def __init__(self, spec: dict[str, Any] | RayStack):
        from mushroom.detectors import build

        self.spec = RayStack.model_validate(spec) if isinstance(spec, dict) else spec
        self.spec.check()
        self.model = self.spec.stack
        self.channels = [self.model.channels[m] for m in self.model.members]
        self.detectors = [build(m.detector, m.options) for m in self.spec.members]
        for det in self.detectors:
            det.check_ready()

    def __call__(self, batch: pyarrow.Table) -> pyarrow.Table:
        import pyarrow as pa

        rows = [
            {"lang": it.lang, **pred.submission_dict()} for it, pred in self.predict_rows(batch.to_pylist())
        ]
        return pa.Table.from_pylist(rows, schema=_schema())

    def predict_rows(self, rows: list[dict[str, Any]]) -> list[tuple[Item, Prediction]]:
        """Each `item_row` row's item and the stack's prediction of it, in the rows' order."""
        parsed = [_row_item(row) for row in rows]
        by_lang: dict[str, list[int]] = {}
        for k, (item, _) in enumerate(parsed):
            by_lang.setdefault(item.lang, []).append(k)
        preds: dict[int, Prediction] = {}
        for idx in by_lang.values():  # a detector call serves one language
            items = [parsed[k][0] for k in idx]
            preds.update(
                zip(idx, self.predict(items, {parsed[k][0].id: parsed[k][1] for k in idx}), strict=True)
            )
        return [(item, preds[k]) for k, (item, _) in enumerate(parsed)]

    def predict(self, items: list[Item], contexts: dict[str, list[Context]]) -> list[Prediction]:
        """The stack's predictions of one language's items, from its members run here."""
        evidence: list[list[MemberEvidence]] = []
        for spec, det in zip(self.spec.members, self.detectors):
            found = _member_evidence(spec.name, det, items, contexts)
            evidence.append([found[it.id] for it in items])
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
) -> ray.data.Dataset:
    """The stack's predictions of a dataset of `item_row` rows, as a lazy Ray dataset.

    Args:
        dataset: items with their contexts (`items_dataset`, or `ray.data.read_json` of such rows).
        spec: the fitted stack and its members.
        batch_size: items per call of a worker (a model-backed member batches its requests in it).
        concurrency: how many actors (each builds the members once).

    Returns:
        A dataset of id, lang, soft_labels, hard_labels: `.write_json(folder)` writes it where
        Ray writes (a shared file system, object storage); `.iter_rows()` streams it back.
    """
    require_ray()
    spec.check()
    spec.check_members()
    return dataset.map_batches(
        StackBatches,
        fn_constructor_kwargs={"spec": spec.model_dump(mode="json")},
        batch_size=batch_size,
        batch_format="pyarrow",
        compute=_actors(concurrency),
    )


def _actors(n: int) -> ray.data.ActorPoolStrategy:
    """A pool of n actors: Ray's `compute`, for which `concurrency=` is deprecated since Ray 2.51."""
    import ray.data

    return ray.data.ActorPoolStrategy(size=n)


def _why_no_member_stack(folder: Path) -> str | None:
    """What a finished cascade's summary.json says of its absent member stack, and what to do instead."""
    summary = read_summary(folder)  # None: an unfinished run
    said = summary.cascade.member_stack if summary is not None and summary.cascade is not None else None
    if said is None or said.used:  # None too for a run of before 2026-11-28
        return None
    return (
        f"the job kept no member stack ({said.why}), so every item keeps the CPU stack's "
        f"prediction: apply the CPU stack alone (RayStack.load of {folder / 'stack.json'} with its CPU "
        "members, then stack_on_ray), or run the job again with a larger --llm-budget or a better model"
    )


class RayCascade(BaseModel):
    """A cascade for Ray: the CPU stack, the member stack and the budget, as the main job fitted them.

    `base` holds the CPU members and the stack fitted on them alone; `member` holds every
    member, the model-backed ones among them, and the stack fitted on the items sent. The
    model-backed members are those of `member` that `base` lacks.
    """

    model_config = ConfigDict(extra="forbid")

    base: RayStack
    member: RayStack
    budget: float

    @classmethod
    def from_run(cls, folder: Path, budget: float | None = None) -> RayCascade:
        """The cascade of a `mushroom main-job --llm-budget B` run folder, with its budget unless given.

        Its members are built as the job built them (config.json), the CPU stack is its
        stack.json and the member stack its cascade/member-stack.json.
        """
        from mushroom.data.runfolder import run_scope

        folder = Path(folder)
        scope = run_scope(folder)
        config = scope.config if scope is not None and scope.folder == folder else {}
        if config.get("job") != "main" or "llm_budget" not in config:
            raise MushroomError(
                f"{folder}: not the run folder of a cascade (`mushroom main-job --llm-budget B`): "
                "its config.json names no llm_budget"
            )
        specs = [
            MemberSpec(name=m["detector"], detector=m["detector"], options=m.get("options") or {})
            for m in config.get("members", [])
        ]
        by_name = {m.name: m for m in specs}

        def stack(path: Path) -> RayStack:
            if not path.is_file():
                raise MushroomError(f"{path}: missing; {_why_no_member_stack(folder) or unfinished}")
            from mushroom.data.jsonl import read_json_model

            model = read_json_model(path, StackModel)
            missing = [name for name in model.members if name not in by_name]
            if missing:
                raise MushroomError(f"{path}: member(s) {missing} are not in {folder / 'config.json'}")
            return RayStack.load(path, [by_name[name] for name in model.members])

        unfinished = f"run the main job again on {folder} to finish it"
        spec = cls(
            base=stack(folder / "stack.json"),
            member=stack(folder / "cascade" / "member-stack.json"),
            budget=config["llm_budget"] if budget is None else budget,
        )
        spec.check()
        return spec

    def model_backed(self) -> list[str]:
        """The members only the items sent see: those of the member stack the CPU stack lacks."""
        cheap = {m.name for m in self.base.members}
        return [m.name for m in self.member.members if m.name not in cheap]

    def check(self) -> None:
        """Refuses a budget outside (0, 1] and stacks that do not make one cascade."""
        check_budget(self.budget, "the cascade's budget")
        self.base.check()
        self.member.check()
        costly = self.model_backed()
        cheap = [m.name for m in self.member.members if m.name not in costly]
        # a member stack that left its model-backed members out (stack.fit.gate_members) is
        # applied without them: the items sent get the stack refitted on them, and no model call
        left_out = [n for n in self.member.stack.fitted_members if n not in cheap]
        if not (costly or left_out) or cheap != [m.name for m in self.base.members]:
            raise MushroomError(
                f"the member stack's members {[m.name for m in self.member.members]} must be the CPU "
                f"stack's {[m.name for m in self.base.members]}, in the same order, and the model-backed ones"
            )
        by_name = {m.name: m for m in self.member.members}
        for spec in self.base.members:
            if spec != by_name[spec.name]:
                raise MushroomError(
                    f"member {spec.name!r} is built otherwise in the two stacks; pass 2 would not see "
                    "the evidence the CPU stack judged"
                )

    def with_options(self, name: str, options: dict[str, Any]) -> RayCascade:
        """A copy where member `name` has `options` laid over its own (nested groups merged).

        For what differs on the cluster from where the job was fitted, such as a model-backed
        member's server: `with_options("llm", {"backend": {"base_url": "http://gpu-node:8000/v1"}})`.
        """
        if name in self.member.stack.fitted_members and name not in {m.name for m in self.member.members}:
            return self  # a member the stack left out: nothing builds it, so its options change nothing
        if name not in {m.name for m in self.member.members}:
            raise MushroomError(
                f"{name!r} is not a member of the cascade ({', '.join(m.name for m in self.member.members)})"
            )

        def changed(stack: RayStack) -> RayStack:
            members = [
                m.model_copy(update={"options": merge_options(m.options, options)}) if m.name == name else m
                for m in stack.members
            ]
            return stack.model_copy(update={"members": members})

        return self.model_copy(update={"base": changed(self.base), "member": changed(self.member)})


def _cascade_schema():
    import pyarrow as pa

    schema = _schema()
    return schema.append(pa.field("uncertainty", pa.float64())).append(pa.field("sent", pa.bool_()))


class UncertaintyBatches:
    """Pass 1 of the cascade (`map_batches`): the CPU stack's prediction and uncertainty of each row.

    The rows keep their item columns, for pass 2, and gain soft_labels, hard_labels and
    uncertainty (`mushroom.combine.cascade.prediction_uncertainty`, as the main job reads it).
    """

    def __init__(self, spec: dict[str, Any] | RayStack):
        self.stack = StackBatches(spec)

    def __call__(self, batch: pyarrow.Table) -> pyarrow.Table:
        import pyarrow as pa

        schema = _schema()
        found = self.stack.predict_rows(batch.to_pylist())
        soft = [[s.model_dump() for s in pred.soft_labels] for _, pred in found]
        hard = [[list(h) for h in pred.hard_labels] for _, pred in found]
        unsure = [prediction_uncertainty(item, pred) for item, pred in found]
        for name in ("soft_labels", "hard_labels", "uncertainty"):
            if name in batch.column_names:
                batch = batch.drop_columns([name])  # an items file with gold labels: not this pass's
        batch = batch.append_column(
            schema.field("soft_labels"), pa.array(soft, schema.field("soft_labels").type)
        )
        batch = batch.append_column(
            schema.field("hard_labels"), pa.array(hard, schema.field("hard_labels").type)
        )
        return batch.append_column("uncertainty", pa.array(unsure, pa.float64()))


class MemberStackBatches:
    """Pass 2 of the cascade (`map_batches`): the member stack on the rows within their language's cut.

    A row within the cut gets every member's evidence (the model-backed members run only
    here) and the member stack's prediction; any other row keeps pass 1's, the CPU stack's,
    as in the main job (`mushroom.combine.cascade.merge_predictions`). Rows not sent pass
    through the same actors rather than a `filter` and a `union`: those would be tasks
    waiting for CPUs that the actors hold, and on a machine whose CPUs the actors fill
    (a local Ray with `concurrency` equal to its CPUs) they would wait for ever.
    """

    def __init__(self, spec: dict[str, Any] | RayStack, cuts: dict[str, dict[str, Any]]):
        self.stack = StackBatches(spec)
        self.cuts = {lang: Cut.model_validate(c) for lang, c in cuts.items()}

    def __call__(self, batch: pyarrow.Table) -> pyarrow.Table:
        import pyarrow as pa

        rows = batch.to_pylist()
        for row in rows:
            if row["lang"] not in self.cuts:
                raise MushroomError(f"item {row['id']}: language {row['lang']!r} has no cut from pass 1")
        sent = [self.cuts[row["lang"]].sends(row["id"], row["uncertainty"]) for row in rows]
        found = iter(self.stack.predict_rows([row for row, go in zip(rows, sent) if go]))
        out = []
        for row, go in zip(rows, sent):
            fields = (
                next(found)[1].submission_dict()
                if go
                else {k: row[k] for k in ("id", "soft_labels", "hard_labels")}
            )
            out.append({"lang": row["lang"], **fields, "uncertainty": row["uncertainty"], "sent": go})
        return pa.Table.from_pylist(out, schema=_cascade_schema())


def _language_cut(group: pyarrow.Table, budget: float) -> pyarrow.Table:
    """One language's `Cut` as a one-row table, from its (lang, id, uncertainty) rows."""
    import pyarrow as pa

    langs, ids = group.column("lang").to_pylist(), group.column("id").to_pylist()
    unsure = dict(zip(ids, group.column("uncertainty").to_pylist()))
    if len(unsure) != len(ids):
        raise MushroomError(f"language {langs[0]}: an item id appears twice; the cascade ranks items by id")
    return pa.Table.from_pylist([cut(langs[0], unsure, budget).model_dump()])


@dataclass
class CascadeOnRay:
    """What `cascade_on_ray` returns: the predictions (lazy) and each language's cut (known)."""

    predictions: ray.data.Dataset
    cuts: dict[str, Cut]


def cascade_on_ray(
    dataset: ray.data.Dataset,
    cascade: RayCascade,
    batch_size: int = 256,
    concurrency: int = 1,
    member_batch_size: int | None = None,
    member_concurrency: int | None = None,
) -> CascadeOnRay:
    """The cascade over a dataset of `item_row` rows: model-backed members only on the items sent.

    The same items are sent, and the same predictions made, as by the main job on a split
    (`mushroom.runs.cascade`): per language, the ceil(budget * n) items the CPU stack is
    least sure of, ties by id (`mushroom.combine.cascade`).

    Pass 1 runs here, before the function returns: the CPU members and stack over every
    item, materialized in Ray's object store (the cut needs every item's uncertainty, and
    pass 2 reads the rows again). The cuts come from a `groupby("lang")` over the language,
    id and uncertainty columns alone. Pass 2 is left lazy: its actors get every row and its
    language's cut; on the items sent they run the CPU members again (a share `budget` of
    pass 1's work, so no item's per-character evidence has to travel) and the model-backed
    members, and apply the member stack; the other rows pass through. So a pass 2 batch of
    256 rows at budget 0.3 sends the model about 77 items in one call.

    Args:
        dataset: items with their contexts (`items_dataset`, or `ray.data.read_json` of such rows).
        cascade: the two stacks, their members and the budget (`RayCascade.from_run`).
        batch_size: items per call of a pass 1 worker.
        concurrency: pass 1's actors (CPU members).
        member_batch_size: rows per call of a pass 2 worker, of which a share `budget` go to
            the model in one batch of requests; default `batch_size`.
        member_concurrency: pass 2's actors, each sending requests to the model's server;
            default `concurrency`.

    Returns:
        The cuts, and a lazy dataset of id, lang, soft_labels, hard_labels, uncertainty and
        sent (whether the model-backed members saw the item).
    """
    require_ray()
    cascade.check()
    cascade.member.check_members()  # the CPU stack's members are among them
    scored = dataset.map_batches(
        UncertaintyBatches,
        fn_constructor_kwargs={"spec": cascade.base.model_dump(mode="json")},
        batch_size=batch_size,
        batch_format="pyarrow",
        compute=_actors(concurrency),
    ).materialize()
    found = (
        scored.select_columns(["lang", "id", "uncertainty"])
        .groupby("lang")
        .map_groups(_language_cut, fn_kwargs={"budget": cascade.budget}, batch_format="pyarrow")
        .take_all()
    )
    cuts = {row["lang"]: Cut.model_validate(row) for row in found}
    predictions = scored.map_batches(
        MemberStackBatches,
        fn_constructor_kwargs={
            "spec": cascade.member.model_dump(mode="json"),
            "cuts": {lang: c.model_dump() for lang, c in cuts.items()},
        },
        batch_size=member_batch_size or batch_size,
        batch_format="pyarrow",
        compute=_actors(member_concurrency or concurrency),
    )
    return CascadeOnRay(predictions=predictions, cuts=dict(sorted(cuts.items())))


def prediction_rows(rows: Iterable[dict[str, Any]]) -> dict[str, list[Prediction]]:
    """Output rows of `stack_on_ray` by language, as checked Prediction records."""
    out: dict[str, list[Prediction]] = {}
    for row in rows:
        pred = Prediction.model_validate({k: row[k] for k in ("id", "soft_labels", "hard_labels")})
        out.setdefault(row["lang"], []).append(pred)
    return out

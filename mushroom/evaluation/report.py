"""`mushroom report RUN_DIR`: one self-contained HTML page to look at a run item by item.

Per item: the question, the answer with gold spans (green underline) and predicted spans
(red background, soft probability as intensity), the item's IoU and Cor, the contexts the
detector saw, the raw model output where the run kept one, and the item's error type if the
item is tagged. Claims the detector could not check against its context (the `chain` and
`nli` verdict "unverifiable", read from the run's item ledger) are shown in a colour of
their own (amber) with the reason, since a claim nothing confirms or refutes is not the
same finding as one the context contradicts. Filters (language, worst N by IoU, error type) run in the page itself, and
can be preset in the URL: `report.html#lang=en&worst=10`. No external files, fonts or scripts,
so the page can be mailed or archived with the run.
"""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import NamedTuple

import numpy as np

from mushroom.data.contexts import DEFAULT_SOURCES, load_contexts
from mushroom.data.itemstream import ContextFiles
from mushroom.data.jsonl import iter_json_lines, load_records, read_utf8
from mushroom.data.predictions import load_predictions, prediction_vectors, submission_name
from mushroom.data.records import CascadeRecord, Item, Prediction
from mushroom.data.runfolder import FailureCheck, prediction_folder, read_summary, run_scope
from mushroom.data.spans import hard_to_mask
from mushroom.data.splits import load_split
from mushroom.errors import DataError, MushroomError, Problem
from mushroom.evaluation.metrics import item_cor, item_iou
from mushroom.util.words import plural

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;max-width:1100px;color:#222}
.item{border:1px solid #ccc;border-radius:6px;padding:.6em 1em;margin:.8em 0}
.item.hidden{display:none}
.answer{line-height:1.9;font-size:1.05em;white-space:pre-wrap;overflow-wrap:anywhere}
.hard{font-weight:700;box-shadow:inset 0 2px 0 #800}
.gold{text-decoration:underline;text-decoration-color:#2a9d2a;text-decoration-thickness:3px;text-underline-offset:4px}
.meta{color:#555;font-size:.9em}
.legend span{margin-right:1.5em}
pre{white-space:pre-wrap;background:#f6f6f6;padding:.5em;max-height:20em;overflow:auto}
table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}
"""

_JS = """
let ORDER=null;
function applyFilters(){
  const lang=document.getElementById('f-lang').value;
  const tag=document.getElementById('f-tag').value;
  const worst=parseInt(document.getElementById('f-worst').value||'0');
  let items=[...document.querySelectorAll('.item')];
  if(ORDER===null)ORDER=items;
  let keep=items.filter(e=>(lang==='all'||e.dataset.lang===lang)&&(tag==='all'||e.dataset.tag===tag));
  if(worst>0){keep.sort((a,b)=>parseFloat(a.dataset.iou)-parseFloat(b.dataset.iou));keep=keep.slice(0,worst);}
  const shown=new Set(keep);
  // the worst N worst first, the page's order otherwise
  (worst>0?keep:ORDER).forEach(e=>e.parentNode.appendChild(e));
  items.forEach(e=>e.classList.toggle('hidden',!shown.has(e)));
  document.getElementById('shown').textContent=keep.length;
  const p=new URLSearchParams();
  if(lang!=='all')p.set('lang',lang);if(tag!=='all')p.set('tag',tag);if(worst>0)p.set('worst',worst);
  history.replaceState(null,'',p.toString()?'#'+p.toString():location.pathname+location.search);
}
function fromHash(){
  const p=new URLSearchParams(location.hash.slice(1));
  const unknown=[];
  for(const [key,id] of [['lang','f-lang'],['tag','f-tag']]){
    const v=p.get(key),box=document.getElementById(id);
    if(v===null)continue;
    if([...box.options].some(o=>o.value===v))box.value=v;else unknown.push(key+'='+v);
  }
  if(p.get('worst'))document.getElementById('f-worst').value=p.get('worst');
  document.getElementById('f-note').textContent=unknown.length?'(not on this page: '+unknown.join(', ')+')':'';
  applyFilters();
}
window.addEventListener('DOMContentLoaded',()=>{
  ['f-lang','f-tag','f-worst'].forEach(id=>document.getElementById(id).addEventListener('change',applyFilters));
  window.addEventListener('hashchange',fromHash);
  fromHash();
});
"""


UNVERIFIABLE_COLOUR = "rgba(240,170,0,0.5)"
"""Amber: the third colour, for claims that could not be checked (not red: no contradiction)."""


def _shown(text: str) -> str:
    """Text escaped for the page; a NUL (which HTML parsers replace or drop) shown as U+FFFD.

    One character for one: the answer's spans stay on their characters.
    """
    return html.escape(text).replace("\x00", "\ufffd")


def highlighted_answer(
    text: str,
    gold_mask: np.ndarray,
    soft: np.ndarray,
    unchecked: list[str | None] | None = None,
    hard: np.ndarray | None = None,
) -> str:
    """The answer as HTML: runs of equal (gold, probability, hard, reason) become one styled span.

    `unchecked` holds per character the reason its claim could not be checked (None: it was
    checked); such characters are amber, with the reason in their title, whatever their
    probability. `hard` marks the predicted hard spans, in bold under a dark line: shaded
    alone, a character below the threshold read as predicted, where its line said "none".
    """
    reasons = unchecked if unchecked is not None else [None] * len(text)
    hard = hard if hard is not None else np.zeros(len(text), dtype=bool)
    out = []
    start = 0
    for k in range(1, len(text) + 1):
        if (
            k < len(text)
            and gold_mask[k] == gold_mask[start]
            and soft[k] == soft[start]
            and hard[k] == hard[start]
            and reasons[k] == reasons[start]
        ):
            continue
        chunk = _shown(text[start:k])
        p = float(soft[start])
        reason = reasons[start]
        classes = (
            ["seg"]
            + (["gold"] if gold_mask[start] else [])
            + (["pred"] if p > 0 else [])
            + (["hard"] if hard[start] else [])
        )
        style = f' style="background:rgba(220,40,40,{0.12 + 0.7 * p:.2f})"' if p > 0 else ""
        title = f' title="p={p:.3f}"' if p > 0 else ""
        if reason is not None:
            classes.append("unverifiable")
            style = f' style="background:{UNVERIFIABLE_COLOUR}"'
            title = f' title="{html.escape(f"unverifiable: {reason}; p={p:.3f}")}"'
        out.append(f'<span class="{" ".join(classes)}"{style}{title}>{chunk}</span>')
        start = k
    return "".join(out)


def _unverifiable(folder: Path, lang: str, problems: list[Problem]) -> dict[str, list[dict]]:
    """Per item id, the claims its detector could not check: {start, end, text, reason}.

    Read from the item ledger (`items/<lang>.jsonl`, the last line per id), where `chain` and
    `nli` list them in the item's record; a folder without a ledger, or records without the
    list (other detectors, older runs), give none. Offsets are checked, not trusted.
    """
    path = folder / "items" / f"{lang}.jsonl"
    out: dict[str, list[dict]] = {}
    if not path.is_file():
        return out
    for _, row in iter_json_lines(path, problems):
        if not isinstance(row, dict) or "id" not in row:
            continue
        detail = row.get("detail") if isinstance(row.get("detail"), dict) else {}
        found = detail.get("unverifiable")
        entries = [
            e
            for e in (found if isinstance(found, list) else [])
            if isinstance(e, dict) and isinstance(e.get("start"), int) and isinstance(e.get("end"), int)
        ]
        out[str(row["id"])] = entries  # the last line per id wins
    return {k: v for k, v in out.items() if v}


def _reasons(n: int, entries: list[dict]) -> list[str | None]:
    """Per character of an n-character answer, the reason its claim was not checked, or None."""
    reasons: list[str | None] = [None] * n
    for e in entries:
        start, end = max(e["start"], 0), min(e["end"], n)
        reason = e.get("reason") if isinstance(e.get("reason"), str) else "no reason given"
        for k in range(start, end):
            reasons[k] = reason
    return reasons


def _raw_outputs(folder: Path, lang: str, problems: list[Problem] | None = None) -> dict[str, list[str]]:
    """Raw model outputs per item id, from the run's raw/ files (LLM detectors keep them).

    A request asked again (a failed call retried by a re-run) is shown once, by its last
    record, and labelled with how often it was asked: each record shown as an output of its
    own read as more samples than the detector drew. Unreadable lines (a run killed
    mid-write) do not stop the report; they are collected in `problems` and the page says
    how many there were.
    """
    rows: dict[str, dict[str, tuple[dict, int]]] = {}  # item -> request -> (last record, times)
    problems = [] if problems is None else problems
    for path in sorted((folder / "raw").glob(f"{lang}.*.jsonl")):
        for lineno, row in iter_json_lines(path, problems):
            if isinstance(row, dict) and "id" in row:
                # a request is its key with its sampling: the llm detector keys every temperature
                # of an item alike, pyes every model
                parts = ("key", "stage", "model", "temperature", "n", "call", "continuation")
                key = json.dumps([row.get(k) for k in parts]) if row.get("key") else f"{path.name}:{lineno}"
                calls = rows.setdefault(str(row["id"]), {})
                calls[key] = (row, calls[key][1] + 1 if key in calls else 1)
    out: dict[str, list[str]] = {}
    for item_id, calls in rows.items():
        for row, times in calls.values():
            asked = f"[asked {times} times: the last reply] " if times > 1 else ""
            texts = row.get("texts") if isinstance(row.get("texts"), list) else None
            if texts:  # every sample, apart; the prompt sent (`messages`) is not an output
                cut = _cut_samples(row, len(texts))
                for k, t in enumerate(texts):
                    label = asked + (f"[sample {k + 1} of {len(texts)}] " if len(texts) > 1 else "")
                    if cut[k]:  # read as it was: cut off
                        label += "[cut off at max_tokens] "
                    out.setdefault(item_id, []).append(label + str(t))
                continue
            shown = {k: v for k, v in row.items() if k != "messages"}
            text = row.get("response") or row.get("error") or json.dumps(shown, ensure_ascii=False)[:2000]
            out.setdefault(item_id, []).append(asked + str(text))
    return out


def _cut_samples(row: dict, n: int) -> list[bool]:
    """Which of a raw record's texts were cut off at max_tokens, by the rule the detectors use.

    The engine's finish reason first; without one, the token count against the budget
    (`Generation.used_budget`), for every text of the record alike.
    """
    reasons = row.get("finish_reasons") if isinstance(row.get("finish_reasons"), list) else []
    if len(reasons) == n and all(isinstance(r, str) for r in reasons):
        return [r == "length" for r in reasons]
    usage = row.get("usage") if isinstance(row.get("usage"), dict) else {}
    budget = row.get("max_tokens")
    tokens = usage.get("completion_tokens")
    if not isinstance(budget, int) or not isinstance(tokens, int) or isinstance(tokens, bool):
        return [False] * n
    from mushroom.backends.base import Generation

    texts = [""] * n
    return [bool(Generation(texts=texts, usage={"completion_tokens": tokens}).used_budget(budget))] * n


def _iou(item: Item, pred: Prediction) -> float:
    """The item's official IoU (NaN when it has no gold)."""
    if not item.is_labelled:
        return float("nan")
    n = len(item.model_output_text)
    return item_iou([tuple(h) for h in item.hard_labels or []], [tuple(h) for h in pred.hard_labels], n)


def _cor(item: Item, pred: Prediction) -> float:
    """The item's official Cor (NaN when it has no gold, or an empty answer)."""
    if not item.is_labelled:
        return float("nan")
    return item_cor(
        [(s.start, s.end, s.prob) for s in item.soft_labels or []],
        [(s.start, s.end, s.prob) for s in pred.soft_labels],
        len(item.model_output_text),
    )


def _item_html(
    item: Item,
    pred: Prediction | None,
    contexts: list,
    raw: list[str],
    tag: str | None,
    unchecked: list[dict] | None = None,
    failed_in: Path | None = None,
    scores: tuple[float, float] | None = None,
    cascade_html: str = "",
) -> str:
    """One item's block; `scores` (IoU, Cor) when the page has them already, else computed."""
    n = len(item.model_output_text)
    soft, mask = prediction_vectors(pred, n) if pred else (np.zeros(n), np.zeros(n, dtype=bool))
    gold_mask = hard_to_mask(item.hard_labels or [], n)
    labelled = item.is_labelled
    iou = cor = float("nan")
    if labelled and pred is not None:
        iou, cor = scores if scores is not None else (_iou(item, pred), _cor(item, pred))
    ctx_html = (
        "".join(
            f"<details><summary>context: <bdi>{html.escape(c.source)}</bdi> ({plural(len(c.text), 'char')})</summary>"
            f'<pre dir="auto">{_shown(c.text)}</pre></details>'
            for c in contexts
        )
        or "<p class='meta'>no context</p>"
    )
    raw_html = "".join(
        f"<details><summary>raw model output {k + 1}</summary><pre>{html.escape(r)}</pre></details>"
        for k, r in enumerate(raw)
    )
    scores = f"IoU {iou:.3f} · Cor {cor:.3f}" if labelled else "unlabelled"
    tag_html = f" · error type: <b><bdi>{html.escape(tag)}</bdi></b>" if tag else ""
    hard = ", ".join(f"[{s}, {e})" for s, e in (pred.hard_labels if pred else []))
    reasons = _reasons(n, unchecked) if unchecked else None
    unchecked_html = "".join(
        f'<div class="meta">unverifiable: <span style="background:{UNVERIFIABLE_COLOUR}">'
        f"{html.escape(item.model_output_text[max(e['start'], 0) : e['end']])}</span> · "
        f"{html.escape(e['reason'] if isinstance(e.get('reason'), str) else 'no reason given')}</div>"
        for e in unchecked or []
    )
    failed_html = (  # --allow-failures wrote it empty: said where a reader sees "none"
        f'<div class="meta"><b>failed in its run</b> (listed in {html.escape(str(failed_in))}): '
        "this empty prediction is not the method's</div>"
        if failed_in is not None
        else ""
    )
    body = (
        f'<div class="item" id="{html.escape(item.id)}" data-lang="{item.lang}" '
        f'data-iou="{iou if labelled else 1.0:.6f}" data-tag="{html.escape(tag or "none")}">'
        f'<div class="meta"><bdi>{html.escape(item.id)}</bdi> · {item.lang} · <span class="scores">{scores}</span>{tag_html}</div>'
        # isolated: under dir=auto the "Q" label's Latin letter set an Arabic question left-to-right
        f'<p><b>Q:</b> <bdi dir="auto">{_shown(item.model_input)}</bdi></p>'
        f'<div class="answer" dir="auto">{highlighted_answer(item.model_output_text, gold_mask, soft, reasons, mask)}</div>'
        f'<div class="meta">predicted hard spans: {hard or "none"}</div>{cascade_html}{unchecked_html}{failed_html}'
        f"{ctx_html}{raw_html}</div>"
    )
    return body


def _warnings_html(run_dir: Path) -> str:
    """The run's own warnings (summary.json): cut-off replies, unreadable ones, failed items.

    Without them a page of empty predictions read as a method that found nothing.
    """
    folder, below = run_dir, ""
    if not (run_dir / "summary.json").is_file():  # a variant's or a main job's member folder: the run's own
        scope = run_scope(run_dir)
        if scope is not None:
            folder = scope.folder
            if run_dir.resolve().is_relative_to(scope.folder.resolve()):
                below = run_dir.resolve().relative_to(scope.folder.resolve()).as_posix()
    summary = read_summary(folder)
    warnings = summary.warnings if summary is not None else []
    if not warnings:
        return ""
    # a stage's warning names its folder ("llm:vote3/val en: ..."): another variant's is not this one's
    mine = [w for w in warnings if not below or _of_folder(w, below)]
    if not mine:
        return ""
    shown = "".join(f"<li>{html.escape(w)}</li>" for w in mine[:20])
    of = f" of {html.escape(below)}" if len(mine) < len(warnings) else ""
    return f"<details open><summary>the run's warnings{of} ({len(mine)})</summary><ul>{shown}</ul></details>"


def _failed_html(counts: dict[str, tuple[int, Path]]) -> str:
    """A note at the top for items the run failed: shown empty, and scored so.

    The page of a run made with --allow-failures gave its failures only item by item, and
    its score table read as the method's; summary.json lists no warning for them.
    """
    if not counts:
        return ""
    lines = "".join(
        f"<li>{lang}: {n} item{'s' * (n != 1)} (listed in {html.escape(str(where))})</li>"
        for lang, (n, where) in sorted(counts.items())
    )
    return (
        "<details open><summary>items that failed in the run: their predictions are not the method's "
        f"(written empty, or the CPU stack's in a cascade), and score as written</summary><ul>{lines}</ul>"
        "</details>"
    )


_STAGE_FOLDER = re.compile(r"^[\w.-]+:([\w.-]+/[\w./-]+) ")


def left_out_note(left_out: dict[str, int], limit: int | None) -> str:
    """What a limit kept off the page, by language; empty when it kept nothing off."""
    if not left_out:
        return ""
    by_lang = ", ".join(f"{lang} {n}" for lang, n in left_out.items())
    return (
        f"the page shows at most {limit} items of each language, the worst by IoU when labelled; "
        f"{plural(sum(left_out.values()), 'item')} are left off ({by_lang}); the scores table counts them"
    )


def _absent_html(absent: list[str], split: str) -> str:
    """The languages a run covers with no prediction file: left out unsaid, the page looked whole."""
    if not absent:
        return ""
    return (
        f'\n<p class="note">no {split} prediction file for {", ".join(absent)}: its run did not '
        "write one (stopped before it, or its items failed); those items are not on this page</p>"
    )


def _left_out_html(left_out: dict[str, int], limit: int | None) -> str:
    note = left_out_note(left_out, limit)
    return f'\n<p class="note">{html.escape(note)}</p>' if note else ""


def _of_folder(warning: str, folder: str) -> bool:
    """Whether a run's warning concerns `folder` (a variant's, a member's) or the whole run."""
    match = _STAGE_FOLDER.match(warning)
    return match is None or match.group(1) == folder or match.group(1).startswith(folder + "/")


def _problems_html(problems: list[Problem]) -> str:
    if not problems:
        return ""
    shown = "".join(f"<li>{html.escape(str(p))}</li>" for p in problems[:20])
    return (
        f"<details open><summary>{plural(len(problems), 'unreadable line')} in raw/ files (not shown)</summary>"
        f"<ul>{shown}</ul></details>"
    )


MANY_ITEMS = 5000  # a page of more is warned of: each item is ~5 KB of HTML, with its contexts more


class ReportPage(NamedTuple):
    """The page and the ids of the items on it (tags for other ids are not counted on it)."""

    html: str
    item_ids: list[str]
    left_out: dict[str, int]
    """Per language, the items a limit kept off the page."""


class Cascade(NamedTuple):
    """What a cascade folder's page says of where its items went (empty for any other run)."""

    records: dict[str, CascadeRecord]  # id -> where it went and why, on the page's split
    members: dict[str, Path]  # model-backed member -> its folder of the page's split
    note: str  # the page's paragraph on the cascade, or ""


def _cascade(run_dir: Path, split: str, langs: Collection[str]) -> Cascade:
    """The records and model-backed members of a cascade folder (`main-job --llm-budget`), of `langs`.

    Its page showed the final predictions alone: nothing said which items a model saw, and
    the claims its chain member could not check were only on the member's own page.
    Member names come from the folder's own listing, never from a file's value. Only the
    page's languages count: under `report --lang it` it counted every language's items.
    """
    path = run_dir / "cascade.jsonl"
    if not path.is_file():
        return Cascade({}, {}, "")
    records = {
        r.id: r
        for r in load_records(path, CascadeRecord, unique_ids=False)
        if r.split == split and r.lang in langs
    }
    summary = read_summary(run_dir)  # None for a stopped run: its members' pages are still listed below
    named = summary.cascade.model_backed if summary is not None and summary.cascade is not None else []
    members: dict[str, Path] = {}
    root = run_dir / "members"
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if folder.is_dir() and folder.name in named:
            try:
                members[folder.name] = prediction_folder(folder, split)
            except MushroomError:  # no file of this split: nothing of it to show
                continue
    sent = sum(r.sent for r in records.values())
    names = ", ".join(members) or ", ".join(named) or "none"
    pages = " ".join(
        f"<code>mushroom report {html.escape(str(run_dir / 'members' / n))}</code>" for n in members
    )
    note = (
        f'<p class="meta"><b>cascade</b>: {sent} of {plural(len(records), "item")} of {split} went to '
        f"the model-backed members ({html.escape(names)}); the others keep the CPU stack's prediction. "
        f"Each item says where it went and why. {('Their own pages: ' + pages) if pages else ''}</p>"
        if records
        else ""
    )
    return Cascade(records, members, note)


def _cascade_html(record: CascadeRecord | None) -> str:
    """An item's line on where the cascade sent it and why."""
    if record is None:
        return ""
    went = (
        "sent to the model, which failed on it: it keeps the CPU stack's prediction"
        if record.failed
        else ("sent to the model" if record.sent else "kept the CPU stack's prediction")
    )
    return (
        f'<div class="meta">cascade: <b>{went}</b> (rank {record.rank} of {record.of} by uncertainty '
        f"{record.uncertainty:.3f}) · {html.escape(record.reason)}</div>"
    )


def build_report(
    run_dir: Path,
    split: str = "val",
    langs: list[str] | None = None,
    sources: tuple[str, ...] = DEFAULT_SOURCES,
    tags: dict[str, str] | None = None,
    items: dict[str, list[Item]] | None = None,
    context_files: list[Path] | None = None,
    limit: int | None = None,
) -> ReportPage:
    """The HTML page for a run's predictions on a split, with the ids of the items it shows.

    The ids let the caller name tags for items that are not on the page (another language,
    another split) instead of counting them in the page's error-type table. A `detect --items`
    run is shown with `items` (its items file's, by language; `split` is then "items") and
    its context files, if any, in place of named sources. `limit` shows at most that many
    items of each language, its worst by IoU when labelled (else its first); the scores table
    still counts every item. A page of 40,000 items was 190 MB, which no browser shows well.
    """
    folder = prediction_folder(run_dir, split)
    data = items if items is not None else load_split(split, langs)
    tags = tags or {}
    blocks, summary, shown = [], [], []
    raw_problems: list[Problem] = []
    any_unchecked = False
    failed_counts: dict[str, tuple[int, Path]] = {}  # language -> (items failed, where listed)
    left_out: dict[str, int] = {}  # language -> items the limit keeps off the page
    scope = run_scope(run_dir)
    covers = scope.langs if scope is not None and scope.langs else None  # None: every language
    absent: list[str] = []  # languages its run covers and has no file of: it stopped before them
    cascade = _cascade(run_dir, split, set(data))
    for lang, items in data.items():
        path = folder / submission_name(lang, split)
        if not path.exists():
            if items and (covers is None or lang in covers):
                absent.append(lang)
            continue
        check = FailureCheck(path)  # an edited answer is said before its spans are found too long
        check.refuse_changed_answers(items)
        preds = load_predictions(path, {item.id: len(item.model_output_text) for item in items})
        if not preds:  # an empty page, exit 0: score, compare and sweep refuse the same file
            raise DataError([Problem(str(path), None, None, "the file holds no prediction")])
        failed = check.check(preds)
        if failed is not None and (n_failed := len(failed.failed & set(preds))):
            failed_counts[lang] = (n_failed, failed.where)
        ids = [i.id for i in items]
        if split == "items":  # a user's items: their context files, or none
            ctx = ContextFiles(context_files).load(ids).by_id if context_files else {}
        else:
            ctx = load_contexts(split, lang, sources, item_ids=ids).by_id
        raw = _raw_outputs(folder, lang, raw_problems)
        unchecked = _unverifiable(folder, lang, raw_problems)
        for name, member_folder in cascade.members.items():  # a chain member's unverifiable claims
            for item_id, entries in _unverifiable(member_folder, lang, raw_problems).items():
                unchecked.setdefault(item_id, []).extend(
                    {**e, "reason": f"{name}: {e.get('reason') if isinstance(e.get('reason'), str) else '?'}"}
                    for e in entries
                )
        any_unchecked = any_unchecked or bool(unchecked)
        # A run made with --limit predicted only some items: the others are left off the page
        # rather than shown as unscored ("IoU nan") and counted in its summary.
        predicted = [item for item in items if item.id in preds]
        labelled = bool(predicted) and predicted[0].is_labelled
        ious = [_iou(item, preds[item.id]) for item in predicted] if labelled else []
        cors = [_cor(item, preds[item.id]) for item in predicted] if labelled else []
        scores = dict(zip([item.id for item in predicted], zip(ious, cors)))
        chosen = predicted
        if limit is not None and len(predicted) > limit:
            order = np.argsort(ious, kind="stable") if labelled else range(len(predicted))
            keep = set(int(k) for k in order[:limit])
            chosen = [item for k, item in enumerate(predicted) if k in keep]
            left_out[lang] = len(predicted) - len(chosen)
        for item in chosen:
            block = _item_html(
                item,
                preds[item.id],
                ctx.get(item.id, []),
                raw.get(item.id, []),
                tags.get(item.id),
                unchecked.get(item.id),
                failed.where if failed is not None and item.id in failed.failed else None,
                scores.get(item.id),
                _cascade_html(cascade.records.get(item.id)),
            )
            blocks.append(block)
            shown.append(item.id)
        count = str(len(items)) if len(predicted) == len(items) else f"{len(predicted)} of {len(items)}"
        # as the scorer averages: an empty answer's NaN Cor makes its language's NaN, as there
        means = (float(np.mean(ious)), float(np.mean(cors))) if labelled else None
        summary.append((lang, count, means))
    if not summary:
        wanted = ", ".join(data)
        raise MushroomError(
            f"{folder}: no prediction file for {split} in {wanted}; a page without items would say nothing "
            "(choose the run's languages with --lang, or its split with --split)"
        )
    # the table counts the items on this page, as its filter shows them
    tag_counts = Counter(tags[item_id] for item_id in shown if item_id in tags)
    lang_options = "".join(f'<option value="{lang}">{lang}</option>' for lang, _, _ in summary)
    tag_options = "".join(
        f'<option value="{html.escape(t)}">{html.escape(t)}</option>' for t in sorted(tag_counts)
    )
    rows = "".join(
        f"<tr><td>{lang}</td><td>{n}</td>"
        + ("<td></td><td></td>" if means is None else "".join(f"<td>{v:.4f}</td>" for v in means))
        + "</tr>"
        for lang, n, means in summary
    )
    tag_table = "".join(
        f"<tr><td>{html.escape(t)}</td><td>{c}</td></tr>" for t, c in sorted(tag_counts.items())
    )
    config_path = run_dir / "config.json"
    config = html.escape(read_utf8(config_path)) if config_path.exists() else "(no config.json)"
    unchecked_legend = (
        f'\n<span style="background:{UNVERIFIABLE_COLOUR}">unverifiable: the context neither supports '
        "nor contradicts it (hover for the reason)</span>"
        if any_unchecked
        else ""
    )
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>mushroom report: {html.escape(run_dir.name)}</title>
<style>{_CSS}</style><script>{_JS}</script></head><body>
<h1>mushroom report: {html.escape(run_dir.name)} ({split})</h1>
<div class="legend"><span class="gold">gold span</span>
<span style="background:rgba(220,40,40,0.82)">probability 1</span>
<span style="background:rgba(220,40,40,0.47)">probability 0.5</span>
<span class="hard" style="background:rgba(220,40,40,0.47)">in a predicted hard span (what IoU scores)</span>{unchecked_legend}</div>
<h2>Scores</h2><table id="summary"><tr><th>lang</th><th>items</th><th>mean IoU</th><th>mean Cor</th></tr>{rows}</table>
{"<h2>Error types</h2><table id='tags'><tr><th>type</th><th>items</th></tr>" + tag_table + "</table>" if tag_counts else ""}
<details><summary>run config</summary><pre>{config}</pre></details>
{cascade.note}{_failed_html(failed_counts)}{_warnings_html(run_dir)}{_problems_html(raw_problems)}
<h2>Items</h2>
<p>language <select id="f-lang"><option value="all">all</option>{lang_options}</select>
error type <select id="f-tag"><option value="all">all</option><option value="none">untagged</option>{tag_options}</select>
worst <input id="f-worst" type="number" min="0" value="0" style="width:4em"> by IoU (0: all)
· showing <span id="shown">{len(blocks)}</span> <span id="f-note" class="meta"></span></p>{_left_out_html(left_out, limit)}{_absent_html(absent, split)}
{"".join(blocks)}
</body></html>
"""
    return ReportPage(page, shown, left_out)

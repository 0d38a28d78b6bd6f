"""Rich rendering of what the layers below return: score tables, comparisons, the run reporter.

Only the command line draws with rich (the HTML report writes its own markup); the run
service, main job and run configs report through `mushroom.runs.reporter.Reporter`,
implemented here.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from mushroom.evaluation.tables import mean_row
from mushroom.runs.reporter import Table as TableData


def score_table(title: str, rows: list[dict]) -> Table:
    """The per-language table printed by the main job and `mushroom score --per-lang`."""
    # Cells fold rather than end in an ellipsis: a narrow terminal must still show every number.
    table = Table(title=escape(title), title_justify="left")
    table.add_column("lang", overflow="fold")
    table.add_column("n", justify="right", overflow="fold")
    table.add_column("IoU (95% CI)", justify="right", overflow="fold")
    table.add_column("Cor (95% CI)", justify="right", overflow="fold")
    has_base = any("mark_all_iou" in r for r in rows)
    has_lb = any("lb1" in r for r in rows)
    if has_base:
        table.add_column("mark-all IoU", justify="right", overflow="fold")
    if has_lb:
        table.add_column("LB#1 test IoU/Cor", justify="right", overflow="fold")
    for r in rows:
        cells = [
            escape(r["lang"]),
            str(r["n"]),
            f"{r['iou']:.4f} [{r['iou_ci'][0]:.2f}, {r['iou_ci'][1]:.2f}]",
            f"{r['cor']:.4f} [{r['cor_ci'][0]:.2f}, {r['cor_ci'][1]:.2f}]",
        ]
        if has_base:
            base = r.get("mark_all_iou")
            style = "green" if base is not None and r["iou"] > base else "red"
            cells.append(f"[{style}]{base:.4f}[/{style}]" if base is not None else "")
        if has_lb:
            lb = r.get("lb1")
            cells.append(f"{lb.iou:.4f}/{lb.cor:.4f}" if lb else "")
        table.add_row(*cells)
    if len(rows) > 1:
        m = mean_row(rows)
        cells = ["mean", str(m["n"]), f"{m['iou']:.4f}", f"{m['cor']:.4f}"]
        if has_base:
            cells.append("" if m["mark_all_iou"] is None else f"{m['mark_all_iou']:.4f}")
        if has_lb:
            cells.append(f"{m['lb1'][0]:.4f}/{m['lb1'][1]:.4f}")
        table.add_row(*cells, style="bold")
    return table


def systems_table(title: str, comparison: dict[str, dict[str, dict[str, float]]], decimals: int = 3) -> Table:
    """Languages as rows, one "IoU Cor" column per system (`system -> lang -> metric`).

    One column per system, not two, so five systems fit an 80-column terminal (run.sh's
    output is often read in a log or a narrow pane).
    """
    langs = [lang for lang in next(iter(comparison.values())) if lang != "mean"] + ["mean"]
    table = Table(title=escape(title))
    table.add_column("lang", overflow="fold")
    for system in comparison:
        table.add_column(f"{escape(system)}\nIoU Cor", justify="right", overflow="fold")
    for lang in langs:
        cells = [
            f"{comparison[s][lang]['iou']:.{decimals}f} {comparison[s][lang]['cor']:.{decimals}f}"
            for s in comparison
        ]
        table.add_row(lang, *cells, end_section=lang == langs[-2])
    return table


def paired_table(title: str, rows: list[dict]) -> Table:
    """The comparison for the terminal; cells wrap (a CI goes under its mean), never cut.

    A narrow terminal (80 columns, a log, a split pane) must still show every number, so each
    score cell holds the mean on one line and its interval on the next, and every column may
    fold rather than end in an ellipsis.
    """
    table = Table(title=escape(title))
    for col in ("run", "lang", "n", "IoU\n[95% CI]", "Cor\n[95% CI]", "dIoU\n(p)", "dCor\n(p)"):
        table.add_column(col, justify="left" if col in ("run", "lang") else "right", overflow="fold")
    for r in rows:
        d_iou = f"{r['d_iou']:+.4f}\n({r['p_iou']:.3f})" if "d_iou" in r else "baseline"
        d_cor = f"{r['d_cor']:+.4f}\n({r['p_cor']:.3f})" if "d_cor" in r else ""
        table.add_row(
            escape(r["run"]),
            escape(r["lang"]),
            str(r["n"]),
            f"{r['iou']:.4f}\n[{r['iou_lo']:.2f}, {r['iou_hi']:.2f}]",
            f"{r['cor']:.4f}\n[{r['cor_lo']:.2f}, {r['cor_hi']:.2f}]",
            d_iou,
            d_cor,
            end_section=r["lang"] == "all",
        )
    return table


def plain_table(spec: TableData, title_justify: str = "left", justify: str | None = None) -> Table:
    """A table of values: left-aligned text, right-aligned numbers (a column of counts).

    `justify` aligns every column one way (a table of counts beside its language codes).
    """
    table = Table(title=escape(spec.title), title_justify=title_justify)  # type: ignore[arg-type]
    rows = [list(r.values()) if isinstance(r, dict) else list(r) for r in spec.rows]
    for k, col in enumerate(spec.columns):
        numbers = [r[k] for r in rows if r[k] != ""]
        right = bool(numbers) and all(isinstance(v, int | float) for v in numbers)
        # a file name folds rather than ending in "mushroo…": 14 files read alike (an audit)
        table.add_column(escape(col), justify=justify or ("right" if right else "left"), overflow="fold")  # type: ignore[arg-type]
    for r in rows:
        table.add_row(*(escape(str(v)) for v in r))
    return table


def fitted_tables(
    spec: TableData, console: Console, title_justify: str = "left", justify: str | None = None
) -> list[Table]:
    """A plain table as one or more tables no wider than the console, its first column in each."""
    return fit_to_width(plain_table(spec, title_justify, justify), console)


def fit_to_width(table: Table, console: Console, keys: int = 1) -> list[Table]:
    """A table as one or more tables no wider than the console, its first `keys` columns in each.

    rich fits a table too wide for the terminal by cutting words ("befo…"), and a header cut
    so is a count no one can name; folded instead, a score's digits went to the next line
    ("0.526" over "5", an audit at 40 columns), and read as another number. Split by columns
    instead, each part keeping the row names. A column too wide on its own still folds.
    """
    columns = table.columns
    rows = table.rows

    def part(cols: list[int], title: str | None) -> Table:
        sub = Table(title=title, title_justify=table.title_justify, show_lines=table.show_lines)
        for k in cols:
            col = columns[k]
            sub.add_column(
                col.header, justify=col.justify, overflow=col.overflow, style=col.style, no_wrap=col.no_wrap
            )
        cells = [list(columns[k].cells) for k in cols]
        for i, row in enumerate(rows):
            sub.add_row(*(c[i] for c in cells), style=row.style, end_section=row.end_section)
        return sub

    def fits(cols: list[int]) -> bool:
        wide = console.options.update_width(10_000)  # Measurement.get clamps to the width given
        return Measurement.get(console, wide, part(cols, None)).minimum <= console.width

    everything = list(range(len(columns)))
    lead = everything[:keys]
    if len(everything) <= keys + 1 or fits(everything):
        return [_words_whole(table, console)]
    parts: list[list[int]] = [list(lead)]
    for k in everything[keys:]:
        if len(parts[-1]) > keys and not fits([*parts[-1], k]):
            parts.append(list(lead))
        parts[-1].append(k)
    return [
        _words_whole(part(cols, table.title if n == 0 else None), console) for n, cols in enumerate(parts)
    ]


_NUMBER = re.compile(r"[-+(\[]*\d[\d.,:/%eE+-]*[)\]%,]*")
FOLDED_WORD = 10
"""A word of text longer than this may fold (a long run or file name); a number never does."""
NUMBERS, NAMES, PROSE = 0, 1, 2
"""Columns by what they hold, in the order they are given room: a number wrapped reads as
another; a long name folds; prose wraps between its words at no cost."""


def _column_range(header: object, cells: list) -> tuple[int, int, int, int]:
    """(narrowest width, its cells' width, NUMBERS/NAMES/PROSE, width with its header).

    The header's words count for the narrowest, not its lines for the width: a header wraps
    between its words at no cost, and a long one ("vote (mean prob, majority)") took the
    room a cell needed to keep "0.622 0.644" on one line.
    """
    low, high, whole, long_name, numbers, words = 1, 1, 1, False, 0, 0
    for k, cell in enumerate([header, *cells]):
        plain = cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain
        for line in plain.splitlines() or [""]:
            whole = max(whole, cell_len(line))
            high = max(high, cell_len(line)) if k else high
            for word in line.split():
                size = cell_len(word)
                number = _NUMBER.fullmatch(word) is not None
                if k:  # what the cells hold, not the header
                    numbers, words = numbers + number, words + (not number)
                    long_name = long_name or (not number and size > FOLDED_WORD)
                # a header's word whole ("predictions" folded to "prediction" over "s")
                low = max(low, size if number or not k else min(size, FOLDED_WORD))
    kind = NAMES if long_name else NUMBERS if numbers >= words else PROSE
    return low, max(high, low), kind, whole


def _words_whole(table: Table, console: Console) -> Table:
    """`table` with fixed column widths that break no number, where it is narrowed to fit.

    rich narrows the widest columns first, below their longest word, which then folds: a
    score "0.6700/0.6488" came out as "0.6700/0.648" over "8", a header as "semanti" over
    "c" (an audit at 60 columns). Here each column keeps its longest number, and the room
    left goes to the columns of numbers, then of long names, then of prose (`NUMBERS`), in
    each the least wanting whole and the rest in equal shares: a score and its interval
    share a line where they can, and a file name is folded only when prose cannot give way.
    """
    wide = console.options.update_width(10_000)
    ranges = [_column_range(col.header, list(col.cells)) for col in table.columns]
    natural = Measurement.get(console, wide, table).maximum
    room = console.width - (natural - sum(r[3] for r in ranges))  # less borders and padding
    lowest = sum(r[0] for r in ranges)
    if natural <= console.width or room < lowest:  # it fits; or nothing does, and rich folds
        return table
    spare, want = room - lowest, [r[1] - r[0] for r in ranges]
    widths = [r[0] for r in ranges]
    for kind in (NUMBERS, NAMES, PROSE):
        wanting = sorted((k for k, r in enumerate(ranges) if r[2] == kind), key=want.__getitem__)
        for n, k in enumerate(wanting):  # the least wanting whole, the rest an equal share
            given = min(want[k], spare // (len(wanting) - n))
            widths[k], spare = widths[k] + given, spare - given
    for col, width in zip(table.columns, widths):
        col.width = width
    return table


def print_fitted(console: Console, table: Table, keys: int = 1) -> None:
    """Prints `table`, split by columns where it is wider than the console (`fit_to_width`)."""
    for piece in fit_to_width(table, console, keys):
        console.print(piece)


def render(spec: TableData) -> Table:
    """The rich table for a reported table, by its kind."""
    if spec.kind == "scores":
        return score_table(spec.title, list(spec.rows))
    if spec.kind == "systems":
        return systems_table(spec.title, spec.data)
    if spec.kind == "paired":
        return paired_table(spec.title, list(spec.rows))
    return plain_table(spec)


PLAIN_EVERY_S = 30.0
"""How often a stage's progress is said as a line where the bar cannot redraw (a pipe, a CI log)."""


class _Progress(Progress):
    """Rows named by plain text: a stage's description is escaped, never read as markup.

    Where the console is no terminal, rich draws the bar once, when the stage ends: a CI log
    of an hours-long LLM run stayed silent and looked hung (an audit), and CI services stop a
    job after minutes without output. There a line says each stage's progress every
    `PLAIN_EVERY_S` seconds.
    """

    def __init__(self, *columns: ProgressColumn, plain_every: float | None = None, **kwargs):
        super().__init__(*columns, **kwargs)
        every = PLAIN_EVERY_S if plain_every is None else plain_every
        self._plain_every = every if not self.console.is_terminal and not self.disable else None
        self._said: dict = {}  # task id -> when its progress was last said (or its stage began)

    def add_task(self, description: str, *args, **kwargs):  # type: ignore[override]
        task_id = super().add_task(escape(description), *args, **kwargs)
        self._said[task_id] = time.monotonic()
        return task_id

    def advance(self, task_id, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._say(task_id)

    def update(self, task_id, **kwargs) -> None:  # type: ignore[override]
        super().update(task_id, **kwargs)
        self._say(task_id)

    def _say(self, task_id) -> None:
        if self._plain_every is None:
            return
        now = time.monotonic()
        with self._lock:  # stages advance from worker threads: one line per period
            task = self._tasks.get(task_id)
            if task is None or task.finished or now - self._said.get(task_id, now) < self._plain_every:
                return
            self._said[task_id] = now
        speed = _average_rate(task)
        rate = "" if speed is None else f", {_RateColumn().render(task).plain}"  # 103/s, not 1e+02/s
        total = f"/{task.total:g}" if task.total is not None else ""
        left = _LeftColumn().render(task).plain if task.total is not None and speed else ""
        # the description is escaped markup (`add_task`): printed as markup, it reads as given
        said = f"{task.description}: {task.completed:g}{total}{rate}" + (f", {left} left" if left else "")
        self.console.print(said, highlight=False)


def _average_rate(task) -> float | None:
    """Items per second since the stage began.

    rich's own estimate looks at the last few updates only: a detector that finishes a batch
    of items at once (pyes, the llm's temperature ensemble) or a resumed run that skips
    finished items in bursts made it read thousands per second for a stage that does one
    item every ten seconds.
    """
    elapsed = task.finished_time if task.finished else task.elapsed
    if not elapsed or not task.completed:
        return None
    return task.completed / elapsed


class _RateColumn(ProgressColumn):
    """Items per second, averaged over the stage so far."""

    def render(self, task) -> Text:
        speed = _average_rate(task)
        if speed is None:
            return Text("")
        text = f"{speed:,.0f}/s" if speed >= 10 else f"{speed:.2g}/s"
        return Text(text, style="progress.data.speed")


class _LeftColumn(ProgressColumn):
    """The time left at the stage's average rate (blank until an item is done)."""

    def render(self, task) -> Text:
        speed = _average_rate(task)
        if task.finished or task.total is None or speed is None:
            return Text("0:00:00" if task.finished else "-:--:--", style="progress.remaining")
        left = int((task.total - task.completed) / speed)
        return Text(f"{left // 3600}:{left // 60 % 60:02d}:{left % 60:02d}", style="progress.remaining")


def progress_bar(quiet: bool = False, console: Console | None = None) -> Progress:
    """The progress bar every long stage uses: done of total, items per second, time spent and left."""
    return _Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _RateColumn(),
        TimeElapsedColumn(),
        _LeftColumn(),
        disable=quiet,
        transient=False,
        console=console,
    )


class RichReporter:
    """The run reporter of the command line: rich tables, yellow warnings, progress bars.

    The command line gives it an `err_console` (stderr) for warnings, as `check` and `score`
    print theirs, so that a run's tables can be piped or saved without its warnings mixed in,
    and warnings are not lost when stdout goes to a file. Given only a `console` (a log
    file), it writes warnings there too.
    """

    def __init__(self, console: Console | None = None, err_console: Console | None = None):
        self.console = console or Console()
        self.err_console = err_console or (console if console is not None else Console(stderr=True))

    def message(self, text: str, lead: str = "") -> None:
        self.console.print(f"[yellow]{escape(lead)}[/yellow] {escape(text)}" if lead else escape(text))

    def warning(self, text: str) -> None:
        self.err_console.print(f"[yellow]warning:[/yellow] {escape(text)}")

    def table(self, table: TableData) -> None:
        print_fitted(self.console, render(table), keys=2 if table.kind == "paired" else 1)

    @contextmanager
    def progress(self, disable: bool = False) -> Iterator[Progress]:
        # on stderr, as the warnings: `> log` keeps the results, and the bar stays in sight
        with progress_bar(disable, self.err_console) as bar:
            yield bar

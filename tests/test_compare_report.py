import re
import shutil
import subprocess

import pytest
from cli_helpers import cli, limited_run
from conftest import write_lines
from typer.testing import CliRunner

from mushroom.cli.app import app
from mushroom.data.predictions import submission_name
from mushroom.data.runfolder import prediction_folder
from mushroom.errors import DataError, MushroomError
from mushroom.evaluation.compare import comparison_rows, load_tags, score_run, sweep, sweep_svg, tag_rows
from mushroom.evaluation.report import build_report, highlighted_answer

runner = CliRunner()


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    for name, threshold in (("lo", "0.1"), ("hi", "0.6")):
        res = runner.invoke(
            app,
            [
                "detect",
                "--split",
                "val",
                "--lang",
                "en",
                "--lang",
                "it",
                "--out",
                str(base / name),
                "-o",
                f"threshold={threshold}",
                "--quiet",
            ],
        )
        assert res.exit_code == 0, res.output
    return base / "lo", base / "hi"


def test_compare_pairs_items_and_writes_markdown_and_csv(two_runs, tmp_path):
    lo, hi = two_runs
    rows = comparison_rows([score_run(lo), score_run(hi)])
    by = {(r["run"], r["lang"]): r for r in rows}
    assert set(by) == {(run, lang) for run in ("lo", "hi") for lang in ("en", "it", "all")}
    assert "d_iou" not in by[("lo", "en")]
    hi_en, lo_en = by[("hi", "en")], by[("lo", "en")]
    assert hi_en["d_iou"] == pytest.approx(hi_en["iou"] - lo_en["iou"])
    assert 0 < hi_en["p_iou"] <= 1 and hi_en["iou_lo"] <= hi_en["iou"] <= hi_en["iou_hi"]
    assert by[("hi", "all")]["iou"] == pytest.approx((hi_en["iou"] + by[("hi", "it")]["iou"]) / 2)
    # soft labels do not depend on the threshold: same Cor, p-value 1
    assert hi_en["d_cor"] == 0 and hi_en["p_cor"] == 1
    tags = write_lines(
        tmp_path / "tags.jsonl",
        [
            {"id": "val-en-1", "error_type": "incorrect-context"},
            {"id": "val-it-2", "error_type": "incorrect-context"},
            {"id": "val-en-3", "error_type": "semantic-equivalence-fp", "note": "synonym"},
            {"id": "val-xx-99", "error_type": "other"},  # no such item: not counted, but named
        ],
    )
    res = runner.invoke(
        app, ["compare", str(lo), str(hi), "--tags", str(tags), "--eval-dir", str(tmp_path), "--name", "c"]
    )
    assert res.exit_code == 0, res.output
    assert (
        "1 of 4 tagged ids are not among the" in " ".join(res.output.split()) and "'val-xx-99'" in res.output
    )
    md = (tmp_path / "c.md").read_text()
    assert "| hi | en |" in md and "## Error types" in md
    # the baseline named by its folder's name, as a user names it: "not a valid integer" was said
    res = runner.invoke(app, ["compare", str(lo), str(hi), "--baseline", "hi", "--eval-dir", str(tmp_path)])
    assert res.exit_code == 0 and "runs against baseline hi" in " ".join(res.output.split()), res.output
    res = runner.invoke(app, ["compare", str(lo), str(hi), "--baseline", "mid", "--eval-dir", str(tmp_path)])
    assert "--baseline mid: is none of the runs given (0: " in str(res.exception), res.output
    res = runner.invoke(app, ["compare", str(lo), str(hi), "--baseline", "HI", "--eval-dir", str(tmp_path)])
    assert f"(did you mean {hi}, index 1?)" in str(res.exception), res.output
    csv_lines = (tmp_path / "c.csv").read_text().splitlines()
    assert csv_lines[0].startswith("run,lang,n,iou") and len(csv_lines) == 1 + 6
    t_rows = tag_rows([score_run(lo)], load_tags(tags))
    assert {r["error_type"]: r["items"] for r in t_rows} == {
        "incorrect-context": 2,
        "semantic-equivalence-fp": 1,
    }
    # the report counts the tags of the items on its page, and names the others
    page = tmp_path / "r.html"
    res = runner.invoke(app, ["report", str(lo), "--lang", "en", "--tags", str(tags), "--out", str(page)])
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "2 of 4 tagged ids are not among the 50 items on the page" in said and "'val-it-2'" in said
    table = re.search(r"<table id='tags'>(.*?)</table>", page.read_text()).group(1)
    assert "<td>incorrect-context</td><td>1</td>" in table and "<td>other</td>" not in table


def test_a_report_with_no_prediction_file_for_its_languages_is_refused(two_runs, tmp_path):
    lo, _ = two_runs
    out = tmp_path / "r.html"
    res = runner.invoke(app, ["report", str(lo), "--lang", "de", "--out", str(out)])
    assert res.exit_code != 0 and "no prediction file for val in de" in str(res.exception)
    assert not out.exists()


def test_an_empty_prediction_file_or_tags_file_is_refused_not_shown_as_an_empty_page(two_runs, tmp_path):
    lo, _ = two_runs
    empty_run = tmp_path / "empty"
    shutil.copytree(lo, empty_run)
    for path in prediction_folder(empty_run, "val").glob("mushroom.*-val.v2.jsonl"):
        path.write_text("")
    out = tmp_path / "r.html"
    res = runner.invoke(app, ["report", str(empty_run), "--lang", "en", "--out", str(out)])
    assert res.exit_code != 0 and "the file holds no prediction" in str(res.exception)
    assert not out.exists()
    (tmp_path / "tags.jsonl").write_text("")
    with pytest.raises(DataError, match="tags.jsonl: no tag"):
        load_tags(tmp_path / "tags.jsonl")


def test_a_report_never_overwrites_a_file_of_the_run_it_shows(two_runs, tmp_path):
    """`report --out RUN/predictions/mushroom.en-val.v2.jsonl` wrote HTML over the predictions."""
    lo, _ = two_runs
    pred = lo / "predictions" / "mushroom.en-val.v2.jsonl"
    before = pred.read_bytes()
    for target in (pred, lo / "config.json", lo / "predictions" / "items" / "en.jsonl"):
        res = runner.invoke(app, ["report", str(lo), "--out", str(target)])
        assert res.exit_code != 0 and "is inside the run folder" in str(res.exception), res.output
    assert pred.read_bytes() == before
    # an .html page there is a report's own place
    res = runner.invoke(app, ["report", str(lo), "--out", str(lo / "mine.html")])
    assert res.exit_code == 0 and (lo / "mine.html").is_file(), res.output
    # a page is written as one: in r.txt it opened as text
    res = runner.invoke(app, ["report", str(lo), "--out", str(tmp_path / "r.txt")])
    assert res.exit_code != 0 and "give a file name ending in .html" in str(res.exception), res.output
    assert not (tmp_path / "r.txt").exists()
    # nor one of its inputs outside the run: the page replaced the tags file
    tags = write_lines(tmp_path / "tags.jsonl", [{"id": "val-en-1", "error_type": "other"}])
    before = tags.read_bytes()
    res = runner.invoke(app, ["report", str(lo), "--tags", str(tags), "--out", str(tags)])
    assert res.exit_code != 0 and "is an input of this command" in str(res.exception), res.output
    assert tags.read_bytes() == before


def test_a_report_limit_shows_the_worst_items_of_each_language_and_scores_them_all(
    two_runs, tmp_path, monkeypatch
):
    """A page of 40,000 items was 190 MB: --limit keeps it to what a browser shows."""
    lo, _ = two_runs
    whole, page = tmp_path / "whole.html", tmp_path / "limited.html"
    res = runner.invoke(app, ["report", str(lo), "--out", str(whole)])
    assert res.exit_code == 0 and "--limit" not in res.output, res.output
    res = runner.invoke(app, ["report", str(lo), "--limit", "3", "--out", str(page)])
    said = " ".join(res.output.split())
    assert (
        res.exit_code == 0 and "94 items are left off (en 47, it 47); the scores table counts them" in said
    ), said
    ious = {lang: sorted(float(x) for x in re.findall(rf'data-lang="{lang}"[^>]*data-iou="([0-9.]+)"', whole.read_text()))
            for lang in ("en", "it")}  # fmt: skip
    for lang, scores in ious.items():
        shown = sorted(
            float(x) for x in re.findall(rf'data-lang="{lang}"[^>]*data-iou="([0-9.]+)"', page.read_text())
        )
        assert len(scores) == 50 and shown == scores[:3], lang
    summary = re.search(r"<table id=\"summary\">(.*?)</table>", page.read_text()).group(1)
    assert summary == re.search(r"<table id=\"summary\">(.*?)</table>", whole.read_text()).group(1)
    monkeypatch.setattr("mushroom.evaluation.report.MANY_ITEMS", 60)
    res = runner.invoke(app, ["report", str(lo), "--out", str(tmp_path / "many.html")])
    assert "the page shows 100 items, more than a browser shows with ease" in " ".join(res.output.split())


def test_bad_tag_file_names_line_and_field(tmp_path):
    bad = write_lines(
        tmp_path / "t.jsonl",
        [{"id": "a", "error_type": "incorrect-context"}, {"id": "b", "error_type": "typo"}],
    )
    with pytest.raises(DataError, match=r"t.jsonl:2: id 'b': field 'error_type'"):
        load_tags(bad)


def test_sweep_moves_iou_with_the_threshold_and_plots(two_runs, tmp_path):
    lo, _ = two_runs
    rows = sweep([lo], "val", thresholds=[0.05, 0.5, 0.95], langs=["en"])
    assert [r["threshold"] for r in rows] == [0.05, 0.5, 0.95]
    assert len({round(r["iou"], 6) for r in rows}) > 1
    svg = sweep_svg(rows)
    assert svg.startswith("<svg") and svg.count("<polyline") == 2
    res = runner.invoke(app, ["sweep", str(lo), "--lang", "en", "--svg", str(tmp_path / "s.svg")])
    assert res.exit_code == 0 and (tmp_path / "s.svg").is_file() and (tmp_path / "s.csv").is_file()
    assert "Cor at a threshold: probabilities below it set to 0" in res.output  # why Cor moves too
    # again: its own numbers are written over; a file of the user's under that name is not
    res = runner.invoke(app, ["sweep", str(lo), "--lang", "en", "--svg", str(tmp_path / "s.svg")])
    assert res.exit_code == 0, res.output
    (tmp_path / "mine.csv").write_text("a,b\n1,2\n")
    res = runner.invoke(app, ["sweep", str(lo), "--lang", "en", "--svg", str(tmp_path / "mine.svg")])
    assert res.exit_code != 0 and "which exists and is no sweep's" in str(res.exception)
    assert (tmp_path / "mine.csv").read_text() == "a,b\n1,2\n" and not (tmp_path / "mine.svg").exists()


def test_sweep_of_a_file_that_lost_items_names_them(two_runs, tmp_path):
    lo, _ = two_runs
    run = tmp_path / "cut"
    shutil.copytree(lo, run)
    file = prediction_folder(run, "val") / submission_name("en", "val")
    lines = file.read_text(encoding="utf-8").splitlines()
    file.write_text("\n".join(lines[:-2]) + "\n", encoding="utf-8")
    with pytest.raises(MushroomError, match=r"no prediction for 2 of 50 items: 'val-en-\d+', 'val-en-\d+'$"):
        sweep([run], "val", thresholds=[0.5], langs=["en"])


def test_highlighting_escapes_text_and_marks_gold_and_predictions():
    import numpy as np

    text = "a <b> & c"
    out = highlighted_answer(
        text, np.array([0, 0, 1, 1, 1, 0, 0, 0, 0], bool), np.array([0, 0, 0, 0.5, 0.5, 0, 0, 0, 1.0])
    )
    assert "<b>" not in out and "&lt;" in out and "&amp;" in out
    assert re.sub(r"<[^>]+>", "", out) == "a &lt;b&gt; &amp; c"
    assert out.count('class="seg gold pred"') == 1 and "rgba(220,40,40,0.82)" in out


def test_the_predicted_hard_spans_are_marked_apart_from_the_shading(tmp_path):
    """Every character with a probability was shaded alike: one below the threshold read as
    predicted beside "predicted hard spans: none" (a visual review)."""
    from mushroom.data.records import Item, Prediction, SoftSpan
    from mushroom.evaluation.report import _CSS, _item_html

    item = Item(id="i", lang="en", model_input="q", model_output_text="one two three")
    soft = [SoftSpan(start=0, end=3, prob=0.3), SoftSpan(start=4, end=7, prob=0.9)]
    body = _item_html(item, Prediction(id="i", soft_labels=soft, hard_labels=[[4, 7]]), [], [], None)
    assert re.search(r'class="seg pred hard"[^>]*>two<', body), body
    assert re.search(r'class="seg pred"[^>]*>one<', body), body  # shaded, not in a hard span
    assert "overflow-wrap:anywhere" in _CSS  # a 300-letter URL ran off the page


def test_an_id_with_a_right_to_left_override_cannot_reverse_the_scores_beside_it():
    """An item id is data: a U+202E in it displayed the "IoU ... Cor ..." after it reversed."""
    from mushroom.data.records import Item
    from mushroom.evaluation.report import _item_html

    item = Item(id="val-en-1\u202e", lang="en", model_input="q", model_output_text="an answer")
    body = _item_html(item, None, [], [], tag="odd\u202e")
    assert "<bdi>val-en-1\u202e</bdi> · en" in body and "<bdi>odd\u202e</bdi>" in body


def test_right_to_left_text_reads_in_its_own_direction_and_a_nul_is_shown_not_written():
    """Arabic answers sat in left-to-right paragraphs (punctuation on the wrong side), and a NUL
    was written raw into the page, which parsers drop: the spans after it moved by one."""
    from mushroom.data.records import Context, Item
    from mushroom.evaluation.report import _item_html

    item = Item(id="a", lang="ar", model_input="ما هي عاصمة فرنسا؟", model_output_text="باريس.\x00 نعم")
    body = _item_html(item, None, [Context(source="s", text="باريس هي العاصمة.")], [], tag=None)
    # the question isolated from its "Q:" label, whose Latin letter set it left-to-right
    assert (
        '<b>Q:</b> <bdi dir="auto">ما هي عاصمة فرنسا؟</bdi>' in body
        and '<div class="answer" dir="auto">' in body
    )
    assert '<pre dir="auto">' in body and "\x00" not in body and "\ufffd" in body


@pytest.mark.skipif(
    shutil.which("chromium") is None, reason="needs Debian's chromium package (apt install chromium)"
)
def test_report_renders_in_headless_chromium_with_filters(two_runs, tmp_path):
    lo, _ = two_runs
    page = tmp_path / "r.html"
    res = runner.invoke(app, ["report", str(lo), "--out", str(page)])
    assert res.exit_code == 0, res.output

    def dom(fragment):
        proc = subprocess.run(
            [
                "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--virtual-time-budget=3000",
                "--dump-dom",
                f"file://{page}#{fragment}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout

    all_items = dom("")
    assert all_items.count('class="item"') == 100  # en + it, none hidden
    worst = dom("lang=it&worst=4")
    assert worst.count('class="item"') == 4 and worst.count('class="item hidden"') == 96
    shown = re.findall(r'class="item" id="([^"]+)" data-lang="(\w+)" data-iou="([0-9.]+)"', worst)
    assert {lang for _, lang, _ in shown} == {"it"}
    ious = sorted(float(v) for v in re.findall(r'data-lang="it" data-iou="([0-9.]+)"', worst))
    assert sorted(float(v) for _, _, v in shown) == ious[:4]
    # worst first, as asked (they stood in the page's order)
    assert [float(v) for _, _, v in shown] == ious[:4]
    assert '<span id="shown">4</span>' in worst
    # a filter this page cannot apply is said, not an empty page with a blank box
    other = dom("lang=fr")
    assert other.count('class="item"') == 100 and "(not on this page: lang=fr)" in other
    assert "context: <bdi>perplexity-sonar-pro</bdi>" in worst and 'class="seg gold' in all_items


def test_report_without_labels_says_unlabelled(tmp_path):
    res = runner.invoke(
        app, ["detect", "--split", "test", "--lang", "eu", "--out", str(tmp_path / "t"), "--quiet"]
    )
    assert res.exit_code == 0, res.output
    page = build_report(tmp_path / "t", "test", ["eu"]).html
    assert page.count("unlabelled") >= 50 and page.startswith("<!DOCTYPE html>")


def test_compare_names_the_languages_it_leaves_out(tmp_path, capsys):
    from mushroom.cli.app import app
    from mushroom.cli.boundary import run_cli

    def cli(*args):
        code = run_cli(app, [str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    for name, langs in (("two", "en,de"), ("one", "en")):
        code, _, err = cli("detect", "--lang", langs, "--out", tmp_path / name, "--quiet")
        assert code == 0, err
    code, out, err = cli("compare", tmp_path / "two", tmp_path / "one", "--eval-dir", tmp_path / "eval")
    assert code == 0, err
    assert "two: de left out, since one lacks them; compared on en" in " ".join(err.split())
    code, _, err = cli("compare", tmp_path / "one", tmp_path / "one", "--eval-dir", tmp_path / "eval")
    assert code == 0 and "is given twice" in err and "compared with itself" in err, err
    assert "one:" not in err


def test_report_shows_unverifiable_claims_in_a_third_colour_with_the_reason(tmp_path):
    import json

    from mushroom.data.splits import load_split
    from mushroom.evaluation.report import UNVERIFIABLE_COLOUR

    run = tmp_path / "r"
    res = runner.invoke(
        app, ["detect", "--split", "val", "--lang", "en", "--limit", "2", "--out", str(run), "--quiet"]
    )
    assert res.exit_code == 0, res.output
    before = build_report(run, "val", ["en"]).html
    assert "unverifiable" not in before and UNVERIFIABLE_COLOUR not in before  # a run without any: as before
    item = load_split("val", ["en"])["en"][0]
    ledger = prediction_folder(run, "val") / "items" / "en.jsonl"
    row = json.loads(ledger.read_text().splitlines()[0])
    assert row["id"] == item.id
    word = item.model_output_text.split()[0]
    row["detail"] = {
        "unverifiable": [
            {"claim": 1, "text": word, "start": 0, "end": len(word), "reason": "the context <says> nothing"},
            {"start": "0", "end": 3, "reason": "offsets not numbers: not shown"},
        ]
    }
    with ledger.open("a") as out:  # the last line per id wins, as in a resumed run
        out.write(json.dumps(row) + "\n")
    page = build_report(run, "val", ["en"]).html
    assert len(re.findall(r'class="seg[^"]*unverifiable"', page)) == 1  # the second entry is refused
    span = re.search(r'<span class="seg[^"]*unverifiable"([^>]*)>([^<]*)</span>', page)
    assert span and span.group(2) == html_escape(word) and UNVERIFIABLE_COLOUR in span.group(1)
    assert "unverifiable: the context &lt;says&gt; nothing" in span.group(1)
    assert "the context &lt;says&gt; nothing</div>" in page and "offsets not numbers" not in page
    assert "unverifiable: the context neither supports nor contradicts it" in page  # the legend


def test_a_report_shows_the_contexts_its_run_read(tmp_path):
    """The page showed the default sources for a run made with others: an item the detector
    saw with no context looked as if it had one."""
    run = tmp_path / "r"
    args = ["detect", "--split", "val", "--lang", "en", "--limit", "2", "--contexts", "deepseek-r1"]
    res = runner.invoke(app, [*args, "--out", str(run), "--quiet"])
    assert res.exit_code == 0, res.output
    page = tmp_path / "p.html"
    assert runner.invoke(app, ["report", str(run), "--out", str(page)]).exit_code == 0
    assert "deepseek-r1" in page.read_text() and "perplexity-sonar-pro" not in page.read_text()
    # asked for, another source is shown
    args = ["report", str(run), "--out", str(page), "--contexts", "perplexity-sonar-pro"]
    assert runner.invoke(app, args).exit_code == 0
    assert "perplexity-sonar-pro" in page.read_text()
    # a run that read no context at all shows none
    bare = tmp_path / "bare"
    args = ["detect", "--split", "val", "--lang", "en", "--limit", "1", "--contexts", "none"]
    assert runner.invoke(app, [*args, "--out", str(bare), "--quiet"]).exit_code == 0
    assert runner.invoke(app, ["report", str(bare), "--out", str(page)]).exit_code == 0
    assert "no context" in page.read_text() and "deepseek-r1" not in page.read_text()


def html_escape(text):
    import html

    return html.escape(text)


def test_runs_sharing_no_language_are_refused_not_compared_as_nan(tmp_path, capsys):
    """It printed tables of n 0 and NaN with numpy warnings, wrote them, and exited 0."""
    runs = []
    for lang in ("en", "de"):
        out = tmp_path / lang
        res = runner.invoke(
            app, ["detect", "--split", "val", "--lang", lang, "--limit", "3", "--out", str(out), "--quiet"]
        )
        assert res.exit_code == 0, res.output
        runs.append(score_run(out))
    with pytest.raises(
        MushroomError, match=r"share no language, so there is nothing to compare \(en: en; de: de\)"
    ):
        comparison_rows(runs)
    code, _, err = cli(capsys, "compare", tmp_path / "en", tmp_path / "de", "--eval-dir", tmp_path / "ev")
    assert code == 2 and "nothing to compare" in err and not (tmp_path / "ev").exists()


def test_sweep_finds_the_languages_of_loose_files_and_sweeps_a_full_run_with_a_limited_one(
    two_runs, tmp_path, capsys
):
    from cli_helpers import cli

    lo, _ = two_runs
    loose = tmp_path / "loose"
    loose.mkdir()
    shutil.copy(prediction_folder(lo, "val") / submission_name("en", "val"), loose)
    code, out, err = cli(capsys, "sweep", loose, "--svg", tmp_path / "a.svg")
    assert code == 0 and "best IoU" in out, err  # it looked for an Arabic file first
    code, _, err = cli(capsys, "sweep", lo, loose, "--svg", tmp_path / "b.svg")
    assert code == 0 and "sweeping en: not every run has it" in " ".join(err.split()), err
    code, _, err = cli(capsys, "sweep", lo, "--lang", "de", "--svg", tmp_path / "c.svg")
    assert code == 2 and "has no val predictions for de" in err and "it has: en, it" in err, err
    five = tmp_path / "five"
    code, _, err = cli(capsys, "detect", "--lang", "en", "--limit", "5", "--out", five, "--quiet")
    assert code == 0, err
    code, out, err = cli(capsys, "sweep", lo, five, "--svg", tmp_path / "d.svg")
    assert code == 0 and "is not among the items" not in err and "swept 5 of 50 gold items" in err, err


def test_report_marks_cut_off_replies_and_shows_the_runs_warnings(tmp_path):
    """A run whose replies were cut off showed only "predicted hard spans: none", which reads
    as a method that found nothing."""
    import json

    from mushroom.data.splits import load_split

    run = tmp_path / "r"
    res = runner.invoke(
        app, ["detect", "--split", "val", "--lang", "en", "--limit", "1", "--out", str(run), "--quiet"]
    )
    assert res.exit_code == 0, res.output
    assert "the run's warnings" not in build_report(run, "val", ["en"]).html
    item = load_split("val", ["en"])["en"][0]
    raw = prediction_folder(run, "val") / "raw" / "en.raw.jsonl"
    row = {"id": item.id, "texts": ['{"incorrect_spans": [', "{}"], "finish_reasons": ["length", "stop"]}
    raw.write_text(json.dumps(row) + "\n")
    summary = json.loads((run / "summary.json").read_text())
    summary["warnings"] = ["llm:val en: 1 of 1 LLM responses <were> cut off"]
    (run / "summary.json").write_text(json.dumps(summary))
    page = build_report(run, "val", ["en"]).html
    assert "[sample 1 of 2] [cut off at max_tokens] " in page and "[sample 2 of 2] {}" in page
    assert "the run's warnings (1)" in page and "1 of 1 LLM responses &lt;were&gt; cut off" in page
    # no finish reason (a replay file without them): the token count against the budget says it
    row = {
        "id": item.id,
        "texts": ['{"incorrect_spans": ['],
        "usage": {"completion_tokens": 64},
        "max_tokens": 64,
    }
    raw.write_text(json.dumps(row) + "\n")
    assert "[cut off at max_tokens] " in build_report(run, "val", ["en"]).html
    row["usage"] = {"completion_tokens": 12}
    raw.write_text(json.dumps(row) + "\n")
    assert "[cut off at max_tokens]" not in build_report(run, "val", ["en"]).html
    # a folder below the run (its predictions/) shows the run's warnings too
    assert "the run's warnings (1)" in build_report(run / "predictions", "val", ["en"]).html
    # another folder's warning (a variant's, "llm:other/val") is not this folder's
    summary["warnings"].append("llm:other/val en: 2 of 2 LLM responses were unparseable")
    (run / "summary.json").write_text(json.dumps(summary))
    page = build_report(run / "predictions", "val", ["en"]).html
    assert "the run's warnings of predictions (1)" in page and "2 of 2 LLM" not in page
    assert "the run's warnings (2)" in build_report(run, "val", ["en"]).html  # the run's own page: all
    # a folder's name is the run's sender's text, escaped like every other
    import shutil

    odd = run / "<img src=x onerror=alert(1)>"
    shutil.copytree(run / "predictions", odd / "predictions")
    page = build_report(odd, "val", ["en"]).html
    assert "<img src=x" not in page and "the run's warnings of &lt;img src=x onerror=alert(1)&gt;" in page


def test_a_run_stopped_before_it_finished_is_said_by_compare_sweep_and_report(tmp_path, capsys):
    """A run stopped in English was shown on the languages it had finished, as a whole run."""
    from mushroom.cli.app import app as cli_app
    from mushroom.cli.boundary import run_cli

    def cli(*args):
        code = run_cli(cli_app, [str(a) for a in args])
        return code, " ".join(capsys.readouterr().err.split())

    for name in ("done", "stopped"):
        code, err = cli("detect", "--lang", "en,de", "--out", tmp_path / name, "--quiet")
        assert code == 0, err
    (tmp_path / "stopped" / "summary.json").unlink()  # as a Ctrl-C leaves it
    said = "has no summary.json: its run was stopped before it finished, or is still running"
    for args in (
        ("compare", tmp_path / "done", tmp_path / "stopped", "--eval-dir", tmp_path / "e"),
        ("sweep", tmp_path / "stopped", "--svg", tmp_path / "s.svg"),
        ("report", tmp_path / "stopped", "--out", tmp_path / "r.html"),
    ):
        code, err = cli(*args)
        assert code == 0 and said in err and "languages it finished (de, en)" in err, (args, err)
    code, err = cli("report", tmp_path / "done", "--out", tmp_path / "d.html")
    assert code == 0 and "summary.json" not in err, err
    # a damaged one hid the run's own warnings from the page, unsaid
    (tmp_path / "done" / "summary.json").write_text("garbage")
    code, err = cli("report", tmp_path / "done", "--out", tmp_path / "d.html")
    assert code == 0 and "summary.json cannot be read (damaged)" in err, err


def test_a_request_asked_again_is_one_raw_output_in_the_report(tmp_path):
    """A failed call retried by a re-run showed as one more sample of the detector's."""
    import json

    from mushroom.data.splits import load_split

    run = tmp_path / "r"
    res = runner.invoke(
        app, ["detect", "--split", "val", "--lang", "en", "--limit", "1", "--out", str(run), "--quiet"]
    )
    assert res.exit_code == 0, res.output
    item = load_split("val", ["en"])["en"][0]
    raw = prediction_folder(run, "val") / "raw" / "en.raw.jsonl"
    # keyed as the llm detector keys them: the item's id, every temperature alike
    records = [
        {"id": item.id, "key": item.id, "temperature": 0.0, "error": "HTTP 500"},
        {"id": item.id, "key": item.id, "temperature": 0.7, "texts": ["second temperature"]},
        {"id": item.id, "key": item.id, "temperature": 0.0, "texts": ["first temperature, asked again"]},
    ]
    raw.write_text("".join(json.dumps(r) + "\n" for r in records))
    page = build_report(run, "val", ["en"]).html
    assert page.count("raw model output ") == 2, page
    assert "[asked 2 times: the last reply] first temperature, asked again" in page
    assert "HTTP 500" not in page and "second temperature" in page


def test_compare_writes_over_none_of_its_inputs_the_runs_files_or_the_official_data(two_runs, tmp_path):
    """compare overwrote its --tags file, a run's scores.md, and wrote into the official data folder."""
    from mushroom.data.splits import DEFAULT_DATA_DIR

    lo, hi = two_runs
    tags = write_lines(tmp_path / "x.tags.csv", [{"id": "val-en-1", "error_type": "other"}])
    before = tags.read_bytes()
    official = DEFAULT_DATA_DIR / "val"
    for extra, said in (
        (["--tags", tags, "--eval-dir", tmp_path, "--name", "x"], "is an input of this command"),
        (["--eval-dir", official, "--name", "c"], "the folder of the official data files"),
        (["--eval-dir", lo, "--name", "scores"], "would replace a file the run"),
        (["--eval-dir", lo / "predictions", "--name", "c"], "would be written among the files the run"),
    ):
        res = runner.invoke(app, ["compare", str(lo), str(hi), *map(str, extra)])
        assert res.exit_code != 0 and said in str(res.exception), (extra, res.output, res.exception)
    assert tags.read_bytes() == before and not list(official.glob("c.*"))
    res = runner.invoke(
        app, ["compare", str(lo), str(hi), "--eval-dir", str(tmp_path / "eval"), "--name", "c"]
    )
    assert res.exit_code == 0 and (tmp_path / "eval" / "c.md").is_file(), res.output


def test_a_markdown_table_keeps_its_columns_whatever_a_run_is_named():
    """A run folder named 'we|ird' gave its row one column too many."""
    from mushroom.evaluation.compare import rows_markdown

    table = rows_markdown([{"run": "we|ird\nname", "IoU": 0.5}])
    head, rule, row = table.splitlines()
    assert row == "| we\\|ird name | 0.5000 |"
    assert row.replace("\\|", "").count("|") == head.count("|") == 3


def test_compare_partial_takes_a_folder_of_an_ensembles_files_of_limited_runs(tmp_path, capsys):
    """An ensemble of --limit runs, in a folder of its own, has no config to say it is limited:
    `compare` refused it ("no prediction for 45 gold ids") and had no --partial to say so."""
    a = limited_run(tmp_path, capsys, "a")
    b = limited_run(tmp_path, capsys, "b", "-o", "threshold=0.5")
    folder = tmp_path / "ens"
    folder.mkdir()
    code, _, err = cli(capsys, "ensemble", a, b, "--lang", "en", "--out", folder / "mushroom.en-val.v2.jsonl")
    assert code == 0, err
    code, _, err = cli(capsys, "compare", a, folder, "--eval-dir", tmp_path / "ev")
    assert code == 1 and "compare --partial compares on the items every run predicts" in " ".join(
        err.split()
    ), err
    code, out, err = cli(capsys, "compare", a, folder, "--eval-dir", tmp_path / "ev", "--partial")
    assert code == 0, err
    assert "ens: scored 5 of 50 gold items" in " ".join(err.split()), err
    assert "│ ens " in out and "│ 5 │" in out, out


def test_compare_answered_says_which_runs_keep_no_record_of_failed_items(two_runs, tmp_path, capsys):
    """--answered on a folder of bare prediction files (no ledger, no failures.jsonl) compared its
    empty predictions as answers without a word: the user asked to leave failures out."""
    lo, hi = two_runs
    loose = tmp_path / "loose"
    loose.mkdir()
    for path in prediction_folder(hi, "val").glob("*.jsonl"):
        shutil.copy(path, loose / path.name)
    code, out, err = cli(capsys, "compare", lo, loose, "--eval-dir", tmp_path / "ev", "--answered")
    said = " ".join(err.split())
    assert code == 0 and "│ loose " in out, err
    assert "loose keeps no record of failed items" in said and "lo keeps" not in said, said
    # runs that keep one say nothing of it
    code, _, err = cli(capsys, "compare", lo, hi, "--eval-dir", tmp_path / "ev", "--answered")
    assert code == 0 and "no record" not in err, err


def test_a_baseline_index_that_is_also_a_runs_name_is_refused(tmp_path):
    """Folders named 1 and 0: `--baseline 0` took index 0, the folder named 1, unsaid; `²` passed
    isdigit and fell in int() (a review)."""
    from mushroom.cli.evaluate import _baseline_index
    from mushroom.errors import MushroomError

    runs = [tmp_path / "1", tmp_path / "0"]
    with pytest.raises(MushroomError, match=r"--baseline 0: is both an index and the name of run"):
        _baseline_index("0", runs)
    assert _baseline_index(str(tmp_path / "0"), runs) == 1
    with pytest.raises(MushroomError, match=r"--baseline ²: is none of the runs given"):
        _baseline_index("²", runs)


def test_the_overall_difference_is_that_of_the_overall_means_shown():
    """Overall means are over languages; the difference beside them was over items pooled, and
    parted from them when languages differ in size (an audit: +0.0438 beside means 0.0446 apart)."""
    import numpy as np

    from mushroom.evaluation.compare import RunScores
    from mushroom.evaluation.score import ScoreResult

    rng = np.random.default_rng(3)
    langs = ["en"] * 50 + ["sv"] * 10
    ids = [f"{lang}-{k}" for k, lang in enumerate(langs)]
    base = rng.uniform(0, 1, 60)
    better = base + np.where(np.array(langs) == "sv", 0.3, 0.0)  # only the small language gains
    runs = [
        RunScores(name, None, ScoreResult(ids, langs, scores, scores.copy()))
        for name, scores in (("base", base), ("better", better))
    ]
    rows = {(r["run"], r["lang"]): r for r in comparison_rows(runs)}
    base_all, better_all = rows[("base", "all")], rows[("better", "all")]
    assert better_all["d_iou"] == pytest.approx(better_all["iou"] - base_all["iou"])  # 0.15, not 0.05
    assert better_all["d_iou"] == pytest.approx(0.15) and better_all["p_iou"] < 0.01
    assert better_all["iou_lo"] < better_all["iou"] < better_all["iou_hi"]


def test_the_reports_scores_table_gives_each_languages_mean_iou_and_cor_as_the_run_scored(two_runs, tmp_path):
    """It gave the mean IoU alone (a visual review); both are the run's own scores.json means."""
    import json

    lo, _ = two_runs
    page = tmp_path / "r.html"
    assert runner.invoke(app, ["report", str(lo), "--out", str(page)]).exit_code == 0
    summary = re.search(r"<table id=\"summary\">(.*?)</table>", page.read_text()).group(1)
    assert "<th>mean IoU</th><th>mean Cor</th>" in summary
    scored = json.loads((lo / "scores.json").read_text())
    for lang in ("en", "it"):
        row = re.search(rf"<tr><td>{lang}</td><td>50</td><td>([0-9.]+)</td><td>([-0-9.]+)</td></tr>", summary)
        assert row is not None, summary
        assert (float(row.group(1)), float(row.group(2))) == pytest.approx(
            (scored[lang]["iou"], scored[lang]["cor"]), abs=5e-5
        )


def test_a_language_its_run_covers_with_no_prediction_file_is_said_on_the_page(two_runs, tmp_path):
    """A language whose file was missing was left off the page unsaid (a visual review); the
    languages a --lang run never covered are not listed."""
    lo, _ = two_runs
    copy = tmp_path / "lo"
    shutil.copytree(lo, copy)
    page = tmp_path / "r.html"
    assert runner.invoke(app, ["report", str(copy), "--out", str(page)]).exit_code == 0
    assert "no val prediction file" not in page.read_text()  # de, fr, ... were never asked for
    (prediction_folder(copy, "val") / submission_name("it", "val")).unlink()
    assert runner.invoke(app, ["report", str(copy), "--out", str(page)]).exit_code == 0
    assert "no val prediction file for it: its run did not write one" in page.read_text()

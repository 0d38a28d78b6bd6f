"""`score` and `check` against broken and real-world-like files: messages name file, line, field."""

import json
import math

import pytest
from cli_helpers import GOLD_ROWS, VAL_DIR, cli, leaderboard_style, limited_run
from conftest import ROOT, VAL_EN, write_lines
from hypothesis import given, settings
from hypothesis import strategies as st
from official_oracle import official_scores

from mushroom import score as mushroom_score


def test_submission_with_text_keys_is_read_by_every_command(tmp_path, capsys):
    sub = write_lines(tmp_path / "sub.jsonl", leaderboard_style(GOLD_ROWS))
    code, out, _ = cli(capsys, "check", sub, "--items", VAL_EN)
    assert code == 0 and "OK (50 predictions" in out
    code, _, err = cli(capsys, "check", sub, "--items", VAL_EN, "--strict")
    assert code == 1
    assert "field 'text': unknown key in soft_labels span" in err
    assert "field 'model_output_text': unknown key in record" in err
    code, out, _ = cli(capsys, "score", VAL_EN, sub)
    assert code == 0 and out.endswith("IoU: 1.00000000\nCor: 1.00000000\n")
    ens = tmp_path / "ens.jsonl"
    code, out, err = cli(capsys, "ensemble", sub, sub, "--out", ens)  # ids say val/en: no --items needed
    assert code == 0, err
    code, _, err = cli(capsys, "check", ens, "--items", VAL_EN)
    assert code == 0, err
    # a file of another language: said once, not as every line "not among the items"
    code, _, err = cli(capsys, "ensemble", sub, VAL_DIR / "mushroom.de-val.v2.extra.jsonl", "--out", ens)
    assert code == 2 and "has no item in common with" in err and "not among" not in err, err


def test_bom_and_crlf_are_read_with_the_same_numbers(tmp_path, capsys):
    preds = [{"id": r["id"], "soft_labels": r["soft_labels"][:2]} for r in GOLD_ROWS]
    plain = write_lines(tmp_path / "plain.jsonl", preds)
    odd = tmp_path / "odd.jsonl"
    odd.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes().replace(b"\n", b"\r\n"))
    gold_bom = tmp_path / "mushroom.en-val.v2.jsonl"
    gold_bom.write_bytes(b"\xef\xbb\xbf" + VAL_EN.read_bytes().replace(b"\n", b"\r\n"))
    _, plain_out, _ = cli(capsys, "score", VAL_EN, plain)
    code, odd_out, _ = cli(capsys, "score", gold_bom, odd)
    assert code == 0 and odd_out == plain_out
    iou, cor = official_scores(VAL_EN, plain)
    assert plain_out == f"IoU: {iou:.8f}\nCor: {cor:.8f}\n"
    # the official reader takes CRLF, not a BOM: an upload must have none
    crlf = tmp_path / "crlf.jsonl"
    crlf.write_bytes(plain.read_bytes().replace(b"\n", b"\r\n"))
    assert cli(capsys, "check", crlf, "--items", gold_bom)[0] == 0
    assert cli(capsys, "check", odd, "--items", gold_bom)[0] == 1


def test_score_warns_about_what_the_official_scorer_accepts_silently(tmp_path, capsys):
    rows = [
        {"id": r["id"], "soft_labels": r["soft_labels"], "hard_labels": r["hard_labels"]} for r in GOLD_ROWS
    ]
    rows[0]["soft_labels"] = [{"start": 10, "end": 5, "prob": 0.7}, {"start": 20, "end": 30, "prob": 1.5}]
    rows[1]["hard_labels"] = [[8, 3], [5, 5]]  # and an empty one, which `check` refuses
    rows[2]["soft_labels"] = [{"start": 0, "end": 9, "prob": 0.9}, {"start": 4, "end": 12, "prob": 0.2}]
    # hard labels over characters the soft labels call fine: `check` refuses it, score said nothing
    rows[3]["soft_labels"], rows[3]["hard_labels"] = [{"start": 5, "end": 9, "prob": 0.9}], [[5, 9], [0, 7]]
    pred = write_lines(tmp_path / "p.jsonl", rows)
    code, out, err = cli(capsys, "score", VAL_EN, pred)
    assert code == 0
    iou, cor = official_scores(VAL_EN, pred)
    assert out == f"IoU: {iou:.8f}\nCor: {cor:.8f}\n"  # the official numbers, unchanged
    assert "2 reversed spans" in err and "p.jsonl:1: id 'val-en-1': soft_labels.0 [10, 5)" in err
    assert "1 empty span (marks nothing)" in err and "hard_labels.1 [5, 5)" in err
    assert "1 probability outside [0, 1] (ranked as given)" in err and "soft_labels.1.prob 1.5" in err
    said = " ".join(err.split())
    assert "1 soft span overlapping an earlier one (the later span's probability counts" in said
    assert f"p.jsonl:3: id {GOLD_ROWS[2]['id']!r}: soft_labels.1 [4, 12)" in said
    assert "3 hard spans over characters of soft probability 0 (IoU and Cor judge" in said, (
        said
    )  # 1, 3: soft edited
    assert f"p.jsonl:4: id {GOLD_ROWS[3]['id']!r}: hard_labels.1 (character 0)" in said, said
    # a gold file made by hand (the `--items` workflow) is said the same of: it moved both numbers
    gold = [dict(r) for r in GOLD_ROWS]
    gold[0]["soft_labels"] = [{"start": 0, "end": 5, "prob": 1.5}]
    gold[1]["hard_labels"] = [[0, 999]]
    bad_gold = write_lines(tmp_path / "mushroom.en-val.v2.jsonl", gold)
    code, out, err = cli(capsys, "score", bad_gold, VAL_EN)
    iou, cor = official_scores(bad_gold, VAL_EN)
    assert code == 0 and out == f"IoU: {iou:.8f}\nCor: {cor:.8f}\n"
    said = " ".join(err.split())
    assert f"{bad_gold}: 1 probability outside [0, 1]" in said and "soft_labels.0.prob 1.5" in said, said
    n = len(GOLD_ROWS[1]["model_output_text"])
    assert "1 hard span outside the answer" in said and f"hard_labels.0 [0, 999) in an answer of {n}" in said


def test_numeric_ids_as_in_the_official_sample_file_get_one_line_saying_how_to_fix_them(tmp_path, capsys):
    """The task's sample_set.v1.json numbers its ids: eight "not a string" lines, and no way out."""
    sample = tmp_path / "sample_set.v1.json"  # a copy: the fix writes beside it
    sample.write_bytes((ROOT / "data" / "mushroom" / "sample" / "sample_set.v1.json").read_bytes())
    code, _, err = cli(capsys, "score", sample, sample)
    said = " ".join(err.split())
    assert code == 1 and "ids are numbers (8 lines, e.g. line 1: 1)" in said, said
    assert "write them as strings" in said and said.count("not a string") == 0, said
    # the command it gives runs as printed, from any folder, and its output scores
    import shlex
    import subprocess

    command = err[err.index("python3 -c") :].split("\n")[0].strip()
    assert subprocess.run(command, shell=True, cwd=tmp_path).returncode == 0, command
    fixed = shlex.split(command)[-1]
    code, out, err = cli(capsys, "score", fixed, fixed)
    assert code == 0 and out.endswith("Cor: 1.00000000\n"), err


def test_folder_scoring_needs_every_language_or_langs(tmp_path, capsys):
    (tmp_path / "mushroom.en-val.v2.jsonl").write_bytes(VAL_EN.read_bytes())
    (tmp_path / "mushroom.xx-val.v2.jsonl").write_text("")
    (tmp_path / "notes.jsonl").write_text("")
    code, _, err = cli(capsys, "score", VAL_DIR, tmp_path)
    assert code == 2 and "no prediction file for 9 of 10 languages" in err and "--langs en" in err
    code, out, err = cli(capsys, "score", VAL_DIR, tmp_path, "--langs", "en")
    assert code == 0 and out.endswith("IoU: 1.00000000\nCor: 1.00000000\n")
    assert "scoring 1 language: en (mushroom.en-val.v2.jsonl)" in err
    assert "not scored, no gold file: xx" in err and "notes.jsonl" in err
    (tmp_path / "mushroom.en-val.old.jsonl").write_bytes(VAL_EN.read_bytes())
    code, _, err = cli(capsys, "score", VAL_DIR, tmp_path, "--langs", "en")
    assert code == 2 and "2 files for language 'en'" in err
    (tmp_path / "mushroom.en-val.v3.jsonl").write_bytes(VAL_EN.read_bytes())
    code, _, err = cli(capsys, "score", VAL_DIR, tmp_path, "--langs", "en")
    said = " ".join(err.split())
    assert (
        code == 2
        and "3 files for language 'en': mushroom.en-val.old.jsonl, mushroom.en-val.v2.jsonl and" in said
    )


def test_score_json_dash_prints_only_json(capsys):
    code, out, err = cli(capsys, "score", VAL_EN, VAL_EN, "--json", "-", "--per-lang", "--ci")
    assert code == 0
    assert json.loads(out)["n"] == 50
    assert "IoU: 1.00000000" in err
    # a score kept alone names what it was computed on and with
    from mushroom.version import __version__

    scored = json.loads(out)["scored"]
    assert scored == {"gold": str(VAL_EN.resolve()), "pred": str(VAL_EN.resolve()), "partial": False} | {
        "mushroom": __version__
    }


def test_json_and_output_into_one_file_is_refused(tmp_path, capsys):
    """Both wrote the same path: the second won and the JSON was lost, exit 0."""
    same = tmp_path / "x.json"
    code, _, err = cli(capsys, "score", VAL_EN, VAL_EN, "--json", same, "--output", same)
    assert code == 2 and "is the --output file too" in err and not same.exists(), err


def test_a_run_over_every_item_still_needs_every_item(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "predictions").mkdir(parents=True)
    config = {"config": {"job": "detect", "split": "val", "langs": ["en"], "limit": None}, "config_hash": "x"}
    (run / "config.json").write_text(json.dumps(config))
    rows = [{"id": r["id"], "hard_labels": r["hard_labels"]} for r in GOLD_ROWS[:5]]
    write_lines(run / "predictions" / "mushroom.en-val.v2.jsonl", rows)
    code, _, err = cli(capsys, "score", VAL_DIR, run / "predictions")
    assert code == 1 and "no prediction for 45 gold ids" in err
    assert "not scored, no prediction file: ar" in err  # made with --lang en: no error for the others


def test_check_groups_missing_items_and_counts_what_it_found(tmp_path, capsys):
    rows = [{"id": r["id"], "hard_labels": []} for r in GOLD_ROWS[:3]] + ["not json"]
    pred = write_lines(tmp_path / "p.jsonl", rows)
    code, _, err = cli(capsys, "check", pred, "--items", VAL_EN)
    assert code == 1
    assert err.count("no prediction for") == 2  # one grouped line and the summary, not 47 lines
    missing = [r["id"] for r in GOLD_ROWS[3:8]]
    listed = ", ".join(repr(i) for i in missing)
    assert f"p.jsonl: field 'id': no prediction for 47 items: {listed}, ... (first 5 shown)" in err
    assert err.rstrip().endswith("p.jsonl: 1 error on 1 line (of 4 read); no prediction for 47 of 50 items")
    one = write_lines(tmp_path / "one.jsonl", [{"id": GOLD_ROWS[0]["id"], "hard_labels": []}])
    items = write_lines(tmp_path / "items.jsonl", GOLD_ROWS[:1])
    code, out, _ = cli(capsys, "check", one, "--items", items)
    assert code == 0 and "one.jsonl: OK (1 prediction, 0 warnings)" in out


def test_a_run_folder_is_scored_like_compare_and_sweep_take_it(tmp_path, capsys):
    run = limited_run(tmp_path, capsys)
    code, out, err = cli(capsys, "score", VAL_DIR, run)
    code2, out2, _ = cli(capsys, "score", VAL_DIR, run / "predictions")
    assert code == code2 == 0 and out.splitlines()[-2:] == out2.splitlines()[-2:], err


def test_score_takes_a_variant_folder_and_names_the_variants_of_its_root(tmp_path, capsys):
    from mushroom.data.predictions import submission_name

    variant = tmp_path / "cfg" / "few-shot" / "val"
    variant.mkdir(parents=True)
    for gold in sorted(VAL_DIR.glob("mushroom.*-val.v2.extra.jsonl")):
        lang = gold.name.split(".")[1].split("-")[0]
        (variant / submission_name(lang, "val")).write_bytes(gold.read_bytes())  # gold as predictions
    code, out, err = cli(capsys, "score", VAL_DIR, tmp_path / "cfg" / "few-shot")
    assert code == 0 and out.endswith("IoU: 1.00000000\nCor: 1.00000000\n"), err
    code, _, err = cli(capsys, "score", VAL_DIR, tmp_path / "cfg")
    assert code == 2 and "it holds the variants few-shot: give one" in " ".join(err.split())


def test_check_against_the_wrong_items_file_says_so_once(capsys):
    de_items = VAL_DIR / "mushroom.de-val.v2.extra.jsonl"
    code, _, err = cli(capsys, "check", VAL_EN, "--items", de_items)
    flat = " ".join(err.split())
    assert code == 1 and "50 of 50 ids are not among the items of" in flat and "(language and split)?" in flat
    # the diagnosis first, then five of its fifty lines: they buried it, one line each
    assert err.index("(language and split)?") < err.index("is not among the items\n")
    assert (
        err.count("' is not among the items\n") == 5 and "... and 45 more lines whose id is not among" in flat
    )


def test_score_of_one_gold_file_against_a_run_folder_takes_the_runs_file_of_its_language(tmp_path, capsys):
    from mushroom.data.predictions import submission_name

    folder = tmp_path / "run" / "predictions"
    folder.mkdir(parents=True)
    for lang in ("en", "de"):  # gold as predictions: a perfect score for the right language only
        gold = VAL_DIR / f"mushroom.{lang}-val.v2.extra.jsonl"
        (folder / submission_name(lang, "val")).write_bytes(gold.read_bytes())
    code, out, err = cli(capsys, "score", VAL_EN, tmp_path / "run")
    assert code == 0 and out.endswith("IoU: 1.00000000\nCor: 1.00000000\n"), err


def test_score_names_the_item_of_a_bad_line_and_what_an_unlabelled_or_odd_file_is(tmp_path, capsys):
    rows = [json.loads(line) for line in VAL_EN.read_text().splitlines()]
    bad = [{k: r[k] for k in ("id", "soft_labels", "hard_labels")} for r in rows]
    bad[0]["hard_labels"] = "x"
    bad[1]["id"] = 7
    code, _, err = cli(capsys, "score", VAL_EN, write_lines(tmp_path / "bad.jsonl", bad))
    text = " ".join(err.split())
    assert code == 1 and f"bad.jsonl:1: id '{rows[0]['id']}': field 'hard_labels': must be a list" in text
    assert "bad.jsonl:2: field 'id': not a string (got int 7)" in text
    unlabelled = ROOT / "data" / "mushroom" / "test-unlabeled" / "mushroom.en-tst.v1.jsonl"
    code, _, err = cli(capsys, "score", unlabelled, unlabelled)
    assert code == 1 and "items without gold labels (an unlabelled split such as test) cannot be scored" in (
        " ".join(err.split())
    )


def test_score_says_a_span_past_the_answer_beside_a_bad_line_in_one_go(tmp_path, capsys):
    """A bad line hid the spans past the end of their answers until it was mended (an audit)."""
    rows = [{k: r[k] for k in ("id", "soft_labels", "hard_labels")} for r in GOLD_ROWS]
    rows[1]["soft_labels"] = [{"start": 0, "end": 99999, "prob": 1.0}]
    rows[4]["soft_labels"] = "x"
    code, _, err = cli(capsys, "score", VAL_EN, write_lines(tmp_path / "bad.jsonl", rows))
    lines = [line.strip() for line in err.splitlines() if "bad.jsonl:" in line]
    assert code == 1 and "2 problems in input" in err, err
    assert "bad.jsonl:2:" in lines[0] and "soft span [0, 99999)" in lines[0], lines
    assert "bad.jsonl:5:" in lines[1] and "must be a list" in lines[1], lines
    # a gold line dropped for its own problem: its prediction is no id "not in the gold file"
    gold = [dict(r) for r in GOLD_ROWS]
    del gold[4]["model_output_text"]
    rows[4]["soft_labels"] = []
    pred = write_lines(tmp_path / "bad.jsonl", rows)
    code, _, err = cli(capsys, "score", write_lines(tmp_path / "gold.jsonl", gold), pred)
    said = " ".join(err.split())
    assert code == 1 and "2 problems in input" in said and "not in the gold file" not in said, said
    assert "gold.jsonl:5:" in said and "bad.jsonl:2:" in said and "soft span [0, 99999)" in said


def test_a_file_that_marks_nothing_anywhere_is_said_by_score_and_check(tmp_path, capsys):
    """All-empty files scored Cor 0 and checked OK in silence: a failed run looks just like that."""
    empty = write_lines(
        tmp_path / "p.jsonl", [{"id": r["id"], "hard_labels": [], "soft_labels": []} for r in GOLD_ROWS]
    )
    said = "none of its 50 predictions marks anything"
    code, out, err = cli(capsys, "score", VAL_EN, empty)
    assert code == 0 and said in err and out.splitlines()[-1].startswith("Cor:")
    code, out, err = cli(capsys, "check", empty, "--items", VAL_EN)
    assert code == 0 and said in out + err and "1 warning" in out
    one = write_lines(
        tmp_path / "q.jsonl",
        [{"id": r["id"], "hard_labels": [[0, 1]] if k == 0 else []} for k, r in enumerate(GOLD_ROWS)],
    )
    code, out, err = cli(capsys, "score", VAL_EN, one)
    assert code == 0 and "marks anything" not in err
    # a file of two said so too; one empty prediction alone is an answer like any other
    two = write_lines(tmp_path / "two.jsonl", [{"id": r["id"], "hard_labels": []} for r in GOLD_ROWS[:2]])
    code, out, err = cli(capsys, "score", VAL_EN, two, "--partial")
    assert code == 0 and "none of its 2 predictions marks anything" in " ".join(err.split()), err
    single = write_lines(tmp_path / "single.jsonl", [{"id": GOLD_ROWS[0]["id"], "hard_labels": []}])
    code, out, err = cli(capsys, "score", VAL_EN, single, "--partial")
    assert code == 0 and "marks anything" not in err, err


def test_a_run_folder_without_the_gold_files_language_is_named_as_such(tmp_path, capsys):
    """It said "GOLD is a file, PRED a folder: give two files", though a run folder is allowed."""
    run = tmp_path / "de"
    code, _, err = cli(
        capsys, "detect", "--split", "val", "--lang", "de", "--limit", "2", "--out", run, "--quiet"
    )
    assert code == 0, err
    code, _, err = cli(capsys, "score", VAL_EN, run)
    assert code == 2 and "no en prediction file (mushroom.en-val.v2.jsonl)" in err and "it has de" in err
    assert "give two files" not in err


def test_an_empty_answer_is_said_by_score_and_check_and_its_cor_is_nan_as_officially(tmp_path, capsys):
    """Cor was a silent NaN, with numpy's RuntimeWarnings; the official scorer's is NaN too."""
    rows = [
        dict(GOLD_ROWS[0]),
        {**GOLD_ROWS[1], "model_output_text": "", "soft_labels": [], "hard_labels": []},
    ]
    gold = write_lines(tmp_path / "mushroom.en-val.v2.jsonl", rows)
    pred = write_lines(
        tmp_path / "p.jsonl",
        [{"id": r["id"], "hard_labels": [[0, 1]] if k == 0 else []} for k, r in enumerate(rows)],
    )
    said = f"1 item with an empty answer (first: {rows[1]['id']})"
    code, out, err = cli(capsys, "score", gold, pred)
    assert code == 0 and said in err and out.splitlines()[-1] == "Cor: nan" and "RuntimeWarning" not in err
    assert official_scores(gold, pred)[1] != official_scores(gold, pred)[1]  # NaN there too
    code, out, err = cli(capsys, "check", pred, "--items", gold)
    assert code == 0 and said in out + err
    stray = write_lines(tmp_path / "q.jsonl", [{"id": "nobody", "hard_labels": []}])
    code, _, err = cli(capsys, "check", stray, "--items", gold)
    assert code == 1 and "not among the items" in err  # an unknown id is an error, not a crash


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(-2, 8)), max_size=10))
def test_every_soft_span_overlapping_an_earlier_one_is_counted(pairs):
    """The first sweep compared each span with the one reaching furthest, and missed some."""
    from mushroom.evaluation.score import _overlapping

    spans = [(start, start + width, 0.5) for start, width in pairs]
    earlier = [
        i
        for i, (s, e, _) in enumerate(spans)
        if s < e and any(s2 < e2 and s2 < e and s < e2 for s2, e2, _ in spans[:i])
    ]
    assert _overlapping(spans) == earlier


def test_a_file_of_another_language_or_an_empty_one_is_not_sent_to_partial(tmp_path, capsys):
    """Both said "no prediction for N gold ids (score --partial ...)", and --partial could
    not help: the one shares no id with the gold, the other holds none."""
    other = write_lines(tmp_path / "de.jsonl", [{**r, "id": f"val-de-{k}"} for k, r in enumerate(GOLD_ROWS)])
    empty = write_lines(tmp_path / "empty.jsonl", [])
    for partial in ([], ["--partial"]):
        code, _, err = cli(capsys, "score", VAL_EN, other, *partial)
        said = " ".join(err.split())
        assert code == 1 and f"none of its {len(GOLD_ROWS)} ids is in the gold file" in said, said
        assert "are the two files of the same language and split?" in said and "--partial" not in said
        code, _, err = cli(capsys, "score", VAL_EN, empty, *partial)
        assert code == 1 and "the file holds no prediction" in err and "--partial" not in err, err
        assert "field 'id'" not in err  # no field is wrong in an empty file
    # an empty gold file: said as such, against predictions or against itself (IoU nan, exit 0)
    for pred in (other, empty):
        code, _, err = cli(capsys, "score", empty, pred)
        assert code == 1 and f"{empty}: no items: the gold file is empty" in " ".join(err.split()), err


def test_score_writes_over_none_of_its_inputs_and_counts_a_language_once(tmp_path, capsys):
    gold = write_lines(tmp_path / "gold.jsonl", GOLD_ROWS[:3])
    pred = write_lines(
        tmp_path / "pred.jsonl",
        [{"id": r["id"], "soft_labels": [], "hard_labels": []} for r in GOLD_ROWS[:3]],
    )
    before = gold.read_bytes()
    for option in ("--output", "--json"):  # each replaced the gold file with scores, exit 0
        code, _, err = cli(capsys, "score", gold, pred, option, gold)
        assert code == 2 and "is an input of this command" in err and gold.read_bytes() == before, err
    # `--langs en,en,de` weighed English twice in the mean over languages
    run = tmp_path / "two"
    code, _, err = cli(
        capsys, "detect", "--split", "val", "--lang", "en,de", "--limit", "5", "--out", run, "--quiet"
    )
    assert code == 0, err
    code, once, _ = cli(capsys, "score", VAL_DIR, run, "--langs", "en,de")
    code2, twice, err = cli(capsys, "score", VAL_DIR, run, "--langs", "en,EN,de")
    assert code == code2 == 0 and once.splitlines()[-2:] == twice.splitlines()[-2:], err
    # repeated, as every other command takes --lang: it was "--langs is given twice"
    code, repeated, err = cli(capsys, "score", VAL_DIR, run, "--lang", "en", "--lang", "de")
    assert code == 0 and once.splitlines()[-2:] == repeated.splitlines()[-2:], err
    # any other name inside an input folder may be written, and written again
    for _ in range(2):
        code, _, err = cli(capsys, "score", VAL_DIR, run, "--json", run / "scores-mine.json")
        assert code == 0, err
    code, _, err = cli(
        capsys,
        "score",
        VAL_DIR,
        run / "predictions",
        "--json",
        run / "predictions" / "mushroom.fr-val.v2.jsonl",
    )
    assert code == 2 and "is named as the prediction files read from the input folder" in err, err
    # beside a loose prediction file too: a later command would read it as one of that folder's runs
    code, _, err = cli(capsys, "score", gold, pred, "--json", tmp_path / "mushroom.de-val.v2.jsonl")
    said = " ".join(err.split())
    assert code == 2 and "named as a prediction file, beside the input" in said, err
    assert not (tmp_path / "mushroom.de-val.v2.jsonl").exists()
    # nor a file the run of an input keeps, nor a prediction file in the folder a run is read from
    config = (run / "config.json").read_bytes()
    pred_file = run / "predictions" / "mushroom.en-val.v2.jsonl"
    for target, read, said in (
        (run / "config.json", pred_file, "would replace a file the run"),
        (run / "predictions" / "mushroom.fr-val.v2.jsonl", run, "read from the input folder"),
    ):
        code, _, err = cli(capsys, "score", VAL_DIR, read, "--json", target)
        assert code == 2 and said in " ".join(err.split()), err
    assert (run / "config.json").read_bytes() == config
    assert not (run / "predictions" / "mushroom.fr-val.v2.jsonl").exists()
    # a loose folder read through its val/ folder too
    loose = tmp_path / "loose"
    (loose / "val").mkdir(parents=True)
    (loose / "val" / pred_file.name).write_bytes(pred_file.read_bytes())
    code, _, err = cli(capsys, "score", VAL_DIR, loose, "--json", loose / "val" / "mushroom.fr-val.v2.jsonl")
    assert code == 2 and "read from the input folder" in " ".join(err.split()), err


def test_a_bad_gold_span_is_named_in_the_gold_file_and_nan_is_null_in_json(tmp_path, capsys):
    row = {**GOLD_ROWS[0], "soft_labels": [{"start": 0, "end": 10_000, "prob": 1.0}]}
    gold = write_lines(tmp_path / "gold.jsonl", [row])
    pred = write_lines(tmp_path / "pred.jsonl", [{"id": row["id"], "soft_labels": [], "hard_labels": []}])
    code, _, err = cli(capsys, "score", gold, pred)
    assert code == 1 and f"{gold}:1: id {row['id']!r}: field 'soft_labels': soft span [0, 10000)" in err, err
    empty = {**GOLD_ROWS[0], "model_output_text": "", "soft_labels": [], "hard_labels": []}
    gold = write_lines(tmp_path / "gold.jsonl", [empty])
    code, out, err = cli(capsys, "score", gold, pred, "--json", "-")
    assert code == 0 and json.loads(out)["cor"] is None, err  # NaN is no JSON


def test_a_run_whose_config_json_is_damaged_is_named_not_read_as_loose_files(tmp_path, capsys):
    run = limited_run(tmp_path, capsys)
    (run / "config.json").write_text("{bad")
    for args in (("score", VAL_DIR, run), ("compare", run), ("sweep", run)):
        code, _, err = cli(capsys, *args)
        assert code == 1 and f"{run / 'config.json'}: this run's config cannot be read" in " ".join(
            err.split()
        ), err

    # not UTF-8: a resumed run said "a file is not valid UTF-8", naming none
    (run / "config.json").write_bytes(b'{"config": {}}\xe9')
    code, _, err = cli(capsys, "detect", "--lang", "en", "--limit", "5", "--out", run, "--quiet")
    assert code == 1 and f"{run / 'config.json'}: not valid UTF-8" in " ".join(err.split()), err
    prompt = tmp_path / "latin1.md"
    prompt.write_bytes("Question : {{question}} \xe9t\xe9".encode("latin-1"))
    args = (
        "detect",
        "--backend",
        "replay",
        "--responses",
        prompt,
        "--prompt",
        prompt,
        "--out",
        tmp_path / "p",
    )
    code, _, err = cli(capsys, *args)  # a setting's file: exit 2, as in a run config
    assert code == 2 and f"{prompt}: not valid UTF-8" in " ".join(err.split()), err


def test_the_paired_difference_is_in_the_json_too(tmp_path, capsys):
    run = limited_run(tmp_path, capsys)
    code, _, err = cli(capsys, "score", VAL_DIR, run, "--compare", run, "--langs", "en")
    assert code == 0 and "is PRED itself: the paired difference is 0 by construction" in err, err
    other = limited_run(tmp_path, capsys, "other", "--option", "threshold=0.5")
    code, out, err = cli(capsys, "score", VAL_DIR, run, "--compare", other, "--langs", "en", "--json", "-")
    paired = json.loads(out)["paired_vs_compare"]
    assert code == 0 and paired["compare"] == str(other) and paired["iou"]["n"] == 5, err
    assert set(paired["cor"]) == {"mean_diff", "ci_low", "ci_high", "p_value", "n"}


def test_a_variant_runs_ledgers_and_scores_are_not_written_over(tmp_path, capsys):
    """A variant run keeps its files in <run>/<variant>/val/: only the first part of the path
    was looked at, so `--json RUN/a/val/items/en.jsonl` replaced a ledger, exit 0."""
    config = write_lines(tmp_path / "x.toml", [])
    config.write_text(
        'name = "vr"\nlangs = ["en"]\nlimit = 2\n[detector]\nname = "lexical"\n'
        '[[variants]]\nname = "a"\noptions = { threshold = 0.3 }\n'
        '[[variants]]\nname = "b"\noptions = { threshold = 0.4 }\n'
    )
    run = tmp_path / "run"
    # --eval-dir: the variants' table went to the checkout's eval/, left there by every test run
    code, _, err = cli(capsys, "run", config, "--out", run, "--eval-dir", tmp_path / "e", "--quiet")
    assert code == 0, err
    for target in (run / "a" / "val" / "items" / "en.jsonl", run / "b" / "val" / "scores.json"):
        kept = target.read_bytes()
        code, _, err = cli(capsys, "score", VAL_EN, run / "a" / "val", "--json", target)
        assert code == 2 and "would replace a file the run" in " ".join(err.split()), err
        assert target.read_bytes() == kept
    code, _, err = cli(capsys, "score", VAL_EN, run / "a" / "val", "--json", run / "a" / "mine.json")
    assert code == 0 and (run / "a" / "mine.json").is_file(), err


def test_score_names_what_to_give_when_the_folder_the_output_or_the_split_is_wrong(tmp_path, capsys):
    """A folder of no prediction files read "GOLD is a file, PRED a folder: give two files";
    `--output -` wrote a file named "-"; a test run against val gold advised a --split score lacks."""
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = cli(capsys, "score", VAL_EN, empty)
    told = " ".join(err.split())
    assert code == 2 and f"PRED {empty} is a folder with no prediction file for GOLD {VAL_EN.name}" in told, (
        err
    )
    assert f"or GOLD's folder {VAL_EN.parent}" in told

    sub = tmp_path / "mushroom.en-val.v2.jsonl"
    sub.write_text(VAL_EN.read_text())
    code, out, err = cli(capsys, "score", VAL_EN, sub, "--output", "-")
    assert code == 2 and "--output -: this writes files, not to stdout" in " ".join(err.split()), err
    assert not (ROOT / "-").exists() and not (tmp_path / "-").exists()

    run = tmp_path / "test-run"
    code, _, err = cli(
        capsys, "detect", "--split", "test", "--lang", "en", "--limit", "2", "--out", run, "--quiet"
    )
    assert code == 0, err
    code, _, err = cli(capsys, "score", VAL_EN, run)
    told = " ".join(err.split())
    assert (
        code == 2 and "this run is of the test split, not val: score it against the test split's gold" in told
    )
    assert "--split" not in told, err
    code, _, err = cli(capsys, "compare", run, "--split", "val", "--eval-dir", tmp_path / "e")
    told = " ".join(err.split())
    # test has no labels here, so "--split test" alone went round in a circle: compare then
    # said it needs gold labels
    assert code == 2 and "this run is of the test split, not val: give --split test" in told, err
    assert "or, where the command needs gold labels (test has none), a run of val" in told, err


def test_compare_and_sweep_refuse_an_unlabelled_or_unknown_split_before_reading_the_runs(tmp_path, capsys):
    """`compare --split test` blamed the shipped test file (exit 1, "1 problem in input"), and
    `--split tst` was read as the run's lack of tst files."""
    run = limited_run(tmp_path, capsys)
    for command in (
        ["compare", run, "--eval-dir", tmp_path / "e"],
        ["sweep", run, "--svg", tmp_path / "s.svg"],
    ):
        code, _, err = cli(capsys, *command, "--split", "test")
        told = " ".join(err.split())
        assert code == 2 and "needs gold labels, and split 'test' has none (1902 items)" in told, err
        assert "problem in input" not in told
        code, _, err = cli(capsys, *command, "--split", "tst")
        assert code == 2 and "unknown split 'tst'; did you mean 'test'?" in err, err
    assert not (tmp_path / "e").exists() and not (tmp_path / "s.svg").exists()


def test_no_output_replaces_a_file_of_a_run_that_is_not_an_input(tmp_path, capsys):
    """Only the inputs' runs were guarded: an ensemble written over another run's prediction
    file changed that run's score, and `score --json OTHER_RUN/config.json` broke its resume."""
    run = limited_run(tmp_path, capsys)
    pred = tmp_path / "p.jsonl"
    pred.write_text((run / "predictions" / "mushroom.en-val.v2.jsonl").read_text())
    kept = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    cases = [  # (args, what it says: an existing file is replaced, a new one joins the run's)
        (
            ["ensemble", pred, pred, "--out", run / "predictions" / "mushroom.en-val.v2.jsonl"],
            "would replace a file",
        ),
        (["score", VAL_EN, pred, "--json", run / "config.json"], "would replace a file"),
        (
            ["score", VAL_EN, pred, "--output", run / "mushroom.en-tst.v1.jsonl"],
            "would be written among the files",
        ),
    ]
    for args, does in cases:
        code, _, err = cli(capsys, *args)
        assert code == 2 and f"{does} the run {run.resolve()} keeps" in " ".join(err.split()), err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == kept
    code, _, err = cli(capsys, "score", VAL_EN, pred, "--partial", "--json", run / "mine.json")
    assert code == 0, err  # another name beside a run's files is fine


def test_an_items_file_with_one_kind_of_gold_label_scores_alike_in_detect_and_score(tmp_path, capsys):
    """`detect` scored hard-only gold Cor 0.0 and soft-only gold IoU 0.0, where `score` (which
    fills the missing kind as the official scorer reads it) said 1.0 for the same predictions."""
    from mushroom.data.records import Item

    text = "Marie Curie was born in 1867 in Berlin."
    hard = Item(id="a", lang="en", model_input="q", model_output_text=text, hard_labels=[[32, 38]])
    assert [(s.start, s.end, s.prob) for s in hard.soft_labels] == [(32, 38, 1.0)]
    soft = [{"start": 32, "end": 38, "prob": 0.8}, {"start": 0, "end": 5, "prob": 0.4}]
    assert Item(id="a", lang="en", model_input="q", model_output_text=text, soft_labels=soft).hard_labels == [
        (32, 38)
    ]
    for name, labels in (("hard", {"hard_labels": [[32, 38]]}), ("soft", {"soft_labels": soft})):
        items = write_lines(
            tmp_path / f"{name}.jsonl",
            [{"id": "a", "lang": "en", "model_input": "q", "model_output_text": text, **labels}],
        )
        pred = write_lines(
            tmp_path / f"{name}-pred.jsonl",
            [{"id": "a", "hard_labels": [[32, 38]], "soft_labels": [{"start": 32, "end": 38, "prob": 0.9}]}],
        )
        code, out, err = cli(capsys, "score", items, pred, "--json", "-")
        assert code == 0, err
        from_score = json.loads(out)
        from mushroom.data.predictions import load_predictions
        from mushroom.data.splits import load_items
        from mushroom.evaluation.score import score_predictions

        ours = score_predictions(load_items(items), list(load_predictions(pred).values()))
        assert (float(ours.iou[0]), float(ours.cor[0])) == pytest.approx(
            (from_score["iou"], from_score["cor"])
        ), name


def test_a_detect_items_run_of_several_languages_is_scored_against_its_items_file(tmp_path, capsys):
    """`score ITEMS.jsonl RUN` refused a run with a file per language, and its advice (score one
    of its files) then failed for the other languages' ids: no way but joining files by hand."""
    rows = []
    for lang in ("en", "de"):
        gold = VAL_DIR / f"mushroom.{lang}-val.v2.extra.jsonl"
        rows += [json.loads(line) for line in gold.read_text().splitlines()[:3]]
    items = write_lines(tmp_path / "items.jsonl", rows)
    run = tmp_path / "run"
    code, out, err = cli(capsys, "detect", "--items", items, "--contexts", "none", "--out", run, "--quiet")
    assert code == 0, err
    detect_iou = json.loads((run / "scores.json").read_text())
    code, out, err = cli(capsys, "score", items, run, "--json", tmp_path / "s.json")
    assert code == 0 and out.splitlines()[-2].startswith("IoU:"), err
    scored = json.loads((tmp_path / "s.json").read_text())
    assert sorted(scored["per_lang"]) == ["de", "en"] and len(scored["items"]) == 6, scored
    assert scored["per_lang"]["de"]["iou"] == pytest.approx(detect_iou["de"]["iou"]), detect_iou
    # compare and sweep read such runs against their items file too
    other = tmp_path / "other"
    code, _, err = cli(
        capsys,
        "detect",
        "--items",
        items,
        "--contexts",
        "none",
        "--out",
        other,
        "--quiet",
        "-o",
        "threshold=0.5",
    )
    assert code == 0, err
    code, _, err = cli(capsys, "compare", run, other)
    assert code == 2 and "compare, sweep and report take --items" in " ".join(err.split()), err
    code, out, err = cli(capsys, "compare", run, other, "--items", items, "--eval-dir", tmp_path / "eval")
    assert code == 0 and "│ all " in out, err
    code, out, err = cli(capsys, "sweep", run, "--items", items, "--lang", "de", "--svg", tmp_path / "s.svg")
    assert code == 0 and "best IoU" in out and (tmp_path / "s.svg").is_file(), err


def test_files_the_official_scorer_cannot_read_are_said_not_passed(tmp_path, capsys):
    """A prediction file saved with a UTF-8 BOM passed `check` and scored, and the official
    reader refuses it at upload; a gold file without soft_labels scored in silence, where the
    official scorer stops with a KeyError."""
    pred = tmp_path / "p.jsonl"
    write_lines(pred, [{"id": r["id"], "hard_labels": r["hard_labels"]} for r in GOLD_ROWS])
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + pred.read_bytes())
    gold = write_lines(tmp_path / "gold.jsonl", GOLD_ROWS)
    with pytest.raises(ValueError):
        official_scores(gold, bom)
    code, out, err = cli(capsys, "check", bom, "--items", gold)
    told = " ".join(err.split())
    assert code == 1 and "starts with a UTF-8 byte order mark" in told, out + err
    assert f"of {len(GOLD_ROWS) + 1} read" not in told, err  # the mark is no line of its own
    code, out, err = cli(capsys, "score", gold, bom)
    assert code == 0 and "starts with a UTF-8 byte order mark" in " ".join(err.split()), err
    no_soft = write_lines(
        tmp_path / "nosoft.jsonl", [{k: v for k, v in r.items() if k != "soft_labels"} for r in GOLD_ROWS]
    )
    with pytest.raises(KeyError):
        official_scores(no_soft, pred)
    code, out, err = cli(capsys, "score", no_soft, pred)
    told = " ".join(err.split())
    assert code == 0 and "no line has soft_labels: the official scorer fails on such a gold file" in told, err


def test_a_file_of_bare_cr_line_ends_says_so(tmp_path, capsys):
    """Old Mac line endings made one line: "Extra data at column 260", and no why."""
    old_mac = tmp_path / "p.jsonl"
    old_mac.write_bytes(VAL_EN.read_bytes().replace(b"\n", b"\r"))
    code, _, err = cli(capsys, "score", VAL_EN, old_mac)
    said = " ".join(err.split())
    assert code == 1 and "lines end in a bare CR (\\r); JSONL lines end in \\n" in said, said


def test_a_number_json_does_not_allow_is_named_with_its_field(tmp_path, capsys):
    """`"prob": 5.` was "Expecting ',' delimiter", and a -Infinity logit named no field (an audit)."""
    line = VAL_EN.read_text().splitlines()[0]
    pred = tmp_path / "p.jsonl"
    pred.write_text('{"id": "val-en-1", "soft_labels": [{"start": 0, "end": 3, "prob": 5.}]}\n')
    code, _, err = cli(capsys, "score", VAL_EN, pred)
    said = " ".join(err.split())
    assert (
        code == 1 and "p.jsonl:1: invalid JSON: '5.' at column 67 in field 'prob' is no JSON number" in said
    ), said
    pred.write_text('{"id": "val-en-1", "soft_labels": [{"start": 0, "end": 3\n')  # cut after a digit
    code, _, err = cli(capsys, "score", VAL_EN, pred)  # the hint read past the line's end: IndexError
    assert code == 1 and "p.jsonl:1: invalid JSON: Expecting ',' delimiter at column" in " ".join(err.split())
    gold = tmp_path / "g.jsonl"
    assert '"model_output_logits":[' in line
    gold.write_text(line.replace('"model_output_logits":[', '"model_output_logits":[-Infinity,', 1) + "\n")
    pred.write_text('{"id": "val-en-1", "soft_labels": [{"start": 0, "end": 3, "prob": 0.5}]}\n')
    code, _, err = cli(capsys, "score", gold, pred)
    said = " ".join(err.split())
    assert (
        code == 1
        and "-Infinity is not a JSON number (column" in said
        and "field 'model_output_logits')" in said
    )


def test_a_line_that_is_no_object_is_named_in_json_words(tmp_path, capsys):
    """It said "expected a JSON object, got NoneType" of a line that reads null."""
    pred = tmp_path / "p.jsonl"
    pred.write_text('null\n[1, 2]\n7\n"x"\ntrue\n')
    code, _, err = cli(capsys, "score", VAL_EN, pred)
    said = " ".join(err.split())
    for line, kind in ((1, "null"), (2, "an array"), (3, "the number 7"), (4, "a string"), (5, "true")):
        assert f"p.jsonl:{line}: expected a JSON object, got {kind}" in said, said
    assert code == 1 and "NoneType" not in said


def test_a_run_s_own_scoring_warns_of_its_predictions_quirks(tmp_path):
    """With the predictions' file named for both sides, the `score F F` shortcut dropped them."""
    from mushroom.data.records import Prediction
    from mushroom.data.splits import load_items
    from mushroom.evaluation.score import score_predictions

    items = load_items(VAL_EN)[:2]
    spans = [{"start": 0, "end": 9, "prob": 0.9}, {"start": 4, "end": 12, "prob": 0.2}]
    preds = [Prediction(id=it.id, soft_labels=spans) for it in items]
    written = tmp_path / "mushroom.en-val.v2.jsonl"
    said = " ".join(score_predictions(items, preds, written).warnings)
    assert "2 soft spans overlapping earlier ones" in said and str(written) in said, said


def test_a_missing_gold_is_named_before_the_run_and_a_runs_failure_list_is_no_loose_file(tmp_path, capsys):
    """A docs audit: `score my-gold RUN` with no my-gold blamed the run; scoring a run folder
    said its own failures.jsonl was "ignored, no language in the file name"."""
    run = limited_run(tmp_path, capsys)
    items = write_lines(
        tmp_path / "items.jsonl", [json.loads(x) for x in VAL_EN.read_text().splitlines()[:3]]
    )
    items_run = tmp_path / "items-run"
    ctx = write_lines(
        tmp_path / "ctx.jsonl",
        [{"id": json.loads(x)["id"], "context": "text"} for x in VAL_EN.read_text().splitlines()[:3]],
    )
    code, _, err = cli(capsys, "detect", "--items", items, "--contexts", ctx, "--out", items_run, "--quiet")
    assert code == 0, err
    code, _, err = cli(capsys, "score", tmp_path / "my-gold", items_run)
    assert code == 2 and f"GOLD {tmp_path / 'my-gold'}: no such file or folder" in " ".join(err.split()), err
    folder = tmp_path / "loose"
    folder.mkdir()
    (folder / "mushroom.en-val.v2.jsonl").write_bytes(
        (run / "predictions" / "mushroom.en-val.v2.jsonl").read_bytes()
    )
    (folder / "failures.jsonl").write_text("")
    code, _, err = cli(capsys, "score", VAL_DIR, folder, "--partial", "--langs", "en")
    assert code == 0 and "ignored" not in err, err


def test_a_member_written_with_a_colon_is_told_to_use_equals(tmp_path, capsys):
    run = limited_run(tmp_path, capsys)
    code, _, err = cli(capsys, "stack", "fit", f"lexical:{run}", "--out", tmp_path / "s.json")
    assert code == 2 and f"a member is RUN_DIR, or NAME=RUN_DIR to name it (lexical={run}?)" in err, err
    # with a space: the name was read as a folder, "no val prediction files" (an audit)
    code, _, err = cli(capsys, "stack", "fit", "lexical", str(run), "--out", tmp_path / "s.json")
    err = " ".join(err.split())
    assert code == 2 and "member 'lexical': no such folder; a member is RUN_DIR, or NAME=RUN_DIR" in err, err
    assert f"(lexical={run}?)" in err.replace(" ", ""), err


def test_a_line_lost_from_a_limited_runs_file_is_named_not_scored_as_never_predicted(tmp_path, capsys):
    """An audit deleted line 3 of a --limit 5 run's file: scored on 4 items with no flag."""
    run = limited_run(tmp_path, capsys)
    pred = run / "predictions" / "mushroom.en-val.v2.jsonl"
    lines = pred.read_text().splitlines(keepends=True)
    lost = json.loads(lines[2])["id"]
    pred.write_text("".join(lines[:2] + lines[3:]))
    code, _, err = cli(capsys, "score", VAL_DIR, run)
    said = " ".join(err.split())
    assert code == 0 and "no prediction for 1 item its run predicted (--limit 5" in said and lost in said, err
    pred.write_text("".join(lines))
    code, _, err = cli(capsys, "score", VAL_DIR, run)
    assert code == 0 and "its run predicted" not in err, err
    # a --lang run over a file of several languages took the first items of its language only
    from mushroom.data.splits import load_split

    val = load_split("val", ["en", "de"])
    rows = [it.model_dump(exclude_none=True) for pair in zip(val["en"][:5], val["de"][:5]) for it in pair]
    mixed = write_lines(tmp_path / "mixed.jsonl", rows)
    ctx = write_lines(tmp_path / "ctx.jsonl", [{"id": r["id"], "context": "text"} for r in rows])
    out = tmp_path / "mixed-run"
    args = (
        "detect",
        "--items",
        mixed,
        "--contexts",
        ctx,
        "--lang",
        "en",
        "--limit",
        "3",
        "--out",
        out,
        "--quiet",
    )
    code, _, err = cli(capsys, *args)
    assert code == 0, err
    code, _, err = cli(capsys, "score", mixed, out)
    assert code == 0 and "its run predicted" not in err, err


def test_a_wrong_type_in_a_span_names_its_field_and_value(tmp_path, capsys):
    """ "start/end must be integers, prob a number" left the reader to find which, and why."""
    row = {"id": GOLD_ROWS[0]["id"], "soft_labels": [{"start": True, "end": 5, "prob": "0.5"}]}
    row["hard_labels"] = [[31]]
    pred = write_lines(tmp_path / "p.jsonl", [row])
    code, _, err = cli(capsys, "score", VAL_EN, pred)
    said = " ".join(err.split())
    assert code == 1 and "field 'soft_labels.0.start': true is not an integer" in said, said
    assert "field 'soft_labels.0.prob': \"0.5\" is not a number" in said
    assert "field 'hard_labels.0': must be [start, end] integers, not [31]" in said


def test_a_folder_with_two_bad_files_names_both_at_once(tmp_path, capsys):
    """With the de and fr files swapped, score said de; fixed, it said fr (an audit)."""
    import shutil

    from mushroom.data.splits import split_files

    val = split_files("val")
    folder = tmp_path / "pred"
    folder.mkdir()
    for lang in ("en", "de", "fr"):
        rows = [
            {"id": json.loads(line)["id"], "hard_labels": []} for line in val[lang].read_text().splitlines()
        ]
        write_lines(folder / f"mushroom.{lang}-val.v2.jsonl", rows)
    de, fr = folder / "mushroom.de-val.v2.jsonl", folder / "mushroom.fr-val.v2.jsonl"
    shutil.move(de, tmp_path / "de")
    shutil.move(fr, de)
    shutil.move(tmp_path / "de", fr)
    code, _, err = cli(capsys, "score", val["en"].parent, folder, "--langs", "en,de,fr")
    said = " ".join(err.split())
    assert code == 1 and "2 problems in input" in said, said
    assert "mushroom.de-val.v2.jsonl: field 'id': none of its 50 ids" in said
    assert "mushroom.fr-val.v2.jsonl: field 'id': none of its 50 ids" in said


def test_an_output_file_option_ending_in_a_slash_is_refused_not_written_as_a_file(tmp_path, capsys):
    """`--out fits/` names a folder, but typer's Path dropped the slash: a file named `fits`
    was written, exit 0."""
    sub = tmp_path / "mushroom.en-val.v2.jsonl"
    sub.write_text(VAL_EN.read_text())
    for args in (
        ("ensemble", sub, sub, "--out"),
        ("score", VAL_EN, sub, "--json"),
        ("score", VAL_EN, sub, "--output"),
    ):
        code, _, err = cli(capsys, *args, f"{tmp_path}/fits/")
        told = " ".join(err.split())
        assert code == 2 and "fits/ ends in '/', so it names a folder" in told, (args, err)
        assert not (tmp_path / "fits").exists()
    code, _, err = cli(capsys, "score", VAL_EN, sub, "--json", "-")
    assert code == 0, err
    code, _, err = cli(capsys, "ensemble", sub, sub, "--out", f"{tmp_path}/z/.")
    assert code == 2 and "z/. names a folder" in " ".join(err.split()) and not (tmp_path / "z").exists(), err


def test_a_prediction_folder_is_read_for_gold_split_only(tmp_path, capsys):
    import shutil

    from mushroom.data.splits import split_files

    test_only = tmp_path / "test-only"
    test_only.mkdir()
    shutil.copy(split_files("test")["en"], test_only / "mushroom.en-tst.v1.jsonl")
    # it paired the test file with the val gold: "none of its 154 ids is in the gold file"
    code, _, err = cli(capsys, "score", VAL_DIR, test_only, "--langs", "en")
    said = " ".join(err.split())
    assert code == 2 and f"PRED {test_only} holds tst files and GOLD {VAL_DIR} val files" in said, err
    # beside a val file of the same language, the test file is passed over ("2 files for 'en'")
    both = tmp_path / "both"
    shutil.copytree(test_only, both)
    shutil.copy(VAL_EN, both / "mushroom.en-val.v2.jsonl")
    code, shown, err = cli(capsys, "score", VAL_DIR, both, "--langs", "en")
    assert code == 0 and shown.splitlines()[-2] == "IoU: 1.00000000", err


def test_a_paired_test_over_an_empty_answer_is_undefined_not_significant(tmp_path, capsys):
    """An empty answer's Cor is NaN (the official scorer's): `--compare` printed p = 0.0001."""
    from mushroom.evaluation.stats import paired_test

    rows = [dict(r) for r in GOLD_ROWS[:6]]
    rows[0].update(model_output_text="", soft_labels=[], hard_labels=[])
    gold = write_lines(tmp_path / "gold.jsonl", rows)
    preds = []
    for shift in (0, 1):
        lines = [
            {
                "id": r["id"],
                "soft_labels": [{"start": 0, "end": 3 + shift, "prob": 0.9}]
                if r["model_output_text"]
                else [],
            }
            for r in rows
        ]
        preds.append(write_lines(tmp_path / f"p{shift}.jsonl", lines))
    code, out, err = cli(capsys, "score", gold, preds[0], "--compare", preds[1])
    said = " ".join(out.split())
    assert code == 0, err
    assert (
        "paired Cor: PRED - COMPARE = +nan" in said and "p = nan" in said and "1 item with no Cor" in said
    ), said
    assert "paired IoU" in said and "p = nan (n = 6)" not in said.split("paired Cor")[0]  # IoU is defined
    assert math.isnan(paired_test([0.5, float("nan")], [0.5, 0.2]).p_value)


@pytest.mark.parametrize("key", ["hard_labels", "soft_labels"])
def test_a_label_key_misspelt_on_every_line_is_warned_of(tmp_path, capsys, key):
    """`hard_label` on every line passed `check` as OK: each line had soft_labels, so nothing
    was missing, and the file scored with hard labels derived from the soft ones."""
    rows = GOLD_ROWS[:5]
    wrong = key[:-1]
    lines = [
        {"id": r["id"], **{k: r[k] for k in ("soft_labels", "hard_labels") if k != key}, wrong: r[key]}
        for r in rows
    ]
    pred = write_lines(tmp_path / "pred.jsonl", lines)
    gold = write_lines(tmp_path / "gold.jsonl", rows)
    said = f"no line has {key}; 5 lines (first line 1) have a key like it (is {wrong!r} a misspelling?)"
    code, out, err = cli(capsys, "check", pred, "--items", gold)
    assert code == 0 and said in " ".join(err.split()) and "1 warning" in out, (out, err)
    code, out, err = cli(capsys, "score", gold, pred)
    assert code == 0 and said in " ".join(err.split()), err
    with pytest.warns(RuntimeWarning, match="a misspelling"):
        result = mushroom_score(rows, lines)
    assert any(f"no line has {key}" in w for w in result.warnings)


def test_score_takes_lang_as_every_other_command_does_and_names_a_close_language(tmp_path, capsys):
    run = limited_run(tmp_path, capsys)
    code, out, err = cli(capsys, "score", VAL_DIR, run, "--lang", "en")
    assert code == 0 and "IoU:" in out, err  # was "No such option: --lang"
    code, _, err = cli(capsys, "score", VAL_DIR, run, "--langs", "eng")
    assert code == 2 and "(did you mean 'en'?)" in err, err


def test_a_gold_file_with_a_misspelt_label_key_is_warned_of_once_with_the_hint(tmp_path, capsys):
    """The prediction files' warning ("the official scorer derives hard_labels") came for a gold
    file too, beside the one that says the official scorer fails on it."""
    rows = [
        {**{k: v for k, v in r.items() if k != "hard_labels"}, "hard_label": r["hard_labels"]}
        for r in GOLD_ROWS[:5]
    ]
    gold = write_lines(tmp_path / "gold.jsonl", rows)
    pred = write_lines(tmp_path / "pred.jsonl", GOLD_ROWS[:5])
    code, _, err = cli(capsys, "score", gold, pred)
    said = " ".join(err.split())
    assert (
        code == 0
        and "no line has hard_labels (is 'hard_label' a misspelling?): the official scorer fails" in said
    )
    assert "derives hard_labels" not in said, said


def test_out_names_what_score_and_sweep_write_as_every_other_command_names_it(tmp_path, capsys):
    """`score --out` and `sweep --out` were "No such option" (they are --output and --svg)."""
    code, _, err = cli(capsys, "score", VAL_EN, VAL_EN, "--out", tmp_path / "lines.txt")
    assert code == 0 and (tmp_path / "lines.txt").read_text().startswith("IoU: 1.00000000"), err
    code, _, err = cli(capsys, "sweep", limited_run(tmp_path, capsys), "--out", tmp_path / "s.svg")
    assert code == 0 and (tmp_path / "s.svg").read_text().startswith("<svg"), err


def test_in_memory_predictions_with_stranger_ids_get_the_data_error_and_no_line_none(tmp_path):
    """A typing audit: two prediction ids not among the items raised a TypeError (their lines
    are None), and the warnings of in-memory predictions read "<predictions>:None:"."""
    from mushroom.data.records import Prediction
    from mushroom.data.splits import load_items
    from mushroom.errors import DataError
    from mushroom.evaluation.score import score_predictions

    items = load_items(VAL_EN)[:2]
    strangers = [Prediction(id=rid, soft_labels=[]) for rid in ("x-1", "x-2")]
    with pytest.raises(DataError, match="2 ids not in the gold file"):
        score_predictions(items, [Prediction(id=it.id, soft_labels=[]) for it in items] + strangers)
    spans = [{"start": 0, "end": 9, "prob": 0.9}, {"start": 4, "end": 12, "prob": 0.2}]
    said = " ".join(
        score_predictions(items, [Prediction(id=it.id, soft_labels=spans) for it in items]).warnings
    )
    assert "overlapping earlier ones" in said and "None" not in said, said


def test_check_quotes_a_bad_probability_as_the_file_wrote_it(tmp_path, capsys):
    """The terminal audit: `"prob": 1.7` was said as 1.7000000000000002 (the official reader's
    double), a number the user could not find in the file."""
    row = {
        "id": GOLD_ROWS[0]["id"],
        "soft_labels": [{"start": 0, "end": 3, "prob": 1.7}],
        "hard_labels": [[0, 3]],
    }
    bad = write_lines(tmp_path / "p.jsonl", [row])
    code, out, err = cli(capsys, "check", bad, "--items", VAL_EN)
    said = " ".join((out + err).split())
    assert code != 0 and "probability 1.7 is not a number in [0, 1]" in said, said


@pytest.mark.parametrize("width", [40, 60, 80])
def test_narrow_terminals_split_the_score_tables_and_never_break_a_number(width):
    """The terminal audit: at 60 columns "0.6700/0.6488" came out as "0.6700/0.648" over "8",
    and a systems header "semantic" as "semanti" over "c": read on one line, another number."""
    import io
    import re

    from rich.console import Console

    from mushroom.cli.tables import print_fitted, score_table, systems_table
    from mushroom.evaluation.leaderboard import LeaderboardEntry

    lb = LeaderboardEntry("ar", "team", 0.6700, 0.6488, 0.3581)
    rows = [
        {"lang": lang, "n": 50, "iou": 0.5265, "cor": 0.6123, "iou_ci": (0.44, 0.61), "cor_ci": (0.52, 0.70),
         "mark_all_iou": 0.3581, "lb1": lb}
        for lang in ("ar", "de")
    ]  # fmt: skip
    systems = {
        name: {lang: {"iou": 0.5265, "cor": 0.6123} for lang in ("ar", "de", "mean")}
        for name in ("lexical", "semantic", "vote (mean prob, majority)", "stack (default: their mean)")
    }
    tables = [(score_table("per language", rows), {"0.5265", "0.6123", "0.3581", "0.6700/0.6488"})]
    tables.append(
        (systems_table("stack on val", systems, decimals=4), {"0.5265", "0.6123", "semantic", "lexical"})
    )
    for table, whole in tables:
        out = io.StringIO()
        print_fitted(Console(file=out, width=width), table)
        text = out.getvalue()
        assert max(map(len, text.splitlines())) <= width, text
        words = set(re.split(r"[\s│┃\[\],]+", text))
        assert whole <= words, (whole - words, text)
    # at 80 columns a system's IoU and Cor share a line: its long header wraps instead (a review)
    assert width < 80 or "0.5265 0.6123" in text, text

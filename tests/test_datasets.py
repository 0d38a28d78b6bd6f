"""Hugging Face `datasets` in and out, on Datasets built in memory (no network)."""

from __future__ import annotations

import json
import sys

import pytest
from cli_helpers import cli

import mushroom
from mushroom.data.hf import items_from_dataset, predictions_to_dataset
from mushroom.data.splits import load_split
from mushroom.errors import DataError, MissingExtra

datasets = pytest.importorskip("datasets")


def _rows(lang="it", n=6):
    return [it.model_dump(exclude_none=True) for it in load_split("val", [lang])[lang][:n]]


def test_the_api_takes_a_dataset_and_predictions_convert_back_to_one():
    rows = [
        {
            "id": "a",
            "lang": "en",
            "model_input": "Where?",
            "model_output_text": "Marie Curie was born in Berlin.",
        },
        {"id": "b", "lang": "en", "model_input": "When?", "model_output_text": "She was born in 1867."},
    ]
    ds = datasets.Dataset.from_list(rows).add_column("contexts", [["She was born in Warsaw."]] * 2)
    preds = mushroom.detect_batch(ds, method="lexical")
    assert [p.id for p in preds] == ["a", "b"]
    assert any(span[2] == "Berlin" for span in preds[0].spans)
    out = predictions_to_dataset(preds)
    assert out.column_names == ["id", "soft_labels", "hard_labels"] and out.num_rows == 2
    assert out[0]["hard_labels"] == [list(h) for h in preds[0].hard_labels]
    assert out[0]["soft_labels"][0].keys() == {"start", "end", "prob"}


def test_detect_stream_over_a_dataset_gives_detect_batchs_predictions():
    rows = _rows("en", n=7)
    ds = datasets.Dataset.from_list(rows).add_column("contexts", [["Paris is the capital of France."]] * 7)
    streamed = list(mushroom.detect_stream(ds, method="lexical", chunk_size=3))
    assert [p.model_dump() for p in streamed] == [p.model_dump() for p in mushroom.detect_batch(ds)]
    assert [p.id for p in streamed] == [r["id"] for r in rows]


def test_bad_columns_get_the_same_row_and_field_errors_as_jsonl():
    rows = _rows(n=3)
    rows[1] = {k: v for k, v in rows[1].items() if k != "model_output_text"}
    rows[2]["hard_labels"] = [[0, 10_000]]
    with pytest.raises(DataError) as caught:
        items_from_dataset(datasets.Dataset.from_list(rows), source="my-dataset")
    said = str(caught.value)
    assert "my-dataset:2" in said and "model_output_text" in said
    assert "my-dataset:3" in said and "hard_labels" in said
    with pytest.raises(DataError, match="my-dataset:1.*field 'lang'"):
        items_from_dataset(datasets.Dataset.from_list([{**_rows(n=1)[0], "lang": "../x"}]), "my-dataset")


def test_detect_and_score_take_a_saved_dataset_folder(tmp_path, capsys):
    gold = tmp_path / "gold"
    datasets.Dataset.from_list(_rows("it") + _rows("sv")).save_to_disk(str(gold))
    ctx = tmp_path / "ctx.jsonl"
    ctx.write_text(
        "".join(
            json.dumps({"id": r["id"], "context": r["model_output_text"]}) + "\n"
            for r in _rows("it") + _rows("sv")
        )
    )
    out = tmp_path / "run"
    code, shown, err = cli(
        capsys, "detect", "--items", gold, "--contexts", ctx, "--detector", "lexical", "--out", out, "--quiet"
    )
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())["config"]
    assert config["items"] == str(gold)  # the folder as given: the same command resumes
    assert (out / "predictions" / "mushroom.it-items.jsonl").is_file()
    assert (out / "scores.json").is_file()  # labelled rows are scored
    # score: a saved dataset of gold items against a prediction file
    it_gold = tmp_path / "it-gold"
    datasets.Dataset.from_list(_rows("it")).save_to_disk(str(it_gold))
    code, shown, err = cli(capsys, "score", it_gold, out / "predictions" / "mushroom.it-items.jsonl")
    assert code == 0, err
    assert shown.splitlines()[-2].startswith("IoU:") and shown.splitlines()[-1].startswith("Cor:")
    # the same command again resumes the folder (its config did not change)
    code, shown, err = cli(
        capsys, "detect", "--items", gold, "--contexts", ctx, "--detector", "lexical", "--out", out, "--quiet"
    )
    assert code == 0, err
    # check, ensemble and report take the folder as --items too ("is a folder; give a file")
    pred = out / "predictions" / "mushroom.it-items.jsonl"
    code, shown, err = cli(capsys, "check", pred, "--items", it_gold)
    assert code == 0, err
    code, shown, err = cli(
        capsys, "ensemble", pred, pred, "--items", it_gold, "--out", tmp_path / "ens.jsonl"
    )
    assert code == 0 and (tmp_path / "ens.jsonl").is_file(), err
    code, shown, err = cli(
        capsys, "report", out, "--items", gold, "--contexts", ctx, "--out", tmp_path / "r.html"
    )
    assert code == 0 and (tmp_path / "r.html").is_file(), err
    # compare and sweep too, and report without --items reads the folder the run recorded
    # (each said "is a folder; give a file", or "give its items file")
    code, shown, err = cli(capsys, "compare", out, "--items", gold, "--eval-dir", tmp_path / "eval")
    assert code == 0 and "it" in shown, err
    code, shown, err = cli(capsys, "sweep", out, "--items", gold, "--svg", tmp_path / "s.svg")
    assert code == 0 and (tmp_path / "s.svg").is_file(), err
    code, shown, err = cli(capsys, "report", out, "--out", tmp_path / "r2.html")
    assert code == 0 and (tmp_path / "r2.html").is_file() and f"made with --items {gold}" in err, err


def test_a_bad_saved_dataset_is_named_with_its_row_and_field(tmp_path, capsys):
    rows = _rows(n=3)
    rows[2]["lang"] = 7
    folder = tmp_path / "bad"
    datasets.Dataset.from_list(rows[:2]).save_to_disk(str(folder))
    broken = tmp_path / "broken"
    datasets.Dataset.from_list([{**r, "model_output_text": None} for r in rows[:2]]).save_to_disk(str(broken))
    code, _, err = cli(
        capsys, "detect", "--items", broken, "--contexts", tmp_path / "none.jsonl", "--out", tmp_path / "r"
    )
    said = " ".join(err.split())
    assert code == 1 and f"{broken}:1" in said and "model_output_text" in said, err
    assert not (tmp_path / "r").exists()


def test_without_the_datasets_package_the_extra_is_named(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(MissingExtra, match=r"\(mushroom's 'datasets' extra\)"):
        predictions_to_dataset([])


def test_a_saved_gold_dataset_with_official_upper_case_codes_is_scored(tmp_path, capsys):
    """Official val files say "EN": its gold file was named mushroom.EN-val, which no pairing reads."""
    gold, preds = tmp_path / "gold", tmp_path / "preds"
    preds.mkdir()
    rows = []
    for lang in ("it", "sv"):
        rows += [{**row, "lang": lang.upper()} for row in _rows(lang)]
        pred = preds / f"mushroom.{lang}-val.v2.jsonl"
        pred.write_text("".join(json.dumps({"id": r["id"], "hard_labels": []}) + "\n" for r in _rows(lang)))
    datasets.Dataset.from_list(rows).save_to_disk(str(gold))
    code, shown, err = cli(capsys, "score", gold, preds)
    assert code == 0, err
    assert shown.splitlines()[-2].startswith("IoU:")


def test_a_saved_dataset_dict_names_its_splits(tmp_path, capsys):
    """`load_dataset(...).save_to_disk(...)` writes a DatasetDict: it was taken for a plain folder,
    "is a folder; give a file" and "GOLD is a folder, PRED a file", with no word of its splits."""
    saved = tmp_path / "dd"
    rows = datasets.Dataset.from_list(_rows("it"))
    datasets.DatasetDict({"train": rows, "test": rows}).save_to_disk(str(saved))
    pred = tmp_path / "p.jsonl"
    pred.write_text("".join(json.dumps({"id": r["id"], "hard_labels": []}) + "\n" for r in _rows("it")))
    for args in (["detect", "--items", saved, "--out", tmp_path / "run"], ["score", saved, pred]):
        code, _, err = cli(capsys, *args)
        told = " ".join(err.split())
        assert code == 2 and "is a DatasetDict (splits: train, test); give one split's folder" in told, (
            args,
            err,
        )


def test_saved_gold_with_one_kind_of_label_is_scored_as_its_jsonl_would_be(tmp_path, capsys):
    """A dataset writes None where a record lacked soft_labels: `score` refused the gold as
    "soft_labels: must be a list" (naming a temporary file), where `detect --items` read it."""
    rows = _rows("it", 3)
    for row in rows[1:]:
        row["soft_labels"] = None  # the first keeps its soft labels: the column is a list column
    gold = tmp_path / "gold"
    datasets.Dataset.from_list(rows).save_to_disk(str(gold))
    pred = tmp_path / "p.jsonl"
    ids = [r["id"] for r in rows]
    pred.write_text("".join(json.dumps({"id": i, "hard_labels": []}) + "\n" for i in ids))
    code, out, err = cli(capsys, "score", gold, pred)
    assert code == 0 and out.splitlines()[-2].startswith("IoU:"), err


def test_a_value_json_cannot_hold_is_refused_by_row_and_column_not_read_as_its_str(tmp_path, capsys):
    """A bytes answer became the text "b'...'" (53 characters for 35), was detected and scored."""
    rows = _rows(n=3)
    rows[1]["model_output_text"] = rows[1]["model_output_text"].encode()
    folder = tmp_path / "bytes"
    datasets.Dataset.from_list(rows).save_to_disk(str(folder))
    for args in (
        ["detect", "--items", folder, "--out", tmp_path / "r"],
        ["score", folder, tmp_path / "none"],
    ):
        code, _, err = cli(capsys, *args)
        said = " ".join(err.split())
        assert code == 1 and f"{folder}:2: field 'model_output_text': a bytes value" in said, said
    assert not (tmp_path / "r").exists()
    # a column mushroom does not read may hold anything: a timestamp is no reason to stop
    import datetime

    stamped = [{**r, "created": datetime.datetime(2024, 1, 1)} for r in _rows(n=2)]
    assert [it.id for it in items_from_dataset(datasets.Dataset.from_list(stamped))] == [
        r["id"] for r in stamped
    ]


def test_saved_datasets_empty_unlabelled_or_given_by_one_of_their_files_are_named(tmp_path, capsys):
    empty = tmp_path / "empty"
    datasets.Dataset.from_list([]).save_to_disk(str(empty))
    code, _, err = cli(capsys, "detect", "--items", empty, "--out", tmp_path / "r")
    assert code == 1 and "the saved dataset holds no rows" in err and "bug" not in err, err
    splits = tmp_path / "splits"
    rows = datasets.Dataset.from_list(_rows(n=2))
    datasets.DatasetDict({"train": rows, "test": datasets.Dataset.from_list([])}).save_to_disk(str(splits))
    code, _, err = cli(capsys, "detect", "--items", splits, "--out", tmp_path / "r")
    assert code == 1 and "a DatasetDict whose split(s) test hold no rows" in " ".join(err.split()), err
    unlabelled = tmp_path / "unlabelled"
    datasets.Dataset.from_list(_rows(n=2)).remove_columns(["hard_labels", "soft_labels"]).save_to_disk(
        str(unlabelled)
    )
    code, _, err = cli(capsys, "score", unlabelled, tmp_path / "none.jsonl")
    said = " ".join(err.split())
    assert code == 1 and f"{unlabelled}: no row has hard_labels or soft_labels" in said, said
    assert "mushroom-hf-" not in said  # not the temporary copy
    for inside in ("state.json", "dataset_info.json"):
        code, _, err = cli(capsys, "detect", "--items", unlabelled / inside, "--out", tmp_path / "r")
        said = " ".join(err.split())
        assert code == 2 and f"a file inside the saved dataset {unlabelled}; give the folder" in said, said
    plain = tmp_path / "plain"
    plain.mkdir()
    code, _, err = cli(capsys, "detect", "--items", plain, "--out", tmp_path / "r")
    assert code == 2 and "not one Dataset.save_to_disk wrote" in " ".join(err.split()), err
    assert not (tmp_path / "r").exists()


def test_a_saved_gold_dataset_scores_prediction_records_from_python(tmp_path):
    """api.md: gold may be anything `mushroom score` takes; a dataset folder with records failed."""
    rows = _rows(n=5)
    folder = tmp_path / "gold"
    datasets.Dataset.from_list(rows).save_to_disk(str(folder))
    preds = mushroom.detect_batch(rows, method="lexical")
    from_folder = mushroom.score(folder, preds)
    assert from_folder.iou == pytest.approx(mushroom.score(rows, preds).iou)


def test_a_dataset_dict_given_to_the_api_is_told_to_pick_a_split():
    splits = datasets.DatasetDict({"validation": datasets.Dataset.from_list(_rows(n=2))})
    with pytest.raises(TypeError, match=r"a DatasetDict: give one split, e\.g\. items\['validation'\]"):
        mushroom.detect_batch(splits, method="lexical")


def test_a_gold_folder_that_is_neither_official_files_nor_a_dataset_is_blamed_not_the_run(tmp_path, capsys):
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in _rows(n=2)))
    ctx = tmp_path / "ctx.jsonl"
    ctx.write_text(
        "".join(json.dumps({"id": r["id"], "context": r["model_output_text"]}) + "\n" for r in _rows(n=2))
    )
    run = tmp_path / "run"
    args = ["detect", "--items", items, "--contexts", ctx, "--detector", "lexical", "--out", run]
    assert cli(capsys, *args)[0] == 0
    plain = tmp_path / "plain"
    plain.mkdir()
    code, _, err = cli(capsys, "score", plain, run)
    said = " ".join(err.split())
    assert code == 2 and f"GOLD {plain}: a folder with no per-language files" in said, said
    assert "made with --items" not in said


def test_a_saved_predictions_dataset_is_scored_and_checked_as_its_file_would_be(tmp_path, capsys):
    from mushroom.data.splits import split_files

    gold = split_files("val")
    from mushroom.data.records import Prediction

    def guess(item):  # the gold's first soft span only: scores neither 0 nor 1
        return Prediction(id=item.id, soft_labels=(item.soft_labels or [])[:1])

    by_lang = {lang: [guess(it) for it in load_split("val", [lang])[lang]] for lang in ("it", "sv")}
    preds = by_lang["it"] + by_lang["sv"]
    saved = tmp_path / "preds"
    predictions_to_dataset(preds).save_to_disk(str(saved))
    files = tmp_path / "files"
    files.mkdir()
    for lang, lang_preds in by_lang.items():
        (files / gold[lang].name).write_text(
            "".join(json.dumps(p.submission_dict()) + "\n" for p in lang_preds)
        )
    # with the gold folder, the rows go to its languages by id: the scores of the files
    val = gold["it"].parent
    code, from_files, err = cli(capsys, "score", val, files, "--langs", "it,sv")
    assert code == 0, err
    code, from_dataset, err = cli(capsys, "score", val, saved, "--langs", "it,sv")
    assert code == 0 and from_dataset.splitlines()[-2:] == from_files.splitlines()[-2:], err
    assert from_files.splitlines()[-2] not in ("IoU: 0.00000000", "IoU: 1.00000000")
    # with one gold file, the rows of the other language are ids not in it
    code, _, err = cli(capsys, "score", gold["it"], saved)
    assert code == 1 and f"{saved}:" in err and "not in the gold file" in err, err
    bad = [p.submission_dict() for p in preds]
    bad[2]["hard_labels"] = [[0, 100_000]]
    bad[4]["id"] = "nope"
    bad_saved = tmp_path / "bad"
    datasets.Dataset.from_list(bad).save_to_disk(str(bad_saved))
    code, _, err = cli(capsys, "score", val, bad_saved, "--langs", "it,sv")
    said = " ".join(err.split())
    assert code == 1 and f"{bad_saved}:5: field 'id': 'nope' is in no gold file" in said, err
    assert "mushroom-hf-" not in said  # the temporary files are never named
    # check: every problem by the dataset's row; a good one is OK
    it_saved = tmp_path / "it-preds"
    predictions_to_dataset(by_lang["it"]).save_to_disk(str(it_saved))
    code, shown, err = cli(capsys, "check", it_saved, "--items", gold["it"])
    assert code == 0 and f"{it_saved}: OK" in shown, err
    it_bad = tmp_path / "it-bad"
    datasets.Dataset.from_list(bad[: len(by_lang["it"])]).save_to_disk(str(it_bad))
    code, _, err = cli(capsys, "check", it_bad, "--items", gold["it"])
    said = " ".join(err.split())
    assert code == 1 and f"{it_bad}:3:" in said and "hard_labels" in said and f"{it_bad}:5" in said, err
    assert "mushroom-hf-" not in said
    # a dataset of items (no labels) is said to be no predictions
    items_saved = tmp_path / "items"
    unlabelled = [
        {k: v for k, v in r.items() if k not in ("soft_labels", "hard_labels")} for r in _rows("it")
    ]
    datasets.Dataset.from_list(unlabelled).save_to_disk(str(items_saved))
    code, _, err = cli(capsys, "score", gold["it"], items_saved)
    said = " ".join(err.split())
    assert code == 1 and "a dataset of predictions has id and soft_labels or hard_labels" in said, err


def test_a_gold_dataset_of_several_languages_against_one_prediction_file_says_what_to_give(tmp_path, capsys):
    gold = tmp_path / "gold"
    datasets.Dataset.from_list(_rows("it") + _rows("sv")).save_to_disk(str(gold))
    pred = tmp_path / "p.jsonl"
    pred.write_text("".join(json.dumps({"id": r["id"], "hard_labels": []}) + "\n" for r in _rows("it")))
    code, _, err = cli(capsys, "score", gold, pred)
    said = " ".join(err.split())
    assert code == 2 and f"GOLD {gold} is a saved dataset of 2 languages (it, sv)" in said, err


def test_a_warning_about_a_saved_predictions_row_names_its_row_not_its_line_in_a_language(tmp_path, capsys):
    from mushroom.data.records import Prediction
    from mushroom.data.splits import split_files

    gold = split_files("val")
    rows = {lang: load_split("val", [lang])[lang] for lang in ("it", "sv")}
    preds = [Prediction(id=it.id, soft_labels=it.soft_labels or []) for lang in rows for it in rows[lang]]
    rows_of = [p.submission_dict() for p in preds]
    second_sv = len(rows["it"]) + 1  # 0-based: the sv file's line 2, the dataset's row len(it) + 2
    rows_of[second_sv]["soft_labels"] = [
        {"start": 0, "end": 5, "prob": 0.5},
        {"start": 3, "end": 8, "prob": 0.5},
    ]
    saved = tmp_path / "preds"
    datasets.Dataset.from_list(rows_of).save_to_disk(str(saved))
    code, out, err = cli(capsys, "score", gold["it"].parent, saved, "--langs", "it,sv")
    said = " ".join((out + err).split())
    assert code == 0, err
    assert f"{saved}:{second_sv + 1}: id" in said, said  # was {saved}:2, the sv file's line
    assert f"{saved}:2: id" not in said


def test_scoring_an_items_run_on_its_unlabelled_or_bad_dataset_names_the_dataset_not_a_temp_file(
    tmp_path, capsys
):
    """`score DATASET RUN` of a `detect --items DATASET` run named
    "/tmp/mushroom-hf-.../items.jsonl" (an audit): its rows are said of the dataset's folder."""
    unlabelled = tmp_path / "unlabelled"
    rows = _rows("it")
    datasets.Dataset.from_list(rows).remove_columns(["hard_labels", "soft_labels"]).save_to_disk(
        str(unlabelled)
    )
    ctx = tmp_path / "ctx.jsonl"
    ctx.write_text(
        "".join(json.dumps({"id": r["id"], "context": r["model_output_text"]}) + "\n" for r in rows)
    )
    out = tmp_path / "run"
    args = ("--contexts", ctx, "--detector", "lexical", "--out", out, "--quiet")
    code, _, err = cli(capsys, "detect", "--items", unlabelled, *args)
    assert code == 0, err
    code, _, err = cli(capsys, "score", unlabelled, out)
    said = " ".join(err.split())
    assert code == 1 and f"{unlabelled}: no line has hard_labels or soft_labels" in said, said
    assert "mushroom-hf-" not in said
    # a gold row that is wrong is named by its row in the dataset
    bad = tmp_path / "bad"
    broken = [dict(r) for r in rows]
    broken[1]["hard_labels"] = [[5, 2]]
    datasets.Dataset.from_list(broken).save_to_disk(str(bad))
    code, _, err = cli(capsys, "score", bad, out / "predictions" / "mushroom.it-items.jsonl")
    said = " ".join(err.split())
    assert code == 1 and f"{bad}:2" in said and "mushroom-hf-" not in said, said


def test_a_dataset_with_other_column_names_gets_one_problem_per_column_not_per_row(tmp_path, capsys):
    """Renamed columns (qid, language, question, answer) gave a problem per row and column, and
    only `language` a hint (an audit)."""
    renamed = tmp_path / "renamed"
    rows = [{"qid": f"q{k}", "language": "en", "question": "Q?", "answer": "An answer."} for k in range(6)]
    datasets.Dataset.from_list(rows).save_to_disk(str(renamed))
    code, _, err = cli(capsys, "detect", "--items", renamed, "--out", tmp_path / "run")
    said = " ".join(err.split())
    assert code == 1 and "4 problems in input" in said, said
    assert "no column 'model_output_text' among qid, language, question, answer" in said
    assert "dataset.rename_column('answer', 'model_output_text')" in said
    assert "dataset.rename_column('language', 'lang')" in said

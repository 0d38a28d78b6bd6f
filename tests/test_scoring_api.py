"""`mushroom.score`: the official numbers from Python, on files or on records in memory."""

import json
import warnings

import pytest
from cli_helpers import GOLD_ROWS, cli
from conftest import VAL_EN
from official_oracle import official_scores

import mushroom
from mushroom.errors import DataError


def _preds():
    return mushroom.detect_batch(
        [{"answer": r["model_output_text"], "question": r["model_input"], "id": r["id"], "contexts": [r["model_input"]]}
         for r in GOLD_ROWS]
    )  # fmt: skip


def test_records_in_memory_score_as_the_files_they_make_and_as_the_official_scorer(tmp_path, capsys):
    preds = _preds()
    file = tmp_path / "pred.jsonl"
    file.write_text("".join(json.dumps(p.submission_dict()) + "\n" for p in preds))
    iou, cor = official_scores(VAL_EN, file)
    for gold, pred in ((GOLD_ROWS, preds), (VAL_EN, preds), (str(VAL_EN), str(file)), (GOLD_ROWS, file)):
        result = mushroom.score(gold, pred)
        assert (result.mean_iou, result.mean_cor) == pytest.approx((iou, cor), abs=1e-12)
        assert len(result.ids) == len(GOLD_ROWS) and set(result.by_lang()) == {"en"}
    code, out, _ = cli(capsys, "score", VAL_EN, file)
    assert code == 0 and f"IoU: {iou:.8f}" in out
    dicts = [p.submission_dict() for p in preds]  # as a submission line has them
    assert mushroom.score(GOLD_ROWS, dicts).mean_iou == pytest.approx(iou, abs=1e-12)


def test_what_cannot_be_scored_names_the_record_not_a_temporary_file():
    preds = [p.submission_dict() for p in _preds()]
    bad = [dict(p) for p in preds]
    bad[2]["soft_labels"] = [{"start": 0, "end": 99999, "prob": 0.5}]
    with pytest.raises(DataError) as err:
        mushroom.score(GOLD_ROWS, bad)
    said = str(err.value)
    assert "predictions[2]: id" in said and "soft_labels" in said and "/tmp" not in said, said
    with pytest.raises(DataError, match="no prediction for 40 gold ids.*partial=True scores only"):
        mushroom.score(GOLD_ROWS, preds[:10])
    part = mushroom.score(GOLD_ROWS, preds[:10], partial=True)
    assert len(part.ids) == 10 and part.unscored == 40
    with pytest.raises(TypeError, match="partial is True or False, not 'no'"):  # "no" scored a subset
        mushroom.score(GOLD_ROWS, preds[:10], partial="no")
    with pytest.raises(DataError, match="none of its 1 id is in the gold"):
        mushroom.score(GOLD_ROWS, [{"id": "x", "hard_labels": [[0, 3]]}])
    unlabelled = [{k: v for k, v in r.items() if "labels" not in k} for r in GOLD_ROWS]
    with pytest.raises(DataError, match="gold: no line has hard_labels or soft_labels"):
        mushroom.score(unlabelled, preds)
    with pytest.raises(TypeError, match="gold is a path, or an iterable of records"):
        mushroom.score(5, preds)
    with pytest.raises(TypeError, match="predictions\\[0\\] is a int"):
        mushroom.score(GOLD_ROWS, [1, 2])
    with pytest.raises(mushroom.MushroomError, match="no such file or folder"):
        mushroom.score("/nope/gold.jsonl", preds)


def test_what_the_command_warns_of_is_a_runtime_warning_and_kept_on_the_result():
    preds = [p.submission_dict() for p in _preds()]
    preds[1]["soft_labels"] = [{"start": 0, "end": 3, "prob": 1.5}]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = mushroom.score(GOLD_ROWS, preds)
    said = [str(w.message) for w in caught if w.category is RuntimeWarning]
    assert said and "outside [0, 1]" in said[0] and "predictions[1]" in said[0], said
    assert result.warnings == said and caught[0].filename == __file__  # points at the caller's line


def test_a_prediction_with_one_kind_of_label_scores_as_the_dict_it_came_from():
    """submission_dict wrote both keys, so the other was never derived: IoU 0.04, not 0.38."""
    rows = [p.submission_dict() for p in _preds()]
    for key in ("soft_labels", "hard_labels"):
        only = [{"id": r["id"], key: r[key]} for r in rows]
        as_dicts = mushroom.score(GOLD_ROWS, only)
        as_preds = mushroom.score(GOLD_ROWS, [mushroom.Prediction(**d) for d in only])
        assert (as_preds.mean_iou, as_preds.mean_cor) == (as_dicts.mean_iou, as_dicts.mean_cor), key
        # ... and as the file it writes: "hard_labels": [] was written for a soft-only one,
        # which the leaderboard scores as marking nothing
        written = [json.loads(json.dumps(mushroom.Prediction(**d).submission_dict())) for d in only]
        as_written = mushroom.score(GOLD_ROWS, written)
        assert (as_written.mean_iou, as_written.mean_cor) == (as_dicts.mean_iou, as_dicts.mean_cor), key


def test_a_label_kind_left_out_follows_the_other_when_it_is_assigned():
    text = "Marie Curie was born in 1867 in Berlin."
    pred = mushroom.Prediction(id="a", text=text, soft_labels=[{"start": 32, "end": 38, "prob": 0.9}])
    assert pred.hard_labels == [(32, 38)] and pred.submission_dict()["hard_labels"] == [[32, 38]]
    pred.soft_labels = [{"start": 0, "end": 5, "prob": 0.9}, {"start": 5, "end": 11, "prob": 0.4}]
    assert pred.hard_labels == [(0, 5)]
    hard_only = mushroom.Prediction(id="a", text=text, hard_labels=[[24, 28]])
    assert [(s.start, s.end, s.prob) for s in hard_only.soft_labels] == [(24, 28, 1.0)]
    given = mushroom.Prediction(
        id="a", text=text, soft_labels=[{"start": 0, "end": 5, "prob": 0.9}], hard_labels=[]
    )
    assert given.hard_labels == []  # both given: each kept as given


def test_records_as_a_notebook_holds_them(tmp_path):
    """Integer ids, a DataFrame's empty cells, a DataFrame itself, NaN in a probability."""
    pd = pytest.importorskip("pandas")
    rows = [p.submission_dict() for p in _preds()]
    gold_int = [{**r, "id": k} for k, r in enumerate(GOLD_ROWS)]
    pred_int = [{**r, "id": k} for k, r in enumerate(rows)]
    assert mushroom.score(gold_int, pred_int).mean_iou == pytest.approx(
        mushroom.score(GOLD_ROWS, rows).mean_iou
    )
    # a column some rows lack: NaN in the others, a key left out (derived, and warned of)
    frame = pd.DataFrame([{"id": r["id"], "soft_labels": r["soft_labels"]} for r in rows[:25]] + rows[25:])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mixed = mushroom.score(GOLD_ROWS, frame.to_dict("records"))
    assert len(mixed.ids) == 50 and any("derived" in str(w.message) for w in caught)
    with pytest.raises(TypeError, match="predictions is a DataFrame: give its rows"):
        mushroom.score(GOLD_ROWS, frame)
    nan = [{**rows[0], "soft_labels": [{"start": 0, "end": 5, "prob": float("nan")}]}, *rows[1:]]
    with pytest.raises(DataError, match=r"predictions\[0\]: field 'soft_labels.0.prob': NaN or infinite"):
        mushroom.score(GOLD_ROWS, nan)
    # half a character: a raw UnicodeEncodeError named no record
    half = [{**GOLD_ROWS[0], "model_output_text": "ab\udc80cd"}, *GOLD_ROWS[1:]]
    with pytest.raises(DataError, match=r"gold\[0\]: field 'model_output_text': holds a lone surrogate"):
        mushroom.score(half, rows)


def test_messages_name_records_and_keywords_not_lines_and_flags():
    rows = [p.submission_dict() for p in _preds()]
    with pytest.raises(DataError) as err:
        mushroom.score(GOLD_ROWS, [*rows, rows[3]])
    said = str(err.value)
    assert "predictions[50]" in said and "predictions[3]" in said and "line" not in said, said
    with pytest.raises(TypeError, match="langs picks the files of a gold folder"):
        mushroom.score(VAL_EN, rows, langs=["en"])


def test_a_gold_folder_takes_the_records_of_its_languages(tmp_path):
    """detect_batch over a split, then score(split_folder, preds): the records were refused."""
    from conftest import ROOT

    folder = ROOT / "data" / "mushroom" / "val"
    zh = next(folder.glob("mushroom.zh-val*.jsonl"))
    zh_rows = [json.loads(line) for line in zh.read_text(encoding="utf-8").splitlines()]
    both = GOLD_ROWS + zh_rows
    preds = mushroom.detect_batch(
        [{"answer": r["model_output_text"], "id": r["id"], "lang": r["lang"].lower(), "contexts": [r["model_input"]]}
         for r in both]
    )  # fmt: skip
    result = mushroom.score(folder, preds, langs="en,zh")
    assert set(result.by_lang()) == {"en", "zh"} and len(result.ids) == len(both)
    assert result.mean_iou == pytest.approx(mushroom.score(both, preds).mean_iou, abs=1e-12)
    with pytest.raises(mushroom.MushroomError, match="no prediction file for .* langs="):
        mushroom.score(folder, preds)  # the other languages have none
    with pytest.raises(DataError, match=r"predictions\[0\]: field 'id': 'nope' is in no gold file"):
        mushroom.score(folder, [{"id": "nope", "hard_labels": []}], langs="en")
    # partial=True with no langs: the languages predicted are scored, and only their items
    # predicted (a mutation audit: no test held it)
    part = mushroom.score(folder, preds[:10], partial=True)
    assert set(part.by_lang()) == {"en"} and len(part.ids) == 10
    # a code list with spaces or a trailing comma is the same list
    for langs in ("en, zh", " en,zh ,", ["en", "zh"]):
        assert len(mushroom.score(folder, preds, langs=langs).ids) == len(both), langs


def test_the_users_own_paths_and_ids_are_never_reworded(tmp_path):
    """The command's GOLD and PRED were renamed everywhere: '/tmp/GOLD/x' became '/tmp/gold/x'."""
    np = pytest.importorskip("numpy")
    with pytest.raises(mushroom.MushroomError, match="gold .*/GOLD/nothere.jsonl: no such file"):
        mushroom.score(tmp_path / "GOLD" / "nothere.jsonl", [{"id": "a"}])
    rows = [p.submission_dict() for p in _preds()]
    with pytest.raises(DataError, match="not in the gold file: 'PRED'"):
        mushroom.score(GOLD_ROWS, [*rows, {"id": "PRED", "hard_labels": []}])
    numpy_ids = [{**r, "id": np.int64(k)} for k, r in enumerate(GOLD_ROWS)]
    preds = [{**r, "id": np.int64(k)} for k, r in enumerate(rows)]
    assert len(mushroom.score(numpy_ids, preds).ids) == len(GOLD_ROWS)


def test_a_prediction_whose_text_is_not_its_gold_answer_is_warned_of():
    """Offsets into an answer normalised otherwise (NFC) were scored IoU 0.75 without a word."""
    import unicodedata

    gold_text = "Marie Curie died in Pa\u0301ris, in Germany."
    gold = [
        {
            "id": "a",
            "lang": "en",
            "model_input": "q",
            "model_output_text": gold_text,
            "soft_labels": [{"start": 32, "end": 39, "prob": 1.0}],
            "hard_labels": [[32, 39]],
        }
    ]
    other = mushroom.Prediction(id="a", text=unicodedata.normalize("NFC", gold_text), hard_labels=[(31, 38)])
    with pytest.warns(RuntimeWarning, match="carry a text that is not their gold answer"):
        result = mushroom.score(gold, [other])
    assert result.mean_iou == pytest.approx(0.75)  # scored as it is
    same = mushroom.Prediction(id="a", text=gold_text, hard_labels=[(32, 39)])
    assert mushroom.score(gold, [same]).warnings == []


def test_a_refused_assignment_or_a_copy_leaves_no_label_derived_from_the_refused_spans():
    """Refused, the assigned kind came back but the other kept what was derived from the
    refused value; `model_copy(update=...)` kept hard labels derived from the old soft ones."""
    text = "Marie Curie was born in 1867 in Berlin."
    pred = mushroom.Prediction(id="a", text=text, soft_labels=[{"start": 32, "end": 38, "prob": 0.9}])
    with pytest.raises(ValueError, match="not inside the text"):
        pred.soft_labels = [{"start": 0, "end": 500, "prob": 0.9}]
    assert pred.submission_dict()["hard_labels"] == [[32, 38]]
    assert mushroom.Prediction.model_validate_json(pred.model_dump_json()).hard_labels == [(32, 38)]
    copy = pred.model_copy(update={"soft_labels": [{"start": 0, "end": 5, "prob": 0.9}]})
    assert copy.hard_labels == [(0, 5)] and pred.hard_labels == [(32, 38)]
    with pytest.raises(ValueError, match="not inside the text"):
        pred.model_copy(update={"hard_labels": [[0, 500]]})


def test_soft_only_and_hard_only_predictions_mixed_score_without_a_file_warning():
    """Each mushroom.Prediction holds both kinds; written as given, the mix was warned of as a
    file "the official scorer fails on", which the user never wrote."""
    rows = [p.submission_dict() for p in _preds()]
    mixed = [
        mushroom.Prediction(
            id=r["id"], **({"soft_labels": r["soft_labels"]} if k % 2 else {"hard_labels": r["hard_labels"]})
        )
        for k, r in enumerate(rows)
    ]
    as_dicts = [p.submission_dict() for p in mixed]  # both kinds, as a file of them holds
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = mushroom.score(GOLD_ROWS, mixed)
    assert not [str(w.message) for w in caught if w.category is RuntimeWarning] and not result.warnings
    expected = mushroom.score(GOLD_ROWS, as_dicts)
    assert (result.mean_iou, result.mean_cor) == (expected.mean_iou, expected.mean_cor)


def test_an_edited_prediction_is_scored_by_its_labels_now_and_one_without_labels_is_refused():
    """Its derived hard labels were written as cached: a soft span appended after it was made
    scored IoU 0.5, not 1.0; and Prediction(id=...) alone was scored as empty (a review)."""
    from mushroom.data.records import SoftSpan

    gold = [
        {"id": "a", "model_output_text": "abcdefghij", "hard_labels": [[0, 3], [5, 8]],
         "soft_labels": [{"start": 0, "end": 3, "prob": 1.0}, {"start": 5, "end": 8, "prob": 1.0}]}
    ]  # fmt: skip
    pred = mushroom.Prediction(id="a", soft_labels=[{"start": 0, "end": 3, "prob": 0.9}])
    pred.soft_labels.append(SoftSpan(start=5, end=8, prob=0.9))
    assert mushroom.score(gold, [pred]).mean_iou == 1.0
    with pytest.raises(DataError, match="no line has hard_labels or soft_labels"):
        mushroom.score(gold, [mushroom.Prediction(id="a")])

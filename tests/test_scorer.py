import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import VAL_EN, heavy_val_lines, traced, write_lines
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from official_oracle import official_scores

from mushroom.data.jsonnum import ujson_float
from mushroom.data.label_files import read_scoring_file
from mushroom.errors import DataError
from mushroom.evaluation.metrics import OfficialScorerCrash, item_cor, item_iou
from mushroom.evaluation.reference import reference_cor, reference_iou
from mushroom.evaluation.score import score_files

pd = pytest.importorskip("pandas")

VAL_ROWS = [json.loads(line) for line in VAL_EN.read_text(encoding="utf-8").splitlines()]


def test_iou_edge_cases():
    assert item_iou([], [], 10) == 1.0
    assert item_iou([[0, 5]], [], 10) == 0.0
    assert item_iou([], [[0, 5]], 10) == 0.0
    assert item_iou([[0, 4]], [[2, 6]], 10) == pytest.approx(2 / 6)
    # overlapping hard spans count once; a reversed span is empty
    assert item_iou([[0, 4]], [[0, 3], [1, 4], [8, 2]], 10) == 1.0
    # indices past the text still count in the union, as with the official index sets
    assert item_iou([[0, 4]], [[0, 8]], 4) == pytest.approx(4 / 8)


def test_cor_constant_vectors():
    assert item_cor([], [], 10) == 1.0  # both constant
    assert item_cor([(0, 10, 0.5)], [], 10) == 1.0  # both constant at different levels
    assert item_cor([(0, 5, 1.0)], [], 10) == 0.0  # prediction constant, gold not
    assert item_cor([], [(0, 5, 1.0)], 10) == 0.0
    # values equal to 8 decimals count as constant
    assert item_cor([(0, 5, 1.0)], [(0, 5, 0.3), (5, 10, 0.300000001)], 10) == 0.0
    # ...and values that differ in the 8th decimal do not (a mutation audit: round to 7 passed)
    assert item_cor([(0, 5, 1.0)], [(0, 5, 0.5), (5, 10, 0.50000001)], 10) == -1.0


def test_cor_later_overlapping_soft_span_wins():
    gold = [(0, 3, 1.0)]
    assert item_cor(gold, [(0, 6, 0.2), (3, 6, 0.9)], 10) == reference_cor(
        gold, [(0, 6, 0.2), (3, 6, 0.9)], 10
    )
    # [0.2]*3 + [0.9]*3 ranks gold below non-gold; the reverse order gives [0.2]*6
    assert item_cor(gold, [(0, 6, 0.2), (3, 6, 0.9)], 10) < item_cor(gold, [(3, 6, 0.9), (0, 6, 0.2)], 10)


def test_cor_ties_use_average_ranks():
    from scipy.stats import spearmanr

    gold = [(0, 2, 0.5), (2, 4, 1.0)]
    pred = [(0, 3, 0.7), (3, 4, 0.7), (6, 8, 0.1)]
    ref_vec = [0.5, 0.5, 1.0, 1.0, 0, 0, 0, 0]
    pred_vec = [0.7, 0.7, 0.7, 0.7, 0, 0, 0.1, 0.1]
    assert item_cor(gold, pred, 8) == pytest.approx(spearmanr(ref_vec, pred_vec).statistic, abs=1e-15)


def test_negative_indices_wrap_and_overflow_is_reported():
    gold = [(0, 2, 1.0)]
    assert item_cor(gold, [(-2, 2, 0.8)], 6) == reference_cor(gold, [(-2, 2, 0.8)], 6)
    with pytest.raises(OfficialScorerCrash, match="outside a text of 6"):
        item_cor(gold, [(4, 9, 0.8)], 6)


def test_numbers_are_parsed_like_pandas_ujson():
    from pandas.io.json._json import ujson_loads

    rng = np.random.default_rng(0)
    samples = ["0.6666666666666667", "0.6666666666666666", "1e-3", "-2.5E+2", "0.1", "1.0", "3"]
    samples += [repr(float(x)) for x in rng.random(2000)] + [f"{x:.20f}" for x in rng.random(500)]
    for text in samples:
        if "." in text or "e" in text.lower():
            assert ujson_float(text) == ujson_loads(text), text
    # the consequence: two different strings become one value, i.e. a tie
    assert ujson_float("0.6666666666666667") == ujson_float("0.6666666666666666")


@pytest.mark.parametrize(
    "text",
    ["18446744073709551615", "18446744073709551616", "-9223372036854775808", "-9223372036854775809",
     "18446744073709551616.0", "2698690000000000000000e-22", "-9223372036854775809.0", "12345678901234567890.5"],
)  # fmt: skip
def test_a_number_the_official_reader_cannot_hold_is_refused_as_it_refuses_it(text, tmp_path):
    """pandas reads the digits before the point into 64 bits and fails the whole file beyond
    them; `check` said OK and `score` gave a number for a file the official scorer rejects."""
    import io

    from mushroom.data.jsonnum import ujson_int
    from mushroom.data.records import Item
    from mushroom.evaluation.check import check_file

    try:
        pd.read_json(io.StringIO(f'{{"a": {text}}}\n'), lines=True)
        pandas_reads = True
    except ValueError:
        pandas_reads = False
    parse = ujson_float if "." in text or "e" in text else ujson_int
    if pandas_reads:
        parse(text)
        return
    with pytest.raises(ValueError, match="official scorer's reader"):
        parse(text)
    row = dict(VAL_ROWS[0])
    line = json.dumps({"id": row["id"], "soft_labels": [{"start": 0, "end": 1, "prob": 0.5}]})
    path = tmp_path / "p.jsonl"
    path.write_text(line.replace("0.5", text) + "\n")
    item = Item.model_validate(row)
    said = " ".join(str(e) for e in check_file(path, [item]).errors)
    assert "p.jsonl:1: invalid JSON: the number" in said and "official scorer's reader" in said, said


soft_span = st.tuples(
    st.integers(0, 60),
    st.integers(1, 30),
    st.sampled_from([0.1, 1 / 3, 2 / 3, 0.6666666666666666, 0.5, 0.51, 0.9, 1.0, 0.0, 0.25]),
)


@st.composite
def prediction_files(draw):
    rows = []
    for row in VAL_ROWS[:12]:
        n = len(row["model_output_text"])
        spans = draw(st.lists(soft_span, max_size=6))
        soft = [{"start": s % n, "end": min(n, s % n + w), "prob": p} for s, w, p in spans if s % n < n]
        soft = [x for x in soft if x["start"] < x["end"]]
        rows.append({"id": row["id"], "soft_labels": soft})
    mode = draw(st.sampled_from(["soft", "hard", "both"]))
    if mode in ("hard", "both"):
        for row in rows:
            row["hard_labels"] = [[x["start"], x["end"]] for x in row["soft_labels"] if x["prob"] > 0.4]
            if mode == "hard":
                del row["soft_labels"]
    return rows


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=prediction_files())
def test_scores_match_the_official_procedure(tmp_path_factory, rows):
    tmp = tmp_path_factory.mktemp("s")
    gold = write_lines(tmp / "gold.jsonl", VAL_ROWS[:12])
    pred = write_lines(tmp / "pred.jsonl", rows[::-1])
    result = score_files(gold, pred)
    iou, cor = official_scores(gold, pred)
    assert f"{result.mean_iou:.8f}" == f"{iou:.8f}"
    assert f"{result.mean_cor:.8f}" == f"{cor:.8f}"


def test_fast_and_reference_metrics_agree_on_real_gold():
    rng = np.random.default_rng(1)
    for row in VAL_ROWS:
        n = len(row["model_output_text"])
        gold_soft = [(s["start"], s["end"], s["prob"]) for s in row["soft_labels"]]
        pred = []
        for _ in range(rng.integers(0, 5)):
            a = int(rng.integers(0, n))
            pred.append((a, int(min(n, a + rng.integers(1, 20))), float(rng.choice([0.2, 0.5, 0.8, 1.0]))))
        hard = [(s, e) for s, e, p in pred if p > 0.5]
        assert item_iou(row["hard_labels"], hard, n) == reference_iou(row["hard_labels"], hard)
        assert item_cor(gold_soft, pred, n) == pytest.approx(reference_cor(gold_soft, pred, n), abs=1e-12)


def test_gold_against_itself_scores_one(tmp_path):
    result = score_files(VAL_EN, VAL_EN)
    assert result.mean_iou == 1.0 and result.mean_cor == 1.0


def test_label_derivation_is_per_file_like_the_official_scorer(tmp_path):
    gold = write_lines(tmp_path / "g.jsonl", VAL_ROWS[:2])
    only_soft = write_lines(
        tmp_path / "p.jsonl", [{"id": r["id"], "soft_labels": r["soft_labels"]} for r in VAL_ROWS[:2]]
    )
    loaded = read_scoring_file(only_soft, is_gold=False)
    first = loaded.records[VAL_ROWS[0]["id"]]
    assert first.hard == [(25, 31), (45, 49), (69, 83)]  # prob > 0.5, touching spans merged
    only_hard = write_lines(
        tmp_path / "h.jsonl", [{"id": r["id"], "hard_labels": r["hard_labels"]} for r in VAL_ROWS[:2]]
    )
    assert read_scoring_file(only_hard, is_gold=False).records[VAL_ROWS[0]["id"]].soft[0][2] == 1.0
    mixed = write_lines(
        tmp_path / "m.jsonl",
        [{"id": VAL_ROWS[0]["id"], "hard_labels": []}, {"id": VAL_ROWS[1]["id"], "soft_labels": []}],
    )
    assert "official scorer fails" in read_scoring_file(mixed, is_gold=False).warnings[0]
    assert score_files(gold, only_soft).mean_cor == 1.0
    # a line whose keys are misspelled has nothing to derive from: it is said to predict nothing
    typo = write_lines(
        tmp_path / "t.jsonl",
        [
            {"id": VAL_ROWS[0]["id"], "hard_labels": [], "soft_labels": []},
            {"id": VAL_ROWS[1]["id"], "hard_label": [], "soft_label": []},
        ],
    )
    (warning,) = read_scoring_file(typo, is_gold=False).warnings
    assert "1 line with neither, scored as predicting no span (line 2)" in warning
    assert "(is 'soft_label' a misspelling?)" in warning and "derived" not in warning
    # no other line has hard_labels: a line with neither key is still said to predict nothing
    rows = [{"id": r["id"], "soft_labels": []} for r in VAL_ROWS[:2]] + [{"id": VAL_ROWS[2]["id"]}]
    (warning,) = read_scoring_file(write_lines(tmp_path / "n.jsonl", rows), is_gold=False).warnings
    assert (
        "1 line with neither, scored as predicting no span (line 3)" in warning and "derived" not in warning
    )


def test_id_mismatch_is_an_error_naming_the_ids(tmp_path):
    gold = write_lines(tmp_path / "g.jsonl", VAL_ROWS[:3])
    pred = write_lines(
        tmp_path / "p.jsonl", [{"id": VAL_ROWS[0]["id"], "hard_labels": []}, {"id": "x", "hard_labels": []}]
    )
    with pytest.raises(DataError) as info:
        score_files(gold, pred)
    text = str(info.value)
    missing = ", ".join(repr(row["id"]) for row in VAL_ROWS[1:3])
    assert f"no prediction for 2 gold ids: {missing}" in text
    assert "1 id not in the gold file: 'x'" in text


def test_cli_prints_official_lines_last(tmp_path):
    pred = write_lines(
        tmp_path / "p.jsonl", [{"id": r["id"], "hard_labels": r["hard_labels"][:1]} for r in VAL_ROWS]
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mushroom",
            "score",
            str(VAL_EN),
            str(pred),
            "--per-lang",
            "--ci",
            "--json",
            str(tmp_path / "s.json"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = out.stdout.strip().splitlines()
    iou, cor = official_scores(VAL_EN, pred)
    assert lines[-2] == f"IoU: {iou:.8f}"
    assert lines[-1] == f"Cor: {cor:.8f}"
    saved = json.loads((tmp_path / "s.json").read_text())
    assert saved["n"] == 50 and len(saved["items"]) == 50 and saved["iou_ci95"][0] <= saved["iou"]


def test_cli_bad_file_exits_1_with_location(tmp_path):
    pred = write_lines(tmp_path / "p.jsonl", ['{"id": "val-en-1", "hard_labels": [[1, 2, 3]]}'])
    out = subprocess.run(
        [sys.executable, "-m", "mushroom", "score", str(VAL_EN), str(pred)], capture_output=True, text=True
    )
    assert out.returncode == 1
    assert "p.jsonl:1" in out.stderr and "hard_labels.0" in out.stderr


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 30),
    spans=st.lists(st.tuples(st.integers(-12, 40), st.integers(-12, 40)), max_size=4),
    other=st.lists(st.tuples(st.integers(-12, 40), st.integers(-12, 40)), max_size=4),
    probs=st.lists(st.sampled_from([0.1, 0.5, 0.9, 1.0]), min_size=4, max_size=4),
)
def test_any_span_scores_as_the_reference_or_is_an_official_crash(n, spans, other, probs):
    # Reversed spans with a negative end once went through numpy slicing, which wraps.
    assert item_iou(spans, other, n) == reference_iou(spans, other)
    soft = [(s, e, p) for (s, e), p in zip(spans, probs)]
    soft_other = [(s, e, p) for (s, e), p in zip(other, probs)]
    try:
        expected = reference_cor(soft, soft_other, n)
    except IndexError:
        with pytest.raises(OfficialScorerCrash):
            item_cor(soft, soft_other, n)
        return
    got = item_cor(soft, soft_other, n)
    assert got == pytest.approx(expected, abs=1e-12, nan_ok=True)


def test_huge_hard_spans_are_counted_not_enumerated():
    assert item_iou([[0, 4]], [[0, 10**15]], 4) == 4 / 10**15


def test_gold_and_predictions_given_the_other_way_round_is_one_problem(tmp_path):

    gold = write_lines(tmp_path / "g.jsonl", VAL_ROWS[:3])
    pred = write_lines(tmp_path / "p.jsonl", [{"id": r["id"], "hard_labels": []} for r in VAL_ROWS[:3]])
    with pytest.raises(DataError, match="missing on all 3 lines: is this the gold file") as caught:
        score_files(pred, gold)
    assert len(caught.value.problems) == 1


def test_scoring_keeps_a_lines_labels_not_the_line(tmp_path):
    """A gold line holds its answer, tokens and logits; scoring keeps only what it scores.

    A corpus of gold files was held whole while scored (about 18 KB a val item): here each of
    200 lines carries 5,000 logits, 5 MB in all: reading held 34 MB at its peak, and holds
    under 1 MB now, a line at a time.
    """
    gold = tmp_path / "g.jsonl"
    rows = heavy_val_lines(gold)
    size = gold.stat().st_size
    loaded, _, peak = traced(lambda: read_scoring_file(gold, is_gold=True))
    assert len(loaded.records) == 200 and loaded.records[rows[0]["id"]].hard == [
        tuple(s) for s in rows[0]["hard_labels"]
    ]
    assert peak < size / 4, (peak, size)

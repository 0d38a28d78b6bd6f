"""`ensemble` and `stack` against broken inputs: they never write what they did not read."""

import json

import pytest
from cli_helpers import GOLD_ROWS, cli, limited_run
from conftest import VAL_EN, write_lines

from mushroom.errors import MushroomError


@pytest.mark.parametrize(
    ("span", "field"),
    [
        ({"soft_labels": [{"start": 116, "end": 10000, "prob": 0.9}]}, "soft_labels.0"),
        ({"soft_labels": [{"start": 9, "end": 4, "prob": 0.9}]}, "soft_labels.0"),
        ({"hard_labels": [[3, 2]]}, "hard_labels.0"),
        ({"hard_labels": [[-2, 3]]}, "hard_labels.0"),
    ],
)
@pytest.mark.parametrize("with_items", [True, False])
def test_ensemble_refuses_invalid_spans_naming_file_line_id_field(tmp_path, capsys, span, field, with_items):
    rows = [{"id": r["id"], "hard_labels": r["hard_labels"]} for r in GOLD_ROWS]
    rows[3] = {"id": rows[3]["id"], "hard_labels": [], **span}
    bad = write_lines(tmp_path / "bad.jsonl", rows)
    good = write_lines(tmp_path / "good.jsonl", [{"id": r["id"], "hard_labels": []} for r in GOLD_ROWS])
    out = tmp_path / "ens.jsonl"
    extra = ["--items", VAL_EN] if with_items else []
    code, _, err = cli(capsys, "ensemble", good, bad, "--out", out, *extra)
    assert code == 1
    assert f"bad.jsonl:4: id '{GOLD_ROWS[3]['id']}': field '{field}'" in err
    assert not out.exists()


def test_ensemble_threshold_and_unknown_ids(tmp_path, capsys):
    pred = write_lines(tmp_path / "p.jsonl", [{"id": "mine-1", "hard_labels": [[0, 3]]}])
    code, _, err = cli(capsys, "ensemble", pred, "--out", tmp_path / "o.jsonl", "--threshold", "1.5")
    assert code == 2 and "--threshold" in err
    # NaN compares false with any bound: it was "should be less than or equal to 1"
    code, _, err = cli(capsys, "ensemble", pred, "--out", tmp_path / "o.jsonl", "--threshold", "nan")
    assert code == 2 and "nan: a number from 0 to 1" in err, err
    code, _, err = cli(capsys, "stack", "fit", pred, "--out", tmp_path / "s.json", "--l2", "nan")
    assert code == 2 and "nan: a number, 0 or more" in err, err  # it was let through to the fit
    code, _, err = cli(capsys, "ensemble", pred, "--out", tmp_path / "o.jsonl")
    assert code == 2 and "pass --items" in err and "id 'mine-1' is not" in err
    # a shipped file with one id it does not hold names that id
    rows = [{"id": r["id"], "hard_labels": []} for r in GOLD_ROWS] + [
        {"id": "val-en-9999", "hard_labels": []}
    ]
    pred = write_lines(tmp_path / "q.jsonl", rows)
    code, _, err = cli(capsys, "ensemble", pred, pred, "--out", tmp_path / "o.jsonl")
    assert code == 2 and "id 'val-en-9999' is not" in err, err
    # an empty items file: every prediction was listed as "not among the items"
    empty = write_lines(tmp_path / "empty.jsonl", [])
    code, _, err = cli(capsys, "ensemble", pred, "--out", tmp_path / "o.jsonl", "--items", empty)
    assert code == 1 and "empty.jsonl: no items" in err and "not among" not in err, err
    # a group with no command shows its commands, as `mushroom models` does ("Missing command.")
    code, out, err = cli(capsys, "stack")
    assert code == 2 and "fit" in out and "apply" in out, (out, err)


@pytest.mark.parametrize(
    ("rows", "code", "needle"),
    [
        ([], 1, "no predictions in the file"),
        ([{"id": r["id"]} for r in GOLD_ROWS], 1, "neither hard_labels nor soft_labels given"),
        (
            [{"id": r["id"], "soft_labels": [{"start": 0, "end": 2, "prob": "0.5"}]} for r in GOLD_ROWS],
            1,
            "soft_labels.0.prob",
        ),
    ],
    ids=["empty", "ids-only", "string-prob"],
)
def test_ensemble_never_writes_what_it_did_not_read(tmp_path, capsys, rows, code, needle):
    pred = write_lines(tmp_path / "p.jsonl", rows)
    out = tmp_path / "o.jsonl"
    got, _, err = cli(capsys, "ensemble", pred, "--out", out)
    assert got == code and needle in err
    assert not out.exists()


def test_stack_apply_names_a_json_file_that_is_no_stack(tmp_path, capsys):
    run = limited_run(tmp_path, capsys)
    config = run / "config.json"
    code, _, err = cli(
        capsys, "stack", "apply", config, f"lexical={run}", "--out", tmp_path / "o", "--split", "val"
    )
    assert code == 1
    assert f"{config}: not a stack.json (fit one with `mushroom stack fit`)" in err
    assert "Field required" not in err and not (tmp_path / "o").exists()
    # a predictions file (JSON Lines) or an empty file is not JSON at all: named the same way
    pred = run / "predictions" / "mushroom.en-val.v2.jsonl"
    (tmp_path / "empty.json").write_text("")
    for path, what in ((pred, "not one JSON value"), (tmp_path / "empty.json", "an empty file")):
        args = ["stack", "apply", path, f"lexical={run}", "--out", tmp_path / "o", "--split", "val"]
        code, _, err = cli(capsys, *args)
        assert code == 1 and f"{path}: not a stack.json ({what}: invalid JSON" in " ".join(err.split()), err


def _english_stack(tmp_path, capsys):
    """A lexical run on English val, and a stack fitted on it as member `lex`: (run, stack.json)."""
    run = tmp_path / "run"
    code, _, err = cli(capsys, "detect", "--split", "val", "--lang", "en", "--out", run, "--quiet")
    assert code == 0, err
    stack = tmp_path / "stack.json"
    code, _, err = cli(capsys, "stack", "fit", f"lex={run}", "--lang", "en", "--out", stack)
    assert code == 0, err
    return run, stack


def test_a_hand_edited_stack_json_is_named_field_by_field_not_an_internal_error(tmp_path, capsys):
    """An audit edited stack.json: an unknown hard-label source and a cut logistic model ended
    in "internal error" (exit 70), a threshold of 5 was taken."""
    run, stack = _english_stack(tmp_path, capsys)
    saved = json.loads(stack.read_text())
    linear = saved["scorer"]["linear"] if saved["scorer"]["kind"] == "blend" else saved["scorer"]
    tree = saved["scorer"]["trees"]["trees"][0]
    edits = [
        ({"hard_from": "zzz"}, "hard_from: 'zzz' is neither 'stack' nor a member (lex)"),
        ({"hard_sources": {"en": "zzz"}}, "hard_sources.en: 'zzz' is neither"),
        ({"threshold": 5}, "threshold"),
        ({"thresholds": {"en": -1}}, "thresholds.en"),
        ({"features": saved["features"][:-1]}, "its logistic model has"),
        # the empty rule was not checked: a broadcast error (exit 70), or a zero scale that
        # changed which items were emptied with numpy's warning as the only word
        ({"empty_rule": {"coef": [1.0], "mean": [0, 0, 0], "scale": [1, 1, 1]}}, "coef has 1 weights"),
        ({"empty_rule": {"coef": [0, 0, 0, 0], "mean": [0, 0, 0], "scale": [0, 1, 1]}}, "above 0"),
        ({"empty_rule": {"coef": [0, 0], "mean": [0], "scale": [1]}}, "this model reads 3 features"),
    ]
    apply = ("stack", "apply", stack, f"lex={run}", "--out", tmp_path / "o", "--split", "val", "--lang", "en")
    for edit, needle in edits:
        stack.write_text(json.dumps({**saved, **edit}))
        code, _, err = cli(capsys, *apply)
        said = " ".join(err.split())
        assert code == 1 and needle in said and str(stack) in said, (edit, err)
        assert "internal error" not in said
    stack.write_text(json.dumps({**saved, "languages": ["en", "xx"]}))  # it said "this version makes"
    code, _, err = cli(capsys, *apply)
    assert code == 2 and "a stack.json edited by hand or saved by another version" in " ".join(err.split())
    cut = {k: v for k, v in saved.items() if k != "threshold"}  # "not a stack.json" named nothing
    stack.write_text(json.dumps(cut))
    code, _, err = cli(capsys, *apply)
    assert code == 1 and "field 'threshold': missing from the stack.json: threshold" in " ".join(err.split())
    leaf = tree["leaf"].index(True)
    tree["left"][leaf] = 10**20  # never read, but it made the arrays objects: an IndexError
    stack.write_text(json.dumps(saved))
    code, _, err = cli(capsys, *apply)
    assert code == 1 and "children or features hold a number no tree has" in " ".join(err.split()), err
    tree["left"][leaf] = 0
    linear["coef"] = linear["coef"][:3]
    tree["left"][0] = 0  # a loop back to the root
    stack.write_text(json.dumps(saved))
    code, _, err = cli(capsys, *apply)
    said = " ".join(err.split())
    assert code == 1 and "coef has 3 weights" in said and "node 0: its children" in said, err
    assert not (tmp_path / "o").exists()


def test_where_a_runs_files_are_and_an_option_its_version_lacked_are_no_other_settings(tmp_path):
    """A replay's responses file differs between a val and a test run, an items run's sources are
    its files, and an older run lacks options added since: none of it is another setting."""
    import json

    from mushroom.combine.stack import Member, StackModel
    from mushroom.runs.stack import settings_changes

    def run(name, options, **extra):
        folder = tmp_path / name
        folder.mkdir()
        config = {"job": "detect", "detector": "llm", "options": options, "sources": ["deepseek-r1"], **extra}
        (folder / "config.json").write_text(json.dumps({"config": config, "config_hash": "x"}))
        return Member("m", folder)

    fitted = run("val", {"backend": {"kind": "replay", "responses": "val.jsonl"}, "prompt": "a"})
    model = StackModel.model_construct(member_settings={"m": fitted.settings()})
    same = run("test", {"backend": {"kind": "replay", "responses": "test.jsonl"}, "prompt": "a", "new": 1})
    assert settings_changes(model, [same]) == []
    items = run(
        "items", {"backend": {"kind": "replay", "responses": "x.jsonl"}, "prompt": "a"}, items="i.jsonl"
    )
    assert settings_changes(model, [items]) == []
    other = run("other", {"backend": {"kind": "replay", "responses": "x.jsonl"}, "prompt": "b"})
    [said] = settings_changes(model, [other])
    assert 'options.prompt: "a" -> "b"' in said


def test_stack_fit_says_when_two_members_are_one_run(tmp_path, capsys):
    run, _ = _english_stack(tmp_path, capsys)
    code, _, err = cli(
        capsys, "stack", "fit", f"a={run}", f"b={run}", "--lang", "en", "--out", tmp_path / "s.json"
    )
    assert code == 0 and "members 'a' and 'b' are the same run" in " ".join(err.split()), err


def test_a_stack_applied_to_a_language_it_was_not_fitted_on_says_so(tmp_path, capsys):
    _, stack = _english_stack(tmp_path, capsys)
    german = tmp_path / "de"
    code, _, err = cli(capsys, "detect", "--split", "val", "--lang", "de", "--out", german, "--quiet")
    assert code == 0, err
    args = [
        "stack",
        "apply",
        stack,
        f"lex={german}",
        "--split",
        "val",
        "--lang",
        "de",
        "--out",
        tmp_path / "a",
    ]
    code, out, err = cli(capsys, *args)
    said = " ".join(out.split())
    assert code == 0 and "de: the stack was not fitted on it (fitted on en)" in said, out + err
    assert "their hard labels come from its second stack, fitted without language columns" in said, said


def test_stack_fit_never_writes_into_a_member_run(tmp_path, capsys):
    """`stack fit --out MEMBER/predictions/mushroom.en-val.v2.jsonl` replaced its predictions."""
    run, _ = _english_stack(tmp_path, capsys)
    pred = run / "predictions" / "mushroom.en-val.v2.jsonl"
    before = pred.read_bytes()
    code, _, err = cli(capsys, "stack", "fit", f"lex={run}", "--lang", "en", "--out", pred)
    assert code == 2 and "read from the input folder" in err and pred.read_bytes() == before, err
    # a folder of loose prediction files: a stack.json beside them is fine, over one is not
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / pred.name).write_bytes(before)
    code, _, err = cli(capsys, "stack", "fit", f"lex={plain}", "--lang", "en", "--out", plain / "stack.json")
    assert code == 0, err
    code, _, err = cli(capsys, "stack", "fit", f"lex={plain}", "--lang", "en", "--out", plain / pred.name)
    assert (
        code == 2
        and "is named as the prediction files read from the input folder" in err
        and (plain / pred.name).read_bytes() == before
    )


def test_a_member_run_made_with_other_settings_than_the_fitted_one_is_warned_of(tmp_path, capsys):
    """A stack applied to a run made with another threshold gave other answers, silently."""
    run, stack = _english_stack(tmp_path, capsys)
    other = tmp_path / "other"
    args = ["detect", "--split", "val", "--lang", "en", "--quiet", "-o", "threshold=0.6"]
    code, _, err = cli(capsys, *args, "-o", "calibration=null", "--out", other)
    assert code == 0, err
    apply = ["stack", "apply", stack, "--split", "val", "--lang", "en"]
    code, _, err = cli(capsys, *apply, f"lex={other}", "--out", tmp_path / "a")
    said = " ".join(err.split())
    assert code == 0 and "member 'lex': " in said and "was made with other settings" in said, said
    assert "options.threshold: 0.25 -> 0.6" in said and 'options.calibration: "default" -> null' in said
    code, _, err = cli(capsys, *apply, f"lex={run}", "--out", tmp_path / "b")
    assert code == 0 and "other settings" not in err, err


def test_stack_apply_with_the_wrong_members_leaves_no_run_folder(tmp_path, capsys):
    run, stack = _english_stack(tmp_path, capsys)
    out = tmp_path / "o"
    for members, message in (
        ([f"other={run}"], "fitted on members ['lex']; got ['other']"),
        ([f"lex={tmp_path / 'nowhere'}"], "nowhere: no such folder; a member is a run folder"),
    ):
        code, _, err = cli(capsys, "stack", "apply", stack, *members, "--split", "val", "--out", out)
        assert code == 2 and message in err, err
        assert not out.exists()
    # a later member that is no folder was unsaid: the first member's missing files were named
    code, _, err = cli(capsys, "stack", "fit", f"a={run}", f"b={stack}", "--out", tmp_path / "s2.json")
    assert code == 2 and f"member 'b': {stack}: is not a folder" in err, err


def test_an_unlabelled_split_is_not_swept_or_fitted_on(tmp_path, capsys):
    # Scoring an item without gold treats it as "nothing hallucinated": a sweep on test said
    # "best IoU 1.0000" and a stack fitted on test saved threshold 0.05, both with exit 0.
    run = tmp_path / "lex"
    code, _, err = cli(
        capsys, "detect", "--split", "test", "--lang", "en", "--limit", "3", "--out", run, "--quiet"
    )
    assert code == 0, err
    code, out, err = cli(capsys, "sweep", run, "--split", "test", "--svg", tmp_path / "s.svg")
    assert (
        code == 2
        and "needs gold labels" in err
        and "split 'test' has none (1902 items)" in err
        and "IoU" not in out
    )
    assert not (tmp_path / "s.svg").exists()
    stack = tmp_path / "stack.json"
    code, _, err = cli(
        capsys, "stack", "fit", f"lex={run}", "--split", "test", "--lang", "en", "--out", stack
    )
    assert code == 2 and "fitting a stack needs gold labels" in err and not stack.exists()
    code, _, err = cli(capsys, "stack", "fit", f"lex={run}", "--folds", "1", "--out", stack)
    assert code == 2 and "--folds" in err


def test_an_ensemble_never_overwrites_its_input_and_names_a_file_with_other_items(tmp_path, capsys):
    a = limited_run(tmp_path, capsys, "a")
    b = limited_run(tmp_path, capsys, "b", "--option", "threshold=0.5")
    pa, pb = (r / "predictions" / "mushroom.en-val.v2.jsonl" for r in (a, b))
    before = pa.read_bytes()
    code, _, err = cli(capsys, "ensemble", pa, pb, "--out", pa)
    assert code == 2 and "is an input of this command" in err and pa.read_bytes() == before
    # nor the --items file, nor an official data file (each was replaced by the vote, exit 0)
    items = tmp_path / "items.jsonl"
    items.write_bytes(VAL_EN.read_bytes())
    for out, said in (
        (items, "is an input of this command"),
        (VAL_EN, "the folder of the official data files"),
    ):
        code, _, err = cli(capsys, "ensemble", pa, pb, "--items", items, "--out", out)
        assert code == 2 and said in " ".join(err.split()) and out.read_bytes() == VAL_EN.read_bytes(), err
    # nor a copy of the data outside the data folder (an audit replaced a gold file, exit 0),
    # whatever writes: ensemble, score --json
    copy = tmp_path / "datacopy" / "val" / "mushroom.en-val.v2.extra.jsonl"
    copy.parent.mkdir(parents=True)
    copy.write_bytes(VAL_EN.read_bytes())
    for args in (("ensemble", pa, pb, "--out", copy), ("score", VAL_EN, pa, "--json", copy)):
        code, _, err = cli(capsys, *args)
        said = " ".join(err.split())
        assert code == 2 and f"{copy} holds items (answers with model_output_text)" in said, err
        assert copy.read_bytes() == VAL_EN.read_bytes()
    short = tmp_path / "short.jsonl"
    short.write_text("".join(pb.read_text().splitlines(keepends=True)[:3]))
    code, _, err = cli(capsys, "ensemble", pa, short, "--out", tmp_path / "e.jsonl")
    assert code == 1 and f"{short}: field 'id': covers other items than {pa}: no prediction for" in err


def test_a_finished_stack_apply_folder_is_not_taken_over_by_another_run(tmp_path, capsys):
    """It has no item ledger: it was taken for a run that never started, and overwritten."""
    run, stack = _english_stack(tmp_path, capsys)
    out = tmp_path / "applied"
    code, _, err = cli(
        capsys, "stack", "apply", stack, f"lex={run}", "--split", "val", "--lang", "en", "--out", out
    )
    assert code == 0, err
    # the stack was fitted on these very items: said beside its scores (the title said it only
    # for a stack whose `fitted_on` was the bare split name, which `stack fit` never writes)
    said = " ".join(err.split())
    assert "the scores below are in-sample for en" in said and "cross-validated scores: en IoU 0." in said
    written = (out / "mushroom.en-val.v2.jsonl").read_text()
    code, _, err = cli(
        capsys, "detect", "--split", "val", "--lang", "en", "--limit", "3", "--out", out, "--quiet"
    )
    assert code == 2 and "holds a run with another config" in err, err
    assert (out / "mushroom.en-val.v2.jsonl").read_text() == written
    # the same stack apply again resumes its folder
    code, _, err = cli(
        capsys, "stack", "apply", stack, f"lex={run}", "--split", "val", "--lang", "en", "--out", out
    )
    assert code == 0, err


def test_a_member_named_after_another_detector_than_its_runs_is_refused(tmp_path, capsys):
    """`lexical=SEMANTIC_RUN` was fitted, and semantic's score reported as lexical's."""
    run = tmp_path / "lex"
    code, _, err = cli(
        capsys, "detect", "--split", "val", "--lang", "en", "--limit", "5", "--out", run, "--quiet"
    )
    assert code == 0, err
    code, _, err = cli(
        capsys, "stack", "fit", f"semantic={run}", "--lang", "en", "--out", tmp_path / "s.json"
    )
    assert code == 2 and "member 'semantic': " in err and "is a run of the 'lexical' detector" in err
    assert not (tmp_path / "s.json").exists()


def test_stack_fit_and_apply_refuse_a_member_span_past_the_answer(tmp_path, capsys):
    """`ensemble` refused a hard label past the answer's end; `stack` fitted and applied it."""
    import json

    run, stack = _english_stack(tmp_path, capsys)
    pred = run / "predictions" / "mushroom.en-val.v2.jsonl"
    rows = [json.loads(line) for line in pred.read_text().splitlines()]
    n = len(GOLD_ROWS[1]["model_output_text"])
    rows[1]["hard_labels"] = [[n - 2, n + 10]]
    write_lines(pred, rows)
    said = f"mushroom.en-val.v2.jsonl:2: id '{GOLD_ROWS[1]['id']}': field 'hard_labels.0': span [{n - 2}, {n + 10})"
    code, _, err = cli(capsys, "stack", "fit", f"lex={run}", "--lang", "en", "--out", tmp_path / "s2.json")
    assert code == 1 and said in " ".join(err.split()), err
    out = tmp_path / "applied"
    code, _, err = cli(
        capsys, "stack", "apply", stack, f"lex={run}", "--split", "val", "--lang", "en", "--out", out
    )
    assert code == 1 and said in " ".join(err.split()), err  # with its line, as fit says it


def test_stack_apply_refuses_a_repeated_id_in_a_member_file_even_after_the_last_item(tmp_path, capsys):
    """The stream read a member's file only as far as its items: a repeat appended at the end
    was never read, and the output took the first line's, where every other command refuses."""
    import json

    run, stack = _english_stack(tmp_path, capsys)
    pred = run / "predictions" / "mushroom.en-val.v2.jsonl"
    rows = [json.loads(line) for line in pred.read_text().splitlines()]
    write_lines(pred, [*rows, {**rows[1], "soft_labels": [], "hard_labels": []}])
    out = tmp_path / "applied"
    code, _, err = cli(
        capsys, "stack", "apply", stack, f"lex={run}", "--split", "val", "--lang", "en", "--out", out
    )
    said = " ".join(err.split())
    line = len(rows) + 1
    assert (
        code == 1
        and f"mushroom.en-val.v2.jsonl:{line}: field 'id': duplicate id {rows[1]['id']!r} (first on line 2)"
        in said
    ), said


def test_an_input_lacking_items_of_the_items_file_is_named_not_the_output(tmp_path, capsys):
    items = write_lines(tmp_path / "items.jsonl", GOLD_ROWS[:2])
    short = write_lines(
        tmp_path / "p.jsonl", [{"id": GOLD_ROWS[0]["id"], "soft_labels": [], "hard_labels": []}]
    )
    out = tmp_path / "vote.jsonl"
    code, _, err = cli(capsys, "ensemble", short, "--items", items, "--out", out, "--threshold", "0.5")
    said = " ".join(err.split())
    assert (
        code == 1
        and f"{short}: field 'id': no prediction for 1 of 2 items: '{GOLD_ROWS[1]['id']}' (the items of --items)"
        in said
        and not out.exists()
    ), err


def test_stack_apply_writes_beside_its_stack_json_but_not_over_a_users_prediction_file(tmp_path, capsys):
    """The refusal of a folder whose files a run would replace took a stack.json beside
    `stack apply`'s --out (which it never writes) for one."""
    run, stack = _english_stack(tmp_path, capsys)
    out = tmp_path / "applied"
    out.mkdir()
    (out / "stack.json").write_bytes(stack.read_bytes())
    apply = ["stack", "apply", out / "stack.json", f"lex={run}", "--split", "val", "--lang", "en"]
    code, _, err = cli(capsys, *apply, "--out", out)
    assert code == 0, err
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "mushroom.en-val.v2.jsonl").write_text("my own")
    code, _, err = cli(capsys, *apply, "--out", mine)
    assert code == 2 and "this run would replace 'mushroom.en-val.v2.jsonl'" in " ".join(err.split()), err
    assert (mine / "mushroom.en-val.v2.jsonl").read_text() == "my own"
    # detect writes its files into predictions/: the same file at the top is no clash
    code, _, err = cli(
        capsys, "detect", "--split", "val", "--lang", "en", "--limit", "1", "--out", mine, "--quiet"
    )
    assert code == 0 and (mine / "mushroom.en-val.v2.jsonl").read_text() == "my own", err


def _items_run(folder, capsys):
    """`detect --items items.jsonl --contexts ctx.jsonl --out run`, run in `folder` (the working one)."""
    from conftest import VAL_EN

    rows = [json.loads(line) for line in VAL_EN.read_text().splitlines()[:2]]
    write_lines(folder / "items.jsonl", rows)
    write_lines(folder / "ctx.jsonl", [{"id": r["id"], "context": "Some background."} for r in rows])
    code, _, err = cli(
        capsys, "detect", "--items", "items.jsonl", "--contexts", "ctx.jsonl", "--out", "run", "--quiet"
    )
    assert code == 0, err


def test_no_output_replaces_the_items_or_contexts_file_an_input_run_was_made_from(
    tmp_path, capsys, monkeypatch
):
    """`ensemble RUN RUN --out ctx.jsonl` and `report ... --contexts ctx.jsonl --out ctx.jsonl`
    wrote over the contexts file the run was made from, exit 0."""
    monkeypatch.chdir(tmp_path)  # the run records its files' paths as given
    _items_run(tmp_path, capsys)
    before = (tmp_path / "ctx.jsonl").read_bytes()
    pred = "run/predictions/mushroom.en-items.jsonl"
    for args in (
        ["ensemble", "run", "run", "--out", "ctx.jsonl"],
        ["ensemble", pred, pred, "--items", "items.jsonl", "--out", "ctx.jsonl"],
        ["report", "run", "--items", "items.jsonl", "--contexts", "ctx.jsonl", "--out", "ctx.jsonl"],
    ):
        code, _, err = cli(capsys, *args)
        assert code == 2 and "ctx.jsonl" in err and ("was made from" in err or "is an input" in err), (
            args,
            err,
        )
    assert (tmp_path / "ctx.jsonl").read_bytes() == before


def test_the_items_file_a_run_was_made_from_is_kept_from_another_folder(tmp_path, capsys, monkeypatch):
    """The run records `--items items.jsonl` as given; from another folder that name was read
    against the new working folder, and `ensemble work/run ... --out work/items.jsonl` replaced it."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    _items_run(work, capsys)
    monkeypatch.chdir(tmp_path)
    before = {name: (work / name).read_bytes() for name in ("items.jsonl", "ctx.jsonl")}
    for name in before:
        code, _, err = cli(capsys, "ensemble", "work/run", "work/run", "--out", f"work/{name}")
        assert code == 2 and "was made from" in err, (name, err)
    assert {name: (work / name).read_bytes() for name in before} == before


def test_a_report_of_a_run_whose_contexts_file_is_gone_names_that_file(tmp_path, capsys, monkeypatch):
    """It asked for the items file, which was there; given it, the page had no contexts, unsaid."""
    monkeypatch.chdir(tmp_path)
    _items_run(tmp_path, capsys)
    # the files it reads are named: their paths come from the run's config.json
    code, _, err = cli(capsys, "report", "run", "--out", "r.html")
    said = " ".join(err.split())
    assert code == 0 and f"and its context files {tmp_path / 'ctx.jsonl'} from there" in said, said
    # given --items alone, the page showed no contexts, though the run's file was there
    code, _, err = cli(capsys, "report", "run", "--items", "items.jsonl", "--out", "r.html")
    assert code == 0 and "Some background." in (tmp_path / "r.html").read_text(), err
    (tmp_path / "ctx.jsonl").unlink()
    code, _, err = cli(capsys, "report", "run", "--out", "r.html")
    said = " ".join(err.split())
    assert code == 2 and f"its context file {tmp_path / 'ctx.jsonl'} is gone" in said, said
    assert "--contexts CTX.jsonl" in said and "give its items file" not in said, said
    code, _, err = cli(capsys, "report", "run", "--items", "items.jsonl", "--out", "r.html")
    assert code == 0 and "now gone: the page shows none" in " ".join(err.split()), err


def test_an_ensemble_takes_detect_items_run_folders(tmp_path, capsys, monkeypatch):
    """Their folders were "no val or test prediction files"; only their files were taken."""
    monkeypatch.chdir(tmp_path)
    rows = [json.loads(line) for line in VAL_EN.read_text().splitlines()[:3]]
    write_lines(tmp_path / "items.jsonl", rows)
    for name, threshold in (("a", "0.3"), ("b", "0.6")):
        code, _, err = cli(
            capsys, "detect", "--items", "items.jsonl", "--contexts", "none", "--out", name, "-o",
            f"threshold={threshold}", "--quiet",
        )  # fmt: skip
        assert code == 0, err
    code, _, err = cli(capsys, "ensemble", "a", "b", "--items", "items.jsonl", "--out", "vote.jsonl")
    assert code == 0, err
    assert len((tmp_path / "vote.jsonl").read_text().splitlines()) == 3


def _stack_and_items_member(tmp_path, capsys):
    """A stack fitted on English val, and a lexical `detect --items` run of 4 of its items:
    (stack.json, the items' rows, items.jsonl, the run's folder)."""
    _, stack = _english_stack(tmp_path, capsys)
    rows = [json.loads(line) for line in VAL_EN.read_text().splitlines()[:4]]
    items = write_lines(tmp_path / "items.jsonl", rows)
    member = tmp_path / "member"
    code, _, err = cli(capsys, "detect", "--items", items, "--contexts", "none", "--out", member, "--quiet")
    assert code == 0, err
    return stack, rows, items, member


def test_a_stack_applied_to_an_items_file_is_scored_and_reported_as_its_folder(tmp_path, capsys):
    """`report` said it was "not a `detect --items` run", and `score` that it was of the test
    split (its config said so): only its file could be read."""
    stack, rows, items, member = _stack_and_items_member(tmp_path, capsys)
    applied = tmp_path / "applied"
    code, _, err = cli(capsys, "stack", "apply", stack, f"lex={member}", "--items", items, "--out", applied)
    assert code == 0, err
    # val items under another file's name are still the items it was fitted on: --split val said so
    said = " ".join(err.split())
    assert "4 of the en items are val items the stack was fitted on" in said and "in-sample" in said, said
    assert json.loads((applied / "config.json").read_text())["config"]["split"] == "items"
    code, out, err = cli(capsys, "score", items, applied)
    assert code == 0 and out.splitlines()[-2].startswith("IoU:"), err
    code, _, err = cli(capsys, "report", applied, "--items", items, "--out", tmp_path / "r.html")
    assert code == 0 and (tmp_path / "r.html").is_file(), err
    # a folder made before its split was named "items" (its config said "test") resumes
    from mushroom.runs.confighash import config_hash

    saved = json.loads((applied / "config.json").read_text())
    older = {**saved["config"], "split": "test"}
    (applied / "config.json").write_text(json.dumps({"config": older, "config_hash": config_hash(older)}))
    code, _, err = cli(capsys, "stack", "apply", stack, f"lex={member}", "--items", items, "--out", applied)
    assert code == 0, err
    # and voted with a detect --items run, each folder as it is
    code, _, err = cli(
        capsys, "ensemble", applied, member, "--items", items, "--out", tmp_path / "vote.jsonl"
    )
    assert code == 0 and len((tmp_path / "vote.jsonl").read_text().splitlines()) == 4, err


def test_an_answer_edited_since_a_run_is_refused_not_read_with_that_runs_spans(tmp_path, capsys):
    """`stack apply`, `ensemble` and `report` of a `detect --items` run, given the items file
    after an answer was edited, exited 0 with the old answer's spans on the new words."""
    stack, rows, items, member = _stack_and_items_member(tmp_path, capsys)
    edited = dict(rows[1], model_output_text=rows[1]["model_output_text"][::-1])  # same length
    write_lines(items, [rows[0], edited, *rows[2:]])
    pred = member / "predictions" / "mushroom.en-items.jsonl"
    for args in (
        ["stack", "apply", stack, f"lex={member}", "--items", items, "--out", tmp_path / "applied"],
        ["ensemble", member, member, "--items", items, "--out", tmp_path / "vote.jsonl"],
        ["ensemble", pred, "--items", items, "--out", tmp_path / "vote.jsonl"],
        ["report", member, "--items", items, "--out", tmp_path / "r.html"],
        ["score", items, member],
        ["compare", member, member, "--items", items, "--eval-dir", tmp_path / "eval"],
        ["sweep", member, "--items", items, "--svg", tmp_path / "s.svg"],
    ):
        code, _, err = cli(capsys, *args)
        told = " ".join(err.split())
        assert (
            code == 1
            and f"the answer of 1 of its items, {rows[1]['id']!r}, is not the one its run computed it on"
            in told
        ), (
            args,
            err,
        )
    assert not any((tmp_path / n).exists() for n in ("applied", "vote.jsonl", "r.html", "eval", "s.svg"))
    # the run's own command computes the edited item again; then all is well
    code, _, err = cli(capsys, "detect", "--items", items, "--contexts", "none", "--out", member, "--quiet")
    assert code == 0, err
    code, _, err = cli(
        capsys, "stack", "apply", stack, f"lex={member}", "--items", items, "--out", tmp_path / "applied"
    )
    assert code == 0, err


def test_a_member_name_must_be_one_a_table_and_a_file_can_hold(tmp_path):
    """`=RUN` fitted a stack with a member named '' (an empty column header, then `stack apply
    =RUN`), and 'a|b=RUN' broke the Markdown tables."""
    from mushroom.combine.stack.members import parse_members

    for spec in ("=runs/x", "a|b=runs/x", "a/b=runs/x"):
        with pytest.raises(MushroomError, match="member name .*; give another NAME"):
            parse_members([spec])
    for spec in ("..", "runs/we|ird"):  # named after the folder
        with pytest.raises(MushroomError, match="the name is the folder's: name it with NAME=PATH"):
            parse_members([spec])
    with pytest.raises(MushroomError, match="no run folder after '='"):  # it read the current folder
        parse_members(["lexical="])
    (tmp_path / "lex-1").mkdir()
    assert [m.name for m in parse_members([str(tmp_path / "lex-1"), f"sem_2={tmp_path}"])] == [
        "lex-1",
        "sem_2",
    ]
    # names no file could have, but a stack fitted with them is applied by them: kept
    for folder in ("a", "b", "détection"):
        (tmp_path / folder).mkdir()
    kept = parse_members(
        [f"llm+ctx={tmp_path / 'a'}", f"lex v2={tmp_path / 'b'}", str(tmp_path / "détection")]
    )
    assert [m.name for m in kept] == ["llm+ctx", "lex v2", "détection"]


def test_a_stack_apply_stopped_part_way_does_only_the_languages_it_had_not_written(
    tmp_path, capsys, monkeypatch
):
    """Its Ctrl-C said the same command would go on where it stopped; the re-run did every
    language again (a kill/resume audit: 106 s against 108 s for 20,000 items)."""
    import os

    run = tmp_path / "run"
    args = ("--split", "val", "--lang", "en", "--lang", "de")
    code, _, err = cli(capsys, "detect", *args, "--out", run, "--quiet")
    assert code == 0, err
    stack = tmp_path / "stack.json"
    code, _, err = cli(capsys, "stack", "fit", f"lex={run}", "--lang", "en", "--lang", "de", "--out", stack)
    assert code == 0, err
    out = tmp_path / "applied"
    apply = ("stack", "apply", stack, f"lex={run}", *args, "--out", out)
    code, _, err = cli(capsys, *apply)
    assert code == 0, err
    en, de = out / "mushroom.en-val.v2.jsonl", out / "mushroom.de-val.v2.jsonl"
    first = {p: p.read_text() for p in (en, de)}
    de.unlink()  # as a run stopped after English leaves it
    old = en.stat().st_mtime_ns
    code, shown, err = cli(capsys, *apply)
    said = " ".join((shown + err).split())
    assert code == 0 and "resuming: en written by an earlier run of the same command" in said, said
    assert "wrote 1 prediction file to" in said and "(1 kept from the earlier run)" in said, said
    assert en.stat().st_mtime_ns == old and {p: p.read_text() for p in (en, de)} == first
    assert json.loads((out / "scores.json").read_text())  # both languages scored again
    # a member run again since the file was written: its language is done again
    member = run / "predictions" / "mushroom.en-val.v2.jsonl"
    later = en.stat().st_mtime + 5
    os.utime(member, (later, later))
    code, shown, err = cli(capsys, *apply)
    assert code == 0 and "resuming: de written" in " ".join((shown + err).split())
    assert en.stat().st_mtime_ns != old and en.read_text() == first[en]
    # the same command from another folder, its member spelt relative to it, resumes too
    de.unlink()
    earlier = en.stat().st_mtime - 60  # the member as it was before en was written
    os.utime(member, (earlier, earlier))
    monkeypatch.chdir(tmp_path)
    code, shown, err = cli(capsys, "stack", "apply", "stack.json", "lex=run", *args, "--out", out)
    assert code == 0 and "resuming: en written" in " ".join((shown + err).split()), err


def test_a_vote_of_one_run_says_that_it_loses_the_runs_probabilities(tmp_path, capsys):
    """Each probability became 1.0 and Cor fell (0.39 -> 0.36 in an audit), without a word."""
    rows = [{"id": r["id"], "soft_labels": [{"start": 0, "end": 2, "prob": 0.7}]} for r in GOLD_ROWS]
    pred = write_lines(tmp_path / "p.jsonl", rows)
    code, _, err = cli(capsys, "ensemble", pred, "--out", tmp_path / "o.jsonl")
    said = " ".join(err.split())
    assert code == 0 and "one run: each character's vote share is 0 or 1" in said, said
    written = json.loads((tmp_path / "o.jsonl").read_text().splitlines()[0])
    assert written["soft_labels"][0]["prob"] == 1.0
    code, _, err = cli(capsys, "ensemble", pred, "--out", tmp_path / "m.jsonl", "--soft", "mean")
    assert code == 0 and "one run" not in err
    assert json.loads((tmp_path / "m.jsonl").read_text().splitlines()[0])["soft_labels"][0]["prob"] == 0.7


def test_stack_apply_into_a_members_own_folder_is_refused_as_such(tmp_path, capsys):
    """It printed a seven-line config diff ("job: detect -> stack-apply") instead of the reason."""
    run, stack = _english_stack(tmp_path, capsys)
    for out in (run, run / "stacked"):
        code, _, err = cli(
            capsys, "stack", "apply", stack, f"lex={run}", "--split", "val", "--lang", "en", "--out", out
        )
        said = " ".join(err.split())
        assert code == 2 and f"--out {out} is inside the run folder {run}" in said, said


def test_a_stack_fitted_on_plain_files_says_it_reads_none_of_a_runs_evidence(tmp_path, capsys):
    """Fitted on a folder of prediction files, applied to a lexical run: 31 features of 53,
    the run's channels unread, exit 0 and no word (audit)."""
    import shutil

    run, _ = _english_stack(tmp_path, capsys)
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(run / "predictions" / "mushroom.en-val.v2.jsonl", plain)
    stack = tmp_path / "plain.json"
    code, _, err = cli(capsys, "stack", "fit", f"lex={plain}", "--lang", "en", "--out", stack)
    assert code == 0, err
    code, _, err = cli(
        capsys,
        "stack",
        "apply",
        stack,
        f"lex={run}",
        "--split",
        "val",
        "--lang",
        "en",
        "--out",
        tmp_path / "o",
    )
    said = " ".join(err.split())
    assert code == 0 and "member 'lex': the stack was fitted on plain prediction files for it" in said, said


def test_sweep_names_the_csv_it_writes_beside_its_plot(tmp_path, capsys):
    """It replaced an existing plot.csv and said only "plot: plot.svg" (audit)."""
    run, _ = _english_stack(tmp_path, capsys)
    svg = tmp_path / "mine" / "plot.svg"
    code, out, err = cli(capsys, "sweep", run, "--lang", "en", "--svg", svg)
    said = " ".join(out.split())
    assert code == 0 and f"plot: {svg} (its numbers: {svg.with_suffix('.csv')})" in said, said + err
    assert svg.with_suffix(".csv").read_text().startswith("threshold")


def test_stack_fit_and_ensemble_never_write_over_a_file_that_is_not_theirs(tmp_path, capsys):
    """`stack fit --out` replaced a prediction file with a stack and `ensemble --out` a file of
    the user's, each exiting 0; a re-run over its own earlier output still writes."""
    run, stack = _english_stack(tmp_path, capsys)
    code, _, err = cli(capsys, "stack", "fit", f"lex={run}", "--lang", "en", "--out", stack)
    assert code == 0, err  # its own earlier fit
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    code, _, err = cli(capsys, "stack", "fit", f"lex={run}", "--lang", "en", "--out", notes)
    assert code == 2 and "exists and is not a stack file" in err and notes.read_text() == "my notes\n", err
    files = [run / "predictions" / "mushroom.en-val.v2.jsonl"] * 2
    code, _, err = cli(capsys, "ensemble", *files, "--out", notes)
    assert code == 2 and "exists and is not a prediction file" in err and notes.read_text() == "my notes\n", (
        err
    )
    vote = tmp_path / "vote.jsonl"
    for _ in range(2):  # the second writes over the first's output
        code, _, err = cli(capsys, "ensemble", *files, "--out", vote)
        assert code == 0, err
    code, _, err = cli(capsys, "stack", "fit", f"lex={run}", "--lang", "en", "--out", vote)
    assert code == 2 and "exists and is not a stack file" in err, err
    # a JSON file of the user's is no stack, and notes after a blank line no prediction file;
    # an empty file (a mktemp) is written
    settings = tmp_path / "u.json"
    settings.write_text('{\n "my": "settings"\n}\n')
    code, _, err = cli(capsys, "stack", "fit", f"lex={run}", "--lang", "en", "--out", settings)
    assert code == 2 and "is not a stack file" in err and "settings" in settings.read_text(), err
    notes.write_text("\nmy notes\n")
    code, _, err = cli(capsys, "ensemble", *files, "--out", notes)
    assert code == 2 and notes.read_text() == "\nmy notes\n", err
    empty = tmp_path / "empty.json"
    empty.write_text("")
    code, _, err = cli(capsys, "stack", "fit", f"lex={run}", "--lang", "en", "--out", empty)
    assert code == 0 and "members" in empty.read_text(), err


def test_ensemble_says_what_compare_says_of_a_stopped_run_and_an_in_sample_stack(tmp_path, capsys):
    """A vote over a stopped run or an in-sample stack was written without a word, then scored
    as a loose file, where nothing can say it."""
    run, stack = _english_stack(tmp_path, capsys)
    applied = tmp_path / "applied"
    code, _, err = cli(
        capsys, "stack", "apply", stack, f"lex={run}", "--split", "val", "--lang", "en", "--out", applied
    )
    assert code == 0, err
    code, _, err = cli(
        capsys, "ensemble", applied, run, "--split", "val", "--lang", "en", "--out", tmp_path / "v.jsonl"
    )
    assert code == 0 and "in-sample" in err, err
    (run / "summary.json").unlink()
    code, _, err = cli(
        capsys, "ensemble", run, run, "--split", "val", "--lang", "en", "--out", tmp_path / "w.jsonl"
    )
    said = " ".join(err.split())
    assert code == 0 and said.count("has no summary.json: its run was stopped before it finished") == 1, err

import json
import os
import subprocess
import sys

import pytest
from cli_helpers import cli
from conftest import ROOT, VAL_EN, heavy_val_lines, traced, write_lines

from mushroom.data.splits import load_items
from mushroom.evaluation.check import check_file


def _items(tmp_path, item_rows):
    return load_items(write_lines(tmp_path / "items.jsonl", item_rows))


def test_valid_file_passes(tmp_path, item_rows):
    pred = write_lines(
        tmp_path / "p.jsonl",
        [
            {"id": "t-1", "soft_labels": [{"start": 13, "end": 17, "prob": 0.8}], "hard_labels": [[13, 17]]},
            {"id": "t-2", "soft_labels": [], "hard_labels": []},
        ],
    )
    report = check_file(pred, _items(tmp_path, item_rows))
    assert report.ok and report.n_lines == 2


def test_every_problem_is_listed(tmp_path, item_rows):
    pred = write_lines(
        tmp_path / "p.jsonl",
        [
            {"id": "t-1", "soft_labels": [{"start": 13, "end": 40, "prob": 0.8}], "hard_labels": [[0, 3]]},
            {"id": "t-1", "hard_labels": []},
            {"id": "zzz", "hard_labels": []},
            '{"id": "t-3',
            {
                "id": "t-2",
                "soft_labels": [{"start": 0, "end": 2, "prob": 2}, {"start": 0, "end": 2, "prob": 0.5}],
            },
        ],
    )
    report = check_file(pred, _items(tmp_path, item_rows))
    text = "\n".join(str(p) for p in report.errors)
    assert (
        "p.jsonl:1: id 't-1': field 'soft_labels.0': span [13, 40) must satisfy 0 <= start < end <= 18"
        in text
    )
    assert "p.jsonl:2: field 'id': duplicate id 't-1' (first on line 1)" in text
    assert "p.jsonl:3: field 'id': id 'zzz' is not among the items" in text
    assert "p.jsonl:4: invalid JSON: Unterminated string starting at column 8" in text
    assert "p.jsonl:5: id 't-2': field 'soft_labels.0.prob'" in text
    # in file order: the unreadable line 4 came before lines 1-3
    lines = [p.line for p in report.errors if p.line is not None]
    assert lines == sorted(lines) and lines[0] == 1, lines


def test_a_bad_probability_is_said_as_the_file_spells_it(tmp_path, item_rows):
    """`probability True` and `probability None` were said of `true` and `null` (an audit)."""
    rows = [
        {"id": f"t-{k}", "soft_labels": [{"start": 0, "end": 2, "prob": p}], "hard_labels": []}
        for k, p in ((1, True), (2, None))
    ]
    report = check_file(write_lines(tmp_path / "p.jsonl", rows), _items(tmp_path, item_rows))
    text = "\n".join(str(p) for p in report.errors)
    for shown in ("probability true is", "probability null is"):
        assert shown in text, text


def test_overlaps_and_inconsistent_hard_labels_are_errors(tmp_path, item_rows):
    pred = write_lines(
        tmp_path / "p.jsonl",
        [
            {
                "id": "t-1",
                "soft_labels": [{"start": 0, "end": 5, "prob": 0.8}, {"start": 3, "end": 6, "prob": 0.2}],
                "hard_labels": [],
            },
            {"id": "t-2", "soft_labels": [{"start": 0, "end": 2, "prob": 0.8}], "hard_labels": [[3, 6]]},
        ],
    )
    text = "\n".join(str(p) for p in check_file(pred, _items(tmp_path, item_rows)).errors)
    assert "overlaps an earlier soft span" in text
    assert "character 3 is in a hard span but has soft probability 0" in text


def test_missing_items_are_errors_and_cli_exits_1(tmp_path, item_rows):
    items_path = write_lines(tmp_path / "items.jsonl", item_rows)
    pred = write_lines(tmp_path / "p.jsonl", [{"id": "t-1", "hard_labels": []}])
    out = subprocess.run(
        [sys.executable, "-m", "mushroom", "check", str(pred), "--items", str(items_path)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1
    assert "no prediction for 1 item: 't-2'" in out.stderr and "check --partial" in out.stderr
    # a --limit run's file: --partial accepts it, and says what it lacks
    pred.write_text('{"id": "t-1", "soft_labels": [], "hard_labels": []}\n')
    args = [sys.executable, "-m", "mushroom", "check", str(pred), "--items", str(items_path), "--partial"]
    out = subprocess.run(args, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "OK (1 prediction, 0 warnings; 1 of 2 items not predicted (--partial))" in " ".join(
        out.stdout.split()
    )
    # everything else is still checked
    pred.write_text('{"id": "t-1", "soft_labels": [], "hard_labels": [[0, 99]]}\n')
    out = subprocess.run(args, capture_output=True, text=True)
    assert out.returncode == 1 and "must satisfy" in out.stderr and "no prediction" not in out.stderr
    assert "1 error on 1 line (of 1 read)" in " ".join(out.stderr.split())
    # some items, not none: an empty file is no partial run
    pred.write_text("")
    out = subprocess.run(args, capture_output=True, text=True)
    assert out.returncode == 1 and "no prediction for any of the 2 items" in out.stderr


def test_a_key_missing_on_some_lines_is_an_error(tmp_path, item_rows):
    # Each line alone is valid, but the official scorer reads the file as a table and fails
    # on the line without soft_labels; `score` says so, and `check` must not call it OK.
    pred = write_lines(
        tmp_path / "p.jsonl",
        [
            {"id": "t-1", "soft_labels": [{"start": 13, "end": 17, "prob": 0.8}], "hard_labels": [[13, 17]]},
            {"id": "t-2", "hard_labels": []},
        ],
    )
    report = check_file(pred, _items(tmp_path, item_rows))
    assert not report.ok
    [problem] = report.errors
    assert (problem.line, problem.field) == (2, "soft_labels") and "official scorer fails" in problem.message
    only_hard = write_lines(
        tmp_path / "h.jsonl", [{"id": "t-1", "hard_labels": [[13, 17]]}, {"id": "t-2", "hard_labels": []}]
    )
    assert check_file(only_hard, _items(tmp_path, item_rows)).ok  # the same key missing everywhere is fine


def test_a_soft_span_with_a_misspelt_key_names_it(tmp_path, item_rows):
    """ "must be an object with start, end, prob" left the user to find which key was wrong."""
    pred = write_lines(
        tmp_path / "p.jsonl",
        [
            {"id": "t-1", "soft_labels": [{"strt": 13, "end": 17, "prob": 0.8}], "hard_labels": []},
            {"id": "t-2", "soft_labels": [[0, 3, 0.5]], "hard_labels": []},
        ],
    )
    said = [str(p) for p in check_file(pred, _items(tmp_path, item_rows)).errors]
    assert any("soft_labels.0" in p and "(no start; 'strt' for 'start'?)" in p for p in said), said
    assert any("t-2" in p and "(got list)" in p for p in said), said


def test_a_line_carrying_another_answer_text_is_warned_of(tmp_path, item_rows):
    """Its spans were placed on another text (another file, an edited answer): check said OK."""
    rows = [
        {"id": r["id"], "model_output_text": r["model_output_text"], "hard_labels": []} for r in item_rows
    ]
    rows[0]["model_output_text"], rows[0]["hard_labels"] = "not the answer", [[0, 3]]
    rows[-1]["model_output_text"] = "nor this"
    report = check_file(write_lines(tmp_path / "p.jsonl", rows), _items(tmp_path, item_rows))
    assert report.ok  # the official scorer reads only the spans
    (warning,) = report.warnings  # one for the file, however many lines: the first is named
    assert (warning.line, warning.field, warning.item_id) == (1, "model_output_text", "t-1")
    assert "differs from the item's answer (from character 0;" in warning.message
    assert "on 2 lines" in warning.message


def test_a_file_of_items_given_for_predictions_and_the_other_way_round_says_so(tmp_path, capsys, item_rows):
    """150 lines of "Field required", where score says "is this the gold file?"."""
    from cli_helpers import cli

    items = write_lines(tmp_path / "items.jsonl", item_rows)
    pred = write_lines(tmp_path / "p.jsonl", [{"id": r["id"], "hard_labels": []} for r in item_rows])
    code, _, err = cli(capsys, "check", items, "--items", pred)
    said = " ".join(err.split())
    assert code == 1 and "--items looks like a prediction file (no line has model_output_text)" in said, said
    assert "mushroom check PRED --items ITEMS" in said and said.count("Field required") == 0, said
    # an items file with one line lacking its answer is that line's mistake, named as before
    rows = [dict(r) for r in item_rows]
    del rows[1]["model_output_text"]
    code, _, err = cli(capsys, "check", pred, "--items", write_lines(tmp_path / "one_bad.jsonl", rows))
    said = " ".join(err.split())
    assert code == 1 and "one_bad.jsonl:2: id 't-2': field 'model_output_text': Field required" in said, said


def test_a_file_named_for_another_language_than_its_items_is_refused(tmp_path, capsys):
    """English predictions copied to the German file name passed: the upload reads the
    language from the name and would find none of its ids."""
    from cli_helpers import cli

    from mushroom.data.splits import split_files

    items = split_files("test")["en"]
    code, _, _ = cli(
        capsys, "detect", "--split", "test", "--lang", "en", "--out", tmp_path / "run", "--quiet"
    )
    assert code == 0
    made = next((tmp_path / "run").rglob("mushroom.en-tst.v1.jsonl"))
    assert cli(capsys, "check", made, "--items", items)[0] == 0
    renamed = tmp_path / "mushroom.de-tst.v1.jsonl"
    renamed.write_bytes(made.read_bytes())
    code, _, err = cli(capsys, "check", renamed, "--items", items)
    said = " ".join(err.split())
    assert code == 1 and "its name says language 'de', but the items of" in said and "are 'en'" in said, said


def test_check_shows_the_first_hundred_warnings_and_counts_the_rest(tmp_path, capsys):
    """429 "hard spans overlap or are unsorted" lines were printed, where errors stop at 100."""
    from cli_helpers import GOLD_ROWS, cli
    from conftest import VAL_EN

    rows = [{"id": r["id"], "hard_labels": [[6, 7], [4, 5], [2, 3], [0, 1]]} for r in GOLD_ROWS]
    pred = write_lines(tmp_path / "p.jsonl", rows)
    code, _, err = cli(capsys, "check", pred, "--items", VAL_EN)
    assert code == 0 and err.count("hard spans overlap or are unsorted") == 100, err[-500:]
    assert f"... and {3 * len(rows) - 100} more (the first 100 are shown)" in err


def test_a_whole_submission_zip_is_checked_as_it_would_be_uploaded(tmp_path, capsys):
    """`check submission.zip` read the zip as one JSONL file; a participant about to upload
    asks whether every language's file is there, named for it and right for its items."""
    import zipfile

    from cli_helpers import cli

    from mushroom.data.splits import load_split

    test = load_split("test", ["en", "de"])
    lines = {
        lang: "".join(f'{{"id": "{it.id}", "hard_labels": []}}\n' for it in its) for lang, its in test.items()
    }
    good = tmp_path / "good.zip"
    with zipfile.ZipFile(good, "w") as z:
        z.writestr("mushroom.en-tst.v1.jsonl", lines["en"])
        z.writestr("mushroom.de-tst.v1.jsonl", lines["de"])
    code, out, err = cli(capsys, "check", good)
    said = " ".join((out + err).split())
    assert code == 0 and "OK (2 files," in said and "2 of the 14 test languages; none for ar, ca" in said, (
        said
    )
    from cli_helpers import VAL_DIR

    code, _, err = cli(capsys, "score", VAL_DIR, good)  # it said "GOLD is a folder, PRED a file"
    assert code == 2 and "is a zip archive: unzip it into a folder" in " ".join(err.split())
    # as GOLD it was read as one language's gold file, and its parent folder offered
    code, _, err = cli(capsys, "score", good, VAL_DIR)
    assert code == 2 and f"GOLD {good} is a zip archive: unzip it" in " ".join(err.split()), err
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("sub/mushroom.en-tst.v1.jsonl", lines["en"])
        z.writestr("mushroom.de-tst.v1.jsonl", lines["de"][: -len(lines["de"]) // 2])  # half its items
        z.writestr("../../mushroom.fr-tst.v1.jsonl", lines["en"])  # English ids under French
        z.writestr("notes.jsonl", "")
        z.writestr("mushroom.IT-tst.v2.jsonl", "")  # Italian, by a name the leaderboard does not read
    code, out, err = cli(capsys, "check", bad)
    said = " ".join((out + err).split())
    assert code == 1, said
    assert "sub/mushroom.en-tst.v1.jsonl is in a sub-folder of the zip" in said
    # its row in the table is no "ok": the set is refused for where it is
    en_row = next(line for line in out.splitlines() if line.strip("│ ").startswith("en "))
    assert "sub/mushroom.en" in en_row and "in a sub-folder" in en_row, out
    assert "mushroom.de-tst.v1.jsonl: field 'id': no prediction for" in said
    assert "mushroom.fr-tst.v1.jsonl:1: field 'id': id 'tst-en-" in said
    assert "notes.jsonl: its name names no language" in said
    # it was said to name no language, though it names one
    assert (
        "mushroom.IT-tst.v2.jsonl: the leaderboard reads the 'it' file only by the name mushroom.it-tst.v1.jsonl"
        in said
    )
    # a damaged entry, Finder's extras, files of two splits: said, not an internal error
    odd = tmp_path / "odd.zip"
    with zipfile.ZipFile(odd, "w") as z:
        z.writestr("mushroom.en-tst.v1.jsonl", lines["en"])
        z.writestr("__MACOSX/._mushroom.en-tst.v1.jsonl", "\x00")
        z.writestr("mushroom.de-val.v2.jsonl", "{}\n")
    data = bytearray(odd.read_bytes())
    at = data.index(b'{"id": "tst-en-1"')
    data[at + 3] ^= 0xFF  # the entry's bytes no longer match its CRC
    odd.write_bytes(bytes(data))
    code, out, err = cli(capsys, "check", odd)
    said = " ".join((out + err).split())
    assert code == 1 and "mushroom.en-tst.v1.jsonl cannot be read (Bad CRC-32" in said, said
    assert "1 macOS Finder entries (__MACOSX/, ._*) not checked" in said and "internal error" not in said
    mixed = tmp_path / "mixed.zip"
    with zipfile.ZipFile(mixed, "w") as z:
        z.writestr("mushroom.en-tst.v1.jsonl", lines["en"])
        z.writestr("mushroom.de-val.v2.jsonl", "{}\n")
        z.writestr("notes.jsonl", "")
    said = " ".join(cli(capsys, "check", mixed)[2].split())
    assert "files of more than one split: test, val" in said and "notes.jsonl: its name names no" in said
    # a folder is checked the same way; a single file still needs its items
    folder = tmp_path / "sub"
    folder.mkdir()
    (folder / "mushroom.en-tst.v1.jsonl").write_text(lines["en"])
    assert cli(capsys, "check", folder)[0] == 0
    (folder / "mushroom.en-tst.v1.jsonl").write_text(
        lines["en"][: len(lines["en"]) // 2].rsplit("\n", 1)[0] + "\n"
    )
    assert cli(capsys, "check", folder)[0] == 1
    assert cli(capsys, "check", folder, "--partial")[0] == 0  # a --limit run's files, checked as a set
    code, _, err = cli(capsys, "check", folder / "mushroom.en-tst.v1.jsonl")
    assert code == 2 and "give --items" in err


def test_a_device_given_as_a_file_is_refused_not_read_forever(tmp_path, capsys):
    """`check /dev/zero` read zeros (no newline ever) until memory ran out; `detect --items
    /dev/zero` and `ensemble /dev/zero ...` too. A pipe lost the lines its first read took."""
    done = subprocess.run(
        [sys.executable, "-m", "mushroom", "check", "/dev/zero", "--items", str(VAL_EN)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 2 and "/dev/zero: is a device, not a file" in done.stderr, done.stderr
    for args in (
        ("detect", "--items", "/dev/null", "--detector", "lexical", "--out", tmp_path / "run"),
        ("ensemble", "/dev/null", VAL_EN, "--out", tmp_path / "e.jsonl"),
        ("compare", tmp_path, tmp_path, "--items", "/dev/null"),  # was taken as no --items at all
        # each was "not found" or "no such file", of a path that is there
        ("run", "/dev/null"),
        ("contexts", "--cascade", "/dev/null", "--lang", "en"),
        ("detect", "--items", VAL_EN, "--contexts", "/dev/null", "--out", tmp_path / "c"),
        ("detect", "--detector", "llm", "--backend", "replay", "--responses", "/dev/null", "--lang", "en"),
    ):
        code, _, err = cli(capsys, *args)
        assert code == 2 and "/dev/null: is a device, not a file" in err, (args, err)
    piped = subprocess.run(
        [sys.executable, "-m", "mushroom", "check", "/dev/stdin", "--items", str(VAL_EN)],
        input=VAL_EN.read_text(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    told = " ".join(piped.stderr.split())
    assert piped.returncode == 2 and "/dev/stdin: is a pipe, not a file: it is read more than once" in told, (
        told
    )
    # a named pipe with no writer: opening it waited for one forever
    fifo = tmp_path / "p.jsonl"
    os.mkfifo(fifo)
    for args in (["check", fifo, "--items", VAL_EN], ["detect", "--items", fifo, "--out", tmp_path / "r"]):
        done = subprocess.run(
            [sys.executable, "-m", "mushroom", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        told = " ".join(done.stderr.split())
        assert done.returncode == 2 and f"{fifo}: is a pipe, not a file" in told, done.stderr


def test_check_of_a_run_folder_points_to_its_predictions(tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = cli(
        capsys, "detect", "--split", "val", "--lang", "en", "--limit", "3", "--out", run, "--quiet"
    )
    assert code == 0, err
    code, _, err = cli(capsys, "check", run)  # it said "no .jsonl file in the folder"
    said = " ".join(err.split())
    assert code == 2 and f"a run folder; its prediction files are in {run / 'predictions'}" in said, err


def test_a_misspelt_label_key_is_named_by_check_and_score(tmp_path, capsys):
    """A line with `hard_label` read as marking nothing; the message said only that no label was given."""
    first = json.loads(VAL_EN.read_text(encoding="utf-8").splitlines()[0])
    pred = write_lines(tmp_path / "mushroom.en-val.v2.jsonl", [{"id": first["id"], "hard_label": [[0, 3]]}])
    code, _, err = cli(capsys, "check", pred, "--items", VAL_EN, "--partial")
    assert code == 1 and "(is 'hard_label' a misspelling?)" in " ".join(err.split()), err
    code, _, err = cli(capsys, "score", VAL_EN, pred, "--partial")
    assert code == 1 and "(is 'hard_label' a misspelling?)" in " ".join(err.split()), err


def test_check_says_a_compressed_file_is_one_before_it_asks_for_items(tmp_path, capsys):
    """`check sub.tar.gz` asked for --items; only with them did it say the file was gzip."""
    import gzip

    packed = tmp_path / "sub.jsonl.gz"
    packed.write_bytes(gzip.compress(b'{"id": "a", "hard_labels": []}\n'))
    code, _, err = cli(capsys, "check", packed)
    assert code == 2 and "is gzip-compressed; decompress it first" in err and "--items" not in err, err


def test_the_same_predictions_make_the_same_submission_zip(tmp_path, monkeypatch):
    """A zip's checksum is how a team tells whether two runs submitted the same thing; the
    entries carried each file's modification time, so a re-run made different bytes."""
    import hashlib
    import os
    import zipfile

    from mushroom.evaluation.submission import write_zip

    a, b = tmp_path / "a", tmp_path / "b"
    for folder, stamp in ((a, 1_000_000_000), (b, 1_700_000_000)):
        folder.mkdir()
        for name in ("mushroom.en-tst.v1.jsonl", "mushroom.de-tst.v1.jsonl"):
            (folder / name).write_text('{"id": "x", "hard_labels": []}\n')
            os.utime(folder / name, (stamp, stamp))
    first = write_zip(tmp_path / "a.zip", sorted(a.iterdir()))
    second = write_zip(tmp_path / "b.zip", sorted(b.iterdir(), reverse=True))
    digest = [hashlib.sha256(z.read_bytes()).hexdigest() for z in (first, second)]
    assert digest[0] == digest[1]
    with zipfile.ZipFile(first) as z:
        assert z.namelist() == ["mushroom.de-tst.v1.jsonl", "mushroom.en-tst.v1.jsonl"]
        assert z.read("mushroom.en-tst.v1.jsonl") == b'{"id": "x", "hard_labels": []}\n'
    # written on Windows (zipfile puts 0 in each header there), the bytes are the same
    import sys

    monkeypatch.setattr(sys, "platform", "win32")
    third = write_zip(tmp_path / "c.zip", sorted(a.iterdir()))
    monkeypatch.undo()
    assert hashlib.sha256(third.read_bytes()).hexdigest() == digest[0]


def test_check_holds_items_without_the_answering_models_logits(tmp_path, capsys):
    """`check` compares spans with answers: the tokens and logits (most of a val item) were held."""
    items_file = tmp_path / "items.jsonl"
    rows = heavy_val_lines(items_file)
    items, held, _ = traced(lambda: load_items(items_file, answer_evidence=False))
    assert len(items) == 200 and all(it.model_output_logits is None for it in items)
    assert held < items_file.stat().st_size / 4
    pred = write_lines(
        tmp_path / "pred.jsonl", [{"id": r["id"], "hard_labels": r["hard_labels"]} for r in rows]
    )
    code, out, _ = cli(capsys, "check", pred, "--items", items_file)
    assert code == 0 and "OK (200 predictions" in out


def test_an_id_written_in_another_unicode_form_or_padded_names_the_item_it_meant(tmp_path, capsys):
    """An NFD id (a macOS tool, an editor) looks equal on screen and was only "not among the items"."""
    import unicodedata

    from mushroom.data.predictions import load_predictions
    from mushroom.errors import DataError

    nfc = unicodedata.normalize("NFC", "val-fr-café-1")
    items = _items(
        tmp_path, [{"id": nfc, "lang": "fr", "model_input": "q?", "model_output_text": "Un café."}]
    )
    nfd = unicodedata.normalize("NFD", nfc)
    pred = write_lines(
        tmp_path / "p.jsonl", [{"id": nfd, "hard_labels": []}, {"id": "zzz ", "hard_labels": []}]
    )
    text = "\n".join(str(p) for p in check_file(pred, items).errors)
    assert f"p.jsonl:1: field 'id': id {nfd!r} is not among the items: an item has {nfc!r} (the same " in text
    assert "Unicode form NFC; ids are compared as written)" in text
    assert "p.jsonl:2: field 'id': id 'zzz ' is not among the items\n" in text + "\n"  # no item is near
    # the scorer's reader says the same (score, ensemble and stack read through it)
    with pytest.raises(DataError) as caught:
        load_predictions(pred, {nfc: 8})
    said = str(caught.value)
    assert f"an item has {nfc!r} (the same letters in Unicode form NFC" in said
    # score says it too, of a file whose other ids are the gold's
    rows = [{"id": json.loads(line)["id"], "hard_labels": []} for line in VAL_EN.read_text().splitlines()]
    rows[3]["id"] += " "
    code, _, err = cli(capsys, "score", VAL_EN, write_lines(tmp_path / "s.jsonl", rows), "--partial")
    said = " ".join(err.split())
    assert code == 1 and f"1 id not in the gold file: {rows[3]['id']!r}: an item has" in said, said
    padded = write_lines(tmp_path / "q.jsonl", [{"id": f" {nfc}\t", "hard_labels": []}])
    text = "\n".join(str(p) for p in check_file(padded, items).errors)
    assert f"an item has {nfc!r} (without the spaces around it;" in text

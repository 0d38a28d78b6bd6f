import json

import pytest
from conftest import ROOT, write_lines

from mushroom.data.contexts import DEFAULT_SOURCES, available_sources, context_file, load_contexts
from mushroom.data.languages import TEST_LANGUAGES, VAL_LANGUAGES
from mushroom.data.splits import load_items, load_split, split_files
from mushroom.errors import DataError, MushroomError


def test_every_shipped_split_file_loads():
    assert set(split_files("test")) == set(TEST_LANGUAGES)
    assert set(split_files("val")) == set(VAL_LANGUAGES)
    val = load_split("val")
    assert sum(len(v) for v in val.values()) == 499
    assert all(item.lang == lang for lang, items in val.items() for item in items)
    assert all(item.hard_labels is not None for items in val.values() for item in items)
    test = load_split("test")
    assert sum(len(v) for v in test.values()) == 1902
    assert all(item.hard_labels is None for items in test.values() for item in items)
    train = load_split("train")
    assert set(train) == {"en", "es", "zh"}


def test_contexts_cover_every_val_and_test_item():
    for split, langs in (("val", VAL_LANGUAGES), ("test", TEST_LANGUAGES)):
        items = load_split(split)
        for lang in langs:
            ctx = load_contexts(split, lang, item_ids=[i.id for i in items[lang]])
            expected = {"perplexity-sonar-pro": 0, "deepseek-r1": 0}
            if lang == "en":  # the optional fact-check source exists for English alone
                expected["qa_perplexity-sonar-pro"] = 0
            assert ctx.missing == expected


def test_an_optional_source_is_skipped_where_it_has_no_file_and_a_fact_check_never_supports():
    from mushroom.data.contexts import fact_checks, support_contexts

    de = load_contexts("val", "de", ("perplexity-sonar-pro", "qa_perplexity-sonar-pro?"))
    assert set(de.files) == {"perplexity-sonar-pro"}
    en = load_contexts("val", "en", ("perplexity-sonar-pro", "qa_perplexity-sonar-pro?"))
    first = en.by_id["val-en-1"]
    assert [c.source for c in first] == ["perplexity-sonar-pro", "qa_perplexity-sonar-pro"]
    assert [c.source for c in support_contexts(first)] == ["perplexity-sonar-pro"]
    assert "not 2008" in fact_checks(first)[0].text
    with pytest.raises(MushroomError, match="qa_perplexity-sonar-pro"):
        load_contexts("val", "de", ("qa_perplexity-sonar-pro",))  # not optional: an error
    with pytest.raises(MushroomError, match="translated:qa_perplexity-sonar-pro"):
        load_contexts("val", "en", ("translated:qa_perplexity-sonar-pro?",))  # no translated fact-checks
    with pytest.raises(MushroomError, match="empty context source name"):
        load_contexts("val", "en", ("perplexity-sonar-pro", "?"))
    with pytest.raises(MushroomError, match="qa_perplxity-sonar-pro"):
        load_contexts(
            "val", "en", ("perplexity-sonar-pro", "qa_perplxity-sonar-pro?")
        )  # no such file anywhere


def test_context_source_names_are_exact():
    # "perplexity-sonar-pro" must not pick the English-only "qa_perplexity-sonar-pro" file.
    path = context_file("val", "en", "perplexity-sonar-pro")
    assert path.name == "en-val.v2_perplexity-sonar-pro.jsonl"
    assert (
        context_file("val", "en", "qa_perplexity-sonar-pro").name == "en-val.v2_qa_perplexity-sonar-pro.jsonl"
    )
    assert (
        context_file("test", "de", "translated:deepseek-r1").name
        == "de-tst-translated-English.v2_deepseek-r1.jsonl"
    )
    assert "translated:perplexity-sonar-pro" in available_sources("val", "fr")


def test_the_default_optional_source_is_skipped_in_a_contexts_folder_without_it(tmp_path):
    for name in ("en-val.v2_perplexity-sonar-pro.jsonl", "en-val.v2_deepseek-r1.jsonl"):
        (tmp_path / "ucsc").mkdir(exist_ok=True)
        (tmp_path / "ucsc" / name).write_text('{"id": "val-en-1", "context": "Petra won gold."}\n')
    ctx = load_contexts("val", "en", DEFAULT_SOURCES, context_dir=tmp_path)
    assert set(ctx.files) == {"perplexity-sonar-pro", "deepseek-r1"}


def test_unknown_context_source_names_the_available_ones():
    with pytest.raises(MushroomError, match="available: .*deepseek-r1"):
        load_contexts("val", "en", ("no-such-source",))


@pytest.mark.parametrize(
    ("mutate", "line", "field", "message"),
    [
        (lambda rows: rows.__setitem__(1, "{not json"), 2, None, "invalid JSON"),
        (lambda rows: rows[0].pop("model_output_text"), 1, "model_output_text", "Field required"),
        (
            lambda rows: rows[0].update(model_output_txt=rows[0].pop("model_output_text")),
            1,
            "model_output_text",
            "Field required; the line has 'model_output_txt': misspelt?",
        ),
        (lambda rows: rows[0]["hard_labels"].append([5, 99]), 1, "hard_labels.1", "0 <= start < end <= 18"),
        (lambda rows: rows[0]["hard_labels"].append([9, 4]), 1, "hard_labels.1", "0 <= start < end"),
        (
            lambda rows: rows[0]["soft_labels"][0].update(prob=1.5),
            1,
            "soft_labels.0.prob",
            "less than or equal to 1",
        ),
        (lambda rows: rows[0]["soft_labels"][0].update(start=2.5), 1, "soft_labels.0.start", "integer"),
        (lambda rows: rows[1].update(id="t-1"), 2, "id", "duplicate id 't-1' (first on line 1)"),
    ],
)
def test_bad_input_names_file_line_and_field(tmp_path, item_rows, mutate, line, field, message):
    rows = list(item_rows)
    mutate(rows)
    path = write_lines(tmp_path / "items.jsonl", rows)
    with pytest.raises(DataError) as info:
        load_items(path)
    problem = info.value.problems[0]
    assert problem.path == str(path)
    assert problem.line == line
    assert problem.field == field
    assert message in problem.message
    assert f"{path}:{line}" in str(info.value)


def test_all_problems_are_reported_at_once(tmp_path, item_rows):
    item_rows[0]["hard_labels"] = [[0, 500]]
    item_rows[1]["soft_labels"] = [{"start": 0, "end": 2, "prob": -0.1}]
    path = write_lines(tmp_path / "items.jsonl", item_rows)
    with pytest.raises(DataError) as info:
        load_items(path)
    assert [p.line for p in info.value.problems] == [1, 2]


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        load_items(tmp_path / "nope.jsonl")


def test_lang_is_normalised(tmp_path, item_rows):
    items = load_items(write_lines(tmp_path / "items.jsonl", item_rows))
    assert {i.lang for i in items} == {"en"}
    assert (ROOT / "data" / "mushroom" / "README.md").is_file()
    assert (ROOT / "contexts" / "ucsc" / "LICENSE-Apache-2.0.txt").is_file()


def test_json_lines_are_read_a_line_at_a_time(tmp_path):
    """A run's item ledger can hold a corpus: the reader once held the file twice over."""
    import tracemalloc

    from mushroom.data.jsonl import iter_json_lines

    path = tmp_path / "ledger.jsonl"
    line = json.dumps({"id": "x", "status": "ok", "pad": "y" * 1000}) + "\n"
    path.write_text(line * 8000, encoding="utf-8")  # 8 MB
    tracemalloc.start()
    try:
        count = sum(1 for _ in iter_json_lines(path, []))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 8000 and peak < 1_000_000, peak


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('\n\n[{"id": "a"},\n {"id": "b"}]\n', "is a JSON array"),
        ('{\n  "id": "a"\n}\n', "is one JSON document spread over several lines"),
        # a table saved as .jsonl: every line was "invalid JSON: Expecting value at column 1"
        ("id,model_input,model_output_text\n1,Q?,Paris is in Spain.\n", "looks like a CSV or TSV table"),
        ("id\tmodel_output_text\n1\tParis\n", "looks like a CSV or TSV table"),
        ("PAR1\x00\x00binary", "is a Parquet file"),
    ],
)
def test_a_json_document_after_blank_lines_is_named_as_such(tmp_path, text, said):
    from mushroom.data.jsonl import iter_json_lines

    path = tmp_path / "p.jsonl"
    path.write_text(text, encoding="utf-8")
    problems = []
    assert list(iter_json_lines(path, problems)) == []
    assert len(problems) == 1 and said in problems[0].message


@pytest.mark.parametrize("lang", ["en", "eng", "en-us", "zh-hans"])
@pytest.mark.parametrize("split", ["items", "val", "test"])
def test_every_language_code_an_item_may_have_is_read_back_from_its_file_name(lang, split):
    """'en-us' made mushroom.en-us-items.jsonl, which ensemble and the failure checks skipped."""
    from mushroom.data.predictions import prediction_file_lang, submission_name

    assert prediction_file_lang(submission_name(lang, split)) == lang
    assert prediction_file_lang(submission_name(lang, split) + ".bak") is None


def test_a_context_source_named_twice_is_refused_on_every_path():
    """Only the --contexts flag checked it: a config's or a library caller's counted twice."""
    with pytest.raises(MushroomError, match="context source tavily-5 named twice"):
        load_contexts("val", "en", ("tavily-5", "tavily-5?"))


@pytest.mark.parametrize("tail", [b"", b"cut", b"y" * 150_000])
@pytest.mark.parametrize("head", [b"", b"a\n", b"x" * 200_000 + b"\n"])
def test_a_cut_last_line_is_dropped_or_ended_whatever_its_length(tmp_path, head, tail):
    """A generated source can hold a corpus: its cut line is found by reading back from the end."""
    from mushroom.data.jsonl import mend_cut_line

    path = tmp_path / "f.jsonl"
    path.write_bytes(head + tail)
    mend_cut_line(path, drop=True)
    assert path.read_bytes() == head
    path.write_bytes(head + tail)
    mend_cut_line(path)
    assert path.read_bytes() == head + (tail + b"\n" if tail else b"")


@pytest.mark.parametrize("head", [b"", b'{"id": "a", "context": "x"}\n', b"x" * 200_000 + b"\n"])
def test_a_whole_last_line_without_its_newline_is_kept_not_dropped(tmp_path, head):
    """A hand-mended last line saved by an editor that strips the final newline was dropped as
    if a kill had cut it: the user's edit was lost, and nothing said so (an audit)."""
    from mushroom.data.jsonl import mend_cut_line

    path = tmp_path / "f.jsonl"
    whole = '{"id": "b", "context": "mended by hand, é"}'.encode()
    path.write_bytes(head + whole)
    mend_cut_line(path, drop=True)
    assert path.read_bytes() == head + whole + b"\n"
    path.write_bytes(head + whole[:-1])  # what a kill leaves: never a whole object
    mend_cut_line(path, drop=True)
    assert path.read_bytes() == head
    path.write_bytes(head + whole[:-3] + "é".encode()[:1])  # cut inside a character
    mend_cut_line(path, drop=True)
    assert path.read_bytes() == head


def test_a_context_folder_that_does_not_exist_is_said_to_be_missing(tmp_path):
    """An installed package reads contexts/ where it is run: "it has none for val en" sent a
    user looking for a file in a folder that was not there."""
    from mushroom.data.contexts import load_contexts
    from mushroom.errors import MushroomError

    with pytest.raises(MushroomError, match="that folder does not exist; set MUSHROOM_CONTEXT_DIR"):
        load_contexts("val", "en", ("deepseek-r1",), context_dir=tmp_path / "nope")


def test_a_named_pipe_as_a_context_source_is_refused_as_such(tmp_path):
    """A fifo was "no context file for source 'fifo' ... did you mean 'fifo'?"."""
    import os

    from mushroom.errors import MushroomError

    os.mkfifo(tmp_path / "val.en.fifo.jsonl")
    with pytest.raises(MushroomError, match="is a pipe, not a file"):
        load_contexts("val", "en", ("fifo",), context_dir=tmp_path)

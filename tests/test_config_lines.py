"""A config's errors name the line of the key, and a prompt's error its `prompt` key.

An audit of run configs: errors named the key (`field 'detector.options.threshold'`) but no
line, and a prompt file without {{answer}} was said of `detector.options` as a whole.
"""

from __future__ import annotations

import pytest

from mushroom.errors import DataError
from mushroom.runs.config import load_main_job_config, load_run_config
from mushroom.util.config_lines import line_of, toml_key_lines, yaml_key_lines

RUN = """\
name = "t"
splits = ["val"]
langs = ["en"]

[detector]
name = "llm"

[detector.options]
temperatures = [0.0]
"max_tokens" = 64

[detector.options.backend]
kind = "openai"
model = "m"
base_url = "http://127.0.0.1:9/v1"

[[variants]]
name = "a"

[[variants]]
name = "b"
options = { prompt = "PROMPT" }
"""


def test_toml_keys_are_found_under_their_tables_and_arrays_of_tables_are_counted():
    lines = toml_key_lines(RUN)
    assert lines["langs"] == 3 and lines["detector.options"] == 8
    assert lines["detector.options.max_tokens"] == 10  # a quoted key
    assert lines["detector.options.backend.base_url"] == 15
    assert lines["variants.0.name"] == 18 and lines["variants.1.options"] == 22
    # an item of a list, or a key inside an inline table, is found at the nearest key above it
    assert line_of("langs.0", lines) == 3 and line_of("variants.1.options.prompt", lines) == 22
    assert line_of("job", lines) is None


def test_yaml_keys_come_from_the_parsers_marks():
    lines = yaml_key_lines("name: t\ndetector:\n  name: lexical\n  options:\n    threshold: high\n")
    assert lines["detector.options.threshold"] == 5


def _problems(path):
    with pytest.raises(DataError) as caught:
        load_run_config(path)
    return caught.value.problems


def test_a_wrong_value_is_named_by_its_line(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        RUN.replace("PROMPT", "single_few_shot").replace("temperatures = [0.0]", 'threshold = "x"')
    )
    (problem,) = _problems(path)
    assert (problem.field, problem.line) == ("detector.options.threshold", 9), problem
    assert str(problem).startswith(f"{path}:9: field 'detector.options.threshold'")


def test_a_prompt_file_without_the_answer_is_said_of_the_variants_prompt_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.txt").write_text("Find the errors: {{question}}\n")
    path = tmp_path / "c.toml"
    path.write_text(RUN.replace("PROMPT", "bad.txt"))
    (problem,) = _problems(path)
    assert problem.field == "variants.b.options.prompt" and problem.line == 22, problem
    assert "has no {{answer}}" in problem.message


def test_a_main_job_config_names_its_lines_too(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('job = "main"\nmembers = ["lexical"]\n\n[options.lexical]\nthreshold = "high"\n')
    with pytest.raises(DataError) as caught:
        load_main_job_config(path)
    (problem,) = caught.value.problems
    assert (problem.field, problem.line) == ("options.lexical.threshold", 5), problem


def test_a_variant_is_found_by_its_name_as_problems_name_it():
    assert toml_key_lines(RUN)["variants.b.options"] == 22
    yaml = "variants:\n  - name: a\n  - name: b\n    options:\n      prompt: x\n"
    assert yaml_key_lines(yaml)["variants.b.options.prompt"] == 5


def test_text_inside_a_multi_line_string_is_no_key():
    text = 'name = "t"\ndescription = """\n[detector.options]\nthreshold = 0.5\n"""\n[detector]\nname = "x"\n'
    text += "[detector.options]\nthreshold = 1\nnote = '''\nthreshold = 2\n'''\nlimit = 3\n"
    lines = toml_key_lines(text)
    assert lines["detector.options.threshold"] == 9 and lines["detector.options.limit"] == 13
    assert lines["description"] == 2 and "threshold" not in lines


def test_nested_arrays_of_tables_count_from_zero_in_each_parent():
    text = '[[variants]]\nname = "a"\n[[variants.options.models]]\nkind = "x"\n'
    text += '[[variants]]\nname = "b"\n[[variants.options.models]]\nkind = "y"\n[[variants.options.models]]\nkind = "z"\n'
    lines = toml_key_lines(text)
    assert lines["variants.0.options.models.0.kind"] == 4
    assert lines["variants.1.options.models.0.kind"] == 8 and lines["variants.1.options.models.1.kind"] == 10
    assert lines["variants.b.options.models.1.kind"] == 10


def test_a_yaml_anchor_that_holds_itself_is_walked_once(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\nlangs: &l [en, *l]\ndetector: lexical\n")
    assert yaml_key_lines(path.read_text())["langs"] == 2
    with pytest.raises(DataError) as caught:  # said of the key, not an internal RecursionError
        load_run_config(path)
    assert any(p.field and p.field.startswith("langs") for p in caught.value.problems), caught.value


def test_a_bad_prompt_of_the_detector_table_is_said_once_of_its_own_key(tmp_path, monkeypatch):
    """Two variants that only set max_tokens were each blamed for the table's prompt."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.md").write_text("Find the errors: {{question}}\n")
    path = tmp_path / "c.toml"
    head = 'name = "t"\nlangs = ["en"]\n[detector]\nname = "llm"\n[detector.options]\nprompt = "bad.md"\n'
    warm = '[[variants]]\nname = "warm"\noptions = { max_tokens = 128 }\n'
    path.write_text(head + '[[variants]]\nname = "cold"\noptions = { max_tokens = 64 }\n' + warm)
    (problem,) = _problems(path)
    assert (problem.field, problem.line) == ("detector.options.prompt", 6), problem
    # a variant (named with a dot) that names the file itself is said of its own key
    path.write_text(head + '[[variants]]\nname = "cold.1"\noptions = { prompt = "bad.md" }\n' + warm)
    said = {(p.field, p.line) for p in _problems(path)}
    assert said == {("variants.cold.1.options.prompt", 9), ("detector.options.prompt", 6)}, said


def test_line_separators_inside_a_string_do_not_move_the_lines():
    """splitlines broke at U+2028 and U+0085, which TOML allows in a string (a review)."""
    text = 'name = "t"\ndescription = "a\u2028b\x85c"\n[detector]\nname = "x"\n'
    assert toml_key_lines(text)["detector.name"] == 4

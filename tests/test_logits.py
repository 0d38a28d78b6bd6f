"""The answering model's token logits, aligned to the answer's characters."""

import numpy as np

from mushroom.data.splits import load_split
from mushroom.text.logits import decode_tokens, logit_columns, token_of_chars


def test_byte_level_bpe_tokens_are_decoded_and_aligned():
    text = "Petra won in Zürich.\nYes"
    tokens = ["Pet", "ra", "Ġwon", "Ġin", "ĠZ", "Ã¼", "rich", ".", "Ċ", "Yes"]
    assert "".join(decode_tokens(tokens)) == text
    of = token_of_chars(text, tokens)
    assert of[text.index("ü")] == 5 and of[text.index("won")] == 2 and of[text.index(" won")] == 2


def test_sentencepiece_tokens_with_byte_and_special_tokens_and_a_prompt_echo():
    text = "La ville\nde Paris"
    tokens = ["<s>", "Answer", ":", "▁La", "▁ville", "<0x0A>", "de", "▁Paris", "</s>"]
    of = token_of_chars(text, tokens)
    assert of[text.index("ville")] == 4 and of[text.index("Paris")] == 7
    assert (of >= 0).all()


def test_low_logits_rank_high_and_bad_inputs_give_no_evidence():
    text = "a b c"
    cols = logit_columns(text, ["a", " b", " c"], [5.0, -3.0, 5.0])
    assert cols[text.index("b"), 0] > 0 > cols[text.index("a"), 0]  # minus the z-score
    assert cols[text.index("b"), 1] == 1.0
    assert (cols[:, 2] == 1.0).all()  # the evidence is there
    # one logit more than tokens: the end-of-sequence token the file left out
    assert np.array_equal(logit_columns(text, ["a", " b", " c"], [5.0, -3.0, 5.0, 9.0]), cols)
    for tokens, logits in [
        (["a", " b"], [1.0, 2.0, 3.0, 4.0]),
        (["a", " b", " c"], [0.0, 0.0, 0.0]),
        (None, None),
    ]:
        assert not logit_columns(text, tokens, logits).any()
    assert logit_columns(text, ["a", " b", " c"], [1.0, float("nan"), 2.0]).sum() == 0.0


def test_every_val_language_aligns_most_characters():
    """The official files' tokenizers differ per language; decoded tokens must match nearly all text."""
    import difflib

    for lang, items in load_split("val").items():
        matched = total = 0
        for it in items[:10]:
            joined = "".join(decode_tokens(it.model_output_tokens or []))
            blocks = difflib.SequenceMatcher(None, joined, it.model_output_text, autojunk=False)
            matched += sum(size for _, _, size in blocks.get_matching_blocks())
            total += len(it.model_output_text)
        assert matched / total > 0.95, (lang, matched / total)


def test_test_split_items_carry_usable_logits_in_every_language_but_catalan():
    """The test files' models differ from val's; their logits must reach the stack too."""
    for lang, items in load_split("test").items():
        present = [
            logit_columns(it.model_output_text, it.model_output_tokens, it.model_output_logits)[:, 2].mean()
            for it in items
        ]
        share = float(np.mean(present))
        if lang == "ca":  # its file writes tokens and logits as strings, which are not parsed
            assert share == 0.0
        else:
            assert share > 0.9, (lang, share)

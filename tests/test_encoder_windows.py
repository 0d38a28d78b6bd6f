"""The encoder's windows over a long text, with a tiny random BERT built here (nothing downloaded).

The windows are cut by mushroom, not by the tokenizer's `return_overflowing_tokens`, whose
windows stopped short of the text's end under transformers 5.17: these tests hold on any
installed version.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install -e '.[semantic]'")
transformers = pytest.importorskip("transformers", reason="transformers not installed")

from mushroom.errors import MushroomError  # noqa: E402
from mushroom.models.embedding import Encoder  # noqa: E402

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "paris", "is", "big", "."]


def tiny_encoder(max_length: int, batch_size: int = 32) -> Encoder:
    """A word-level tokenizer that frames a text as [CLS] ... [SEP], and a 2-layer BERT over it."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]"
    )
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(WORDS),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return Encoder(
        device="cpu",
        module=transformers.BertModel(config),
        tokenizer=tokenizer,
        cache=False,
        max_length=max_length,
        batch_size=batch_size,
    )


def test_windows_cover_a_long_text_to_its_end_and_overlap_by_the_stride():
    enc = tiny_encoder(max_length=20)
    text = "paris is big . " * 15  # 60 word pieces, 18 to a window
    ids, offsets = enc._windows(text, stride=8)
    assert all(len(w) <= 20 and w[0] == 2 and w[-1] == 3 for w in ids)  # [CLS] ... [SEP]
    assert [len(o) for o in offsets] == [len(w) for w in ids]
    spans = [[tuple(s) for s in o[1:-1]] for o in offsets]
    assert spans[0][0][0] == 0 and spans[-1][-1][1] == len(text.rstrip())
    for left, right in zip(spans, spans[1:]):
        assert left[-8:] == right[:8]  # each window starts 8 pieces before the last one ended
    tv = enc.token_vectors([text], stride=8)[0]
    assert len(tv.offsets) == 60 and len({tuple(o) for o in tv.offsets}) == 60
    assert tv.offsets[:, 1].max() == len(text.rstrip())


def test_a_window_no_wider_than_the_stride_is_an_error():
    with pytest.raises(MushroomError, match="raise max_length"):
        tiny_encoder(max_length=10)._windows("paris is big . " * 5, stride=8)


def test_a_roberta_style_encoder_reads_two_positions_fewer_than_it_has(tmp_path):
    """RoBERTa and XLM-R number positions from the padding id + 1: of their 514 positions, 512
    are a text's. With no tokenizer limit, 514 was taken, and a 513-token window failed."""
    import json

    from mushroom.models.embedding import folder_window_limit

    (tmp_path / "tokenizer_config.json").write_text(json.dumps({}))
    for model_type, pad, expected in (("xlm-roberta", 1, 512), ("roberta", 1, 512), ("bert", 0, 514)):
        config = {"model_type": model_type, "max_position_embeddings": 514, "pad_token_id": pad}
        (tmp_path / "config.json").write_text(json.dumps(config))
        assert folder_window_limit(str(tmp_path)) == expected, model_type
    # a tokenizer's own limit is the limit
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 256}))
    assert folder_window_limit(str(tmp_path)) == 256


def test_a_long_text_goes_through_the_encoder_a_batch_of_windows_at_a_time():
    """All the windows of one text went through in one forward pass: a 1 MB answer took 4.6 GB
    in the semantic detector, and a 5 MB one would fill the machine. The vectors are the same."""
    text = "paris is big . " * 200  # 800 word pieces: 50 windows of 18
    whole = tiny_encoder(max_length=20, batch_size=1000).token_vectors([text], stride=8)[0]
    enc = tiny_encoder(max_length=20, batch_size=4)
    widths = []
    enc.model.register_forward_hook(
        lambda module, args, kwargs, out: widths.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    batched = enc.token_vectors([text], stride=8)[0]
    assert len(widths) > 10 and max(widths) <= 4
    assert (batched.offsets == whole.offsets).all()
    assert abs(batched.vectors - whole.vectors).max() < 1e-5

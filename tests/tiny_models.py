"""Recipes for the tiny random transformers models the tests build (nothing is downloaded).

A word-level `tokenizers` vocabulary wrapped in PreTrainedTokenizerFast with a one-line chat
template; a LlamaForCausalLM and a BertForSequenceClassification with 2 layers, hidden size 32
and 2 heads over it.
"""

CHAT_TEMPLATE = "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}assistant :"


def word_tokenizer(words, pre_tokenizer="whitespace_split", **kwargs):
    """A fast tokenizer over exactly `words` (unknown words -> [UNK]), with a chat template."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = (
        pre_tokenizers.WhitespaceSplit()
        if pre_tokenizer == "whitespace_split"
        else pre_tokenizers.Whitespace()
    )
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", eos_token="</s>", unk_token="[UNK]", **kwargs
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_llama(vocab_size, max_positions, hidden_size=32, initializer_range=0.02):
    """A random 2-layer Llama (pad id 0, eos/bos id 2), seeded so tests are repeatable.

    vLLM's attention kernels take head sizes of 64 and up: give it `hidden_size=128` (2 heads).
    A larger `initializer_range` makes the next token far from uniform, so a log-probability
    read one position off differs from the right one.
    """
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        pad_token_id=0,
        eos_token_id=2,
        bos_token_id=2,
        initializer_range=initializer_range,
    )
    return transformers.LlamaForCausalLM(config)


def tiny_bert_classifier(vocab_size, id2label):
    """A random 2-layer BERT sequence classifier with the given labels (as an NLI model has)."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=len(id2label),
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
    )
    return transformers.BertForSequenceClassification(config)


def byte_tokenizer():
    """A byte-level tokenizer (every byte one token, ids 3..258) with [PAD]=0, [UNK]=1, </s>=2.

    Unlike the word-level one it can spell any text, so a grammar engine (llguidance) can
    constrain a tiny model's output to a JSON schema; pair it with `tiny_llama(259, ...)`.
    """
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {"[PAD]": 0, "[UNK]": 1, "</s>": 2}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", eos_token="</s>", unk_token="[UNK]"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def length_p_yes(requests):
    """Yes/no first-token answers whose P(yes) varies with the prompt's length (a pyes model stand-in)."""
    import math

    from mushroom.backends.base import Generation

    out = []
    for r in requests:
        yes = 0.1 + 0.8 * (len(r.messages[-1].content) % 7) / 6
        out.append(Generation(texts=["Yes"], logprobs=[[{" Yes": math.log(yes), "no": math.log(1 - yes)}]]))
    return out


SMALL_SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, 3]}},
    "required": ["ok", "n"],
    "additionalProperties": False,
}
"""A schema a tiny byte-level model can be held to (`obeys_schema` says whether it was)."""


def obeys_schema(text):
    """Whether `text` is JSON of SMALL_SCHEMA: both keys, a boolean and one of 1, 2, 3."""
    import json

    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return False
    return (
        isinstance(value, dict)
        and set(value) == {"ok", "n"}
        and isinstance(value["ok"], bool)
        and value["n"] in (1, 2, 3)
    )

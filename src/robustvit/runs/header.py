"""What every results.json records about the run (``run``) and the model (``model``)."""

from __future__ import annotations

import hashlib
import platform
import sys
from typing import Any

import torch

from robustvit._version import __version__
from robustvit.runs.store import RANDOM_WEIGHTS, now
from robustvit.runs.threads import thread_record


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def run_header(*, device: torch.device | str, seed: int, command: str | None = None, started: str | None = None,
               world_size: int = 1, **extra: Any) -> dict[str, Any]:
    """The ``run`` record: versions, device, seed, the command, start and end times, processes, CPU threads
    (``threads``, ``interop_threads``); ``extra``
    adds the kind's settings (``batch_size``, ``limit``, ``options``, ``shard`` …)."""
    device = torch.device(device)
    return {"robustvit": __version__, "torch": torch.__version__, "python": platform.python_version(),
            "device": str(device), "device_name": device_name(device), "seed": seed,
            "started": started or now(), "finished": now(), "command": command or " ".join(sys.argv),
            "world_size": world_size, **thread_record(), **extra}


def model_record(model: torch.nn.Module, name: str, source: str | None = None,
                 class_map: str | None = None, resize: Any = None) -> dict[str, Any]:
    """The ``model`` record of a robustvit model (``Normalized``: ``spec``, ``weights``): name, source (what
    built it: a timm name, a checkpoint folder, ``python:<class>``), parameters, spec, weights, preprocessing,
    class map, and the published numbers its source knows (``reported``: RobustBench's zoo). ``resize``: the
    preprocessing the data was read with (``size``, ``crop_pct``, ``interpolation``; e.g. ``folder:…,crop_pct=0.5``),
    recorded instead of the model's own."""
    spec = getattr(model, "spec", None)
    weights = getattr(model, "weights", None)
    pre = spec.preprocessing() if spec is not None else None
    if pre is not None and resize is not None:
        pre = {**pre, "input_size": [3, int(resize.size), int(resize.size)], "crop_pct": float(resize.crop_pct),
               "interpolation": str(resize.interpolation)}
    return {"name": name, "source": source or name, "params": sum(p.numel() for p in model.parameters()),
            "spec": spec.to_dict() if spec is not None else {"family": "other", "input_size": [3, 0, 0]},
            "pretrained": weights.get("pretrained") if isinstance(weights, dict) else None,
            "weights": weights, "preprocessing": pre,
            "class_map": None if class_map is None else str(class_map),
            **({"reported": model.reported} if getattr(model, "reported", None) else {})}


def count_flops(model: torch.nn.Module) -> int | None:
    """Forward FLOPs of one image at the model's input size (``torch.utils.flop_counter``; None if not countable)."""
    from torch.utils.flop_counter import FlopCounterMode

    spec = getattr(model, "spec", None)
    size = tuple(getattr(spec, "input_size", (3, 224, 224)))
    try:
        device = next(model.parameters()).device
        x = torch.rand(1, *size, device=device)
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(x)
        return int(counter.get_total_flops()) or None
    except Exception:  # an op the counter cannot trace: leave FLOPs out
        return None


def weights_id(model: torch.nn.Module, name: object = None) -> str:
    """What a run's results depend on in the weights, for its fingerprint: the SHA-256 of the checkpoint or
    ``--weights`` file (the same on every machine of a job array), else the timm name of pretrained weights, else
    (random weights, a Python model object) a digest of the parameters and buffers — so that a resumed run never
    mixes units of two random initialisations."""
    weights = getattr(model, "weights", None) or {}
    if weights.get("sha256"):
        return f"sha256:{weights['sha256']}"
    if isinstance(name, str) and weights.get("source") != "random":
        return name
    h = hashlib.sha256()
    for k, t in model.state_dict().items():
        h.update(k.encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return f"{RANDOM_WEIGHTS if weights.get('source') == 'random' else 'python:'}{h.hexdigest()[:16]}"


__all__ = ["count_flops", "device_name", "model_record", "run_header", "weights_id"]

"""``TrainConfig``: every setting of a training run; saved as ``config.yaml`` next to its results."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from robustvit.errors import RobustvitError


@dataclass
class TrainConfig:
    model: str
    data: str
    out: str
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3                 # peak learning rate (AdamW), reached after the warm-up
    min_lr: float = 1e-5
    weight_decay: float = 0.05
    warmup_epochs: float = 1.0
    label_smoothing: float = 0.1
    crop_padding: int = 4            # random crop after zero padding (0 = off)
    flip: bool = True                # random horizontal flip
    loss: str = "ce"
    loss_options: dict[str, Any] = field(default_factory=dict)
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    val_data: str | None = None
    val_limit: int | None = 1000
    seed: int = 0
    device: str = "auto"
    amp: bool = True                 # bf16 autocast on CUDA (ignored on CPU)
    workers: int = 0
    grad_clip: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    @classmethod
    def load(cls, path: str | Path, **overrides: Any) -> "TrainConfig":
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise RobustvitError(f"cannot read config {path} ({e})") from None
        data.update({k: v for k, v in overrides.items() if v is not None})
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise RobustvitError(f"config {path} has unknown key {sorted(unknown)[0]!r}")
        return cls(**data)

    def validate(self) -> None:
        if self.epochs < 1 or self.batch_size < 1:
            raise RobustvitError("epochs and batch size must be >= 1")
        if self.lr <= 0:
            raise RobustvitError(f"lr must be > 0, got {self.lr}")

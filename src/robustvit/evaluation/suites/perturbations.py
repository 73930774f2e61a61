"""Suite ``perturbations``: stability under ImageNet-P-style perturbation sequences (flip probability, T5D, mFR).

Hendrycks & Dietterich, "Benchmarking Neural Network Robustness to Common Corruptions and Perturbations",
ICLR 2019 (arXiv:1903.12261); the AFAT paper reports mFR on such sequences for ViTs. Options and result keys:
docs/perturbations.md.

Every image of the run's data set becomes a sequence (``robustvit.corruptions.perturbations``), generated on the
device from the unit's seeded generator and stored as the released frames are (8 bit; for ImageNet-P, H.264
videos: libx264, ``-tune grain`` for noise, ``-crf 20`` otherwise, with PyAV); or, with ``source=DIR``, read
from a released CIFAR-10-P / ImageNet-P folder (``robustvit.data.perturbed``). One part per perturbation; the
model sees every frame and only each frame's top-5 classes are kept for flip probability and top-5 distance
(``robustvit.metrics.perturbation``). With ``baseline=`` (another model's results.json) the flip rates are
normalised by the baseline's (``flip_rate``, ``mfr``, ``mt5d``); ``approximations`` lists how generated
sequences differ from the released files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F

from robustvit.corruptions.jpeg import to_uint8
from robustvit.corruptions.params import PRESET_SIZES, resolve_preset
from robustvit.corruptions.perturbations import (CIFAR_P_TEST_PERTURBATIONS, DEFAULT_BLOCK_PIXELS, GEOMETRIC_ON_FULL,
                                                 PERTURBATION_GROUPS, TEST_PERTURBATIONS, is_noise,
                                                 iter_perturbation_frames, list_perturbations, num_frames,
                                                 perturbation_sequence)
from robustvit.data.base import FileImageDataset, ImageDataset, Resize
from robustvit.data.loader import float_images
from robustvit.data.perturbed import (PerturbationSource, SequenceDataset, open_perturbation_source, x264_available,
                                     x264_roundtrip)
from robustvit.errors import RobustvitError, unknown_name
from robustvit.evaluation.suites.base import Batch, EvalContext, Plan, Suite, SuiteOptions, register_suite
from robustvit.options import option
from robustvit.metrics.perturbation import (finalize_perturbation_stats, flip_rate, mfr, mt5d, perturbation_stats,
                                            ranking)

#: Pixels per model call when the run's batch is small (1 Mi: 1024 images at 32 px, 20 at 224 px).
FORWARD_PIXELS = 1 << 20


def parse_perturbations(spec: str) -> list[str]:
    """A group name or ``+``-separated perturbation names → the list (checked, duplicates removed)."""
    spec = str(spec).strip()
    if spec in PERTURBATION_GROUPS:
        return list_perturbations(spec)
    names: list[str] = []
    for n in (s.strip() for s in spec.split("+")):
        if n not in PERTURBATION_GROUPS["all"]:
            raise unknown_name("perturbation", n, list(PERTURBATION_GROUPS["all"]) + list(PERTURBATION_GROUPS),
                               hint="give a group (test, validation, all) or names joined by +")
        if n not in names:
            names.append(n)
    return names


def load_baseline(path: str | Path) -> tuple[str, dict[str, Any]]:
    """The ``perturbations`` result of a results.json (or its folder) → (file, result)."""
    p = Path(path)
    f = p / "results.json" if p.is_dir() else p
    if not f.is_file():
        raise RobustvitError(f"baseline {path} is not a results.json file or a folder holding one; "
                             "run `robustvit eval --suite perturbations` on the baseline model first")
    try:
        res = json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise RobustvitError(f"baseline {f} is not valid JSON ({e})") from None
    suites = res.get("suites", {}) if isinstance(res, dict) else {}
    keys = [k for k in suites if k == "perturbations" or k.startswith("perturbations:")]
    if not keys:
        raise RobustvitError(f"baseline {f} has no perturbations result; evaluate the baseline with "
                             "--suite perturbations first")
    return str(f), suites[keys[0]]


@register_suite
class Perturbations(Suite):
    name = "perturbations"
    smoke = {"perturbations": ["gaussian_noise"]}
    demo = ("perturbations:limit=24",), ("perturbations:limit=12:perturbations=gaussian_noise+motion_blur+rotate+translate",)
    description = "ImageNet-P perturbation sequences: flip probability, top-5 distance, mFR / mT5D"
    data_aligned = True      # the uncropped images are the run's; CIFAR-10-P lists the CIFAR-10 test set in order

    @dataclass
    class Options(SuiteOptions):
        perturbations: str = option("test", help="a group (test, validation, all) or names joined by +")
        difficulty: int = option(1, min=1, max=3, help="frame-to-frame step of the flip rate (1, 2 or 3)")
        baseline: str | None = option(None, help="results.json (or its folder) of the baseline model: mFR / mT5D "
                                                 "relative to it")
        source: str | None = option(None, help="a stored CIFAR-10-P / ImageNet-P root instead of generating")
        preset: Literal["imagenet", "cifar"] | None = option(None, help="parameter table (default: by image size)")
        encode: Literal["auto", "x264", "none"] = option("auto", help="H.264 round trip of ImageNet-P frames "
                                                                      "(auto: when PyAV has libx264)")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        o = self.opts
        self.test_default = o.perturbations == "test"
        self.names = parse_perturbations(o.perturbations)
        self.encode = o.encode
        if self.encode == "x264" and not x264_available():
            raise RobustvitError("encode=x264 needs PyAV with libx264: pip install av")
        self.difficulty = o.difficulty
        self.preset = o.preset
        self.baseline = o.baseline
        if self.baseline is not None:
            load_baseline(self.baseline)            # fail now, not after the run
        self.source = o.source
        if self.source is not None and not Path(self.source).is_dir():
            raise RobustvitError(f"source {self.source} is not a folder; give the CIFAR-10-P or ImageNet-P root")
        self._sources: dict[str, PerturbationSource] = {}

    # ------------------------------------------------------------ data
    def _benchmark(self, ctx: EvalContext) -> str:
        """``cifar-p`` for CIFAR-P files or 32-px (``cifar`` preset) sequences, else ``imagenet-p``."""
        if self.source is not None:
            return "cifar-p" if any(Path(self.source).glob("*.npy")) else "imagenet-p"
        return "cifar-p" if self._preset(ctx) == "cifar" else "imagenet-p"

    def _test_set(self, ctx: EvalContext) -> tuple[str, ...]:
        return CIFAR_P_TEST_PERTURBATIONS if self._benchmark(ctx) == "cifar-p" else TEST_PERTURBATIONS

    def parts(self, ctx: EvalContext) -> list[str]:
        if self.test_default:
            self.names = list(self._test_set(ctx))
        return list(self.names)

    def _source(self, name: str) -> PerturbationSource:
        if name not in self._sources:
            self._sources[name] = open_perturbation_source(self.source, name, self.difficulty)
        return self._sources[name]

    def plan(self, ctx: EvalContext) -> Plan:
        """Generated sequences: the run's images (read uncropped for ImageNet-P, :meth:`_uncropped`). With
        ``source=``: each perturbation's sequence files, decoded by the runner's loader workers (uint8 frames
        (n, T, 3, H, W) on the device; :meth:`_top5` makes them float a forward batch at a time)."""
        parts = self.parts(ctx)
        if self.source is None:
            return Plan(parts, data=self._uncropped(ctx))
        n = min(len(self._source(p)) for p in self.names)
        return Plan(parts, size=n, part_data={name: SequenceDataset(self._source(name)) for name in parts})

    def _uncropped(self, ctx: EvalContext) -> ImageDataset | None:
        """ImageNet-P warps the Resize(256) image and crops 224 afterwards: for image files and the
        ``imagenet`` preset, the run's images read at 256/224 of the model's size (shorter side, square
        centre crop), the sequences cropped to the model's size after the warp. None otherwise."""
        if self._crop(ctx) is None:
            return None
        ds, r = ctx.dataset, ctx.dataset.resize
        return FileImageDataset(ds.samples, ds.classes, ds.spec,
                                Resize(round(r.size * 256 / 224), 1.0, r.interpolation), ds.strict)

    # ------------------------------------------------------------ evaluation
    def _top5(self, ctx: EvalContext, frames: torch.Tensor, bs: int) -> torch.Tensor:
        """Top-5 classes (n, t, k) of frames (n, t, 3, H, W), the model run on at least ``bs`` images at a
        time, more for small images (up to FORWARD_PIXELS pixels per call: small batches are slow on CPU)."""
        n, t = frames.shape[:2]
        flat = frames.reshape(n * t, *frames.shape[2:])
        size = ctx.image_size
        side = int(size) if size is not None else int(max(frames.shape[-2:]))
        bs = max(bs, FORWARD_PIXELS // (side * side))
        tops = []
        for i in range(0, n * t, bs):
            xb = flat[i:i + bs].to(ctx.device, non_blocking=True)
            if xb.dtype == torch.uint8:         # the released files' frames, as the loader brought them
                xb = float_images(xb)
            if size is not None and tuple(xb.shape[-2:]) != (size, size):
                xb = F.interpolate(xb, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
            tops.append(ranking(ctx.model(xb)))
        return torch.cat(tops).reshape(n, t, -1)

    @torch.no_grad()
    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        bs = max(1, len(batch.index))
        if self.source is not None:             # the part's frames, read by the runner's loader
            top = self._top5(ctx, batch.x, bs)
        elif self._encoding(ctx) == "x264":
            top = self._video_top5(ctx, batch, part, bs)
        else:   # 8-bit frames, as the released files store them
            blocks = [self._top5(ctx, to_uint8(f, "floor").float().div_(255), bs) for _, f in iter_perturbation_frames(
                batch.x, part, difficulty=self.difficulty, generator=batch.generator, preset=self.preset,
                crop=self._crop(ctx))]
            top = torch.cat(blocks, 1)
        return perturbation_stats(top, noise=is_noise(part), difficulty=self.difficulty)

    def _crop(self, ctx: EvalContext) -> int | None:
        """The model's size when sequences are made from the wider images of :meth:`_uncropped`, else None."""
        ds = ctx.dataset
        if self.source is None and isinstance(ds, FileImageDataset) and ds.resize is not None \
                and self._preset(ctx) == "imagenet":
            return ds.resize.size
        return None

    def _encoding(self, ctx: EvalContext) -> str | None:
        if self.source is not None:
            return None
        video = self._benchmark(ctx) == "imagenet-p" and self.encode != "none"
        return "x264" if video and (self.encode == "x264" or x264_available()) else "8-bit"

    def _video_top5(self, ctx: EvalContext, batch: Batch, part: str, bs: int) -> torch.Tensor:
        """Top-5 of sequences made, encoded as H.264 videos and decoded again, a few whole sequences at a time."""
        x = batch.x
        frames = num_frames(part, self._preset(ctx))
        per = max(1, DEFAULT_BLOCK_PIXELS // (frames * x.shape[-2] * x.shape[-1]))
        tops = []
        for i in range(0, len(x), per):
            seq = perturbation_sequence(x[i:i + per], part, difficulty=self.difficulty, generator=batch.generator,
                                        preset=self.preset, crop=self._crop(ctx))
            videos = [x264_roundtrip(s, noise=is_noise(part)) for s in to_uint8(seq, "floor").cpu()]  # a codec call per video
            tops.append(self._top5(ctx, torch.stack(videos).float().div_(255), bs))
        return torch.cat(tops)

    def _approximations(self, ctx: EvalContext) -> list[str]:
        """How the evaluation differs from the benchmark (empty: it follows it): generated sequences unlike the
        released files, or a subset of the images."""
        subset = [self.subset_note] if self.subset_note else []
        if self.source is not None:
            return subset
        out = []
        bench, preset = self._benchmark(ctx), self._preset(ctx)
        size = ctx.image_size
        if size is not None and int(size) != PRESET_SIZES[preset]:
            out.append(f"sequences at {size} px, not {PRESET_SIZES[preset]}: lengths in pixels were scaled")
        if bench == "imagenet-p" and self._encoding(ctx) != "x264":
            out.append("frames were not encoded as H.264 videos like the released ones (pip install av)")
        if bench == "imagenet-p" and self._crop(ctx) is None and set(self.names) & GEOMETRIC_ON_FULL:
            out.append("geometric sequences warp the model-size image (black at the borders); ImageNet-P warps the "
                       "Resize(256) image before CenterCrop(224): read the images from files (folder:, imagenet:)")
        return out + subset

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        res = {name: finalize_perturbation_stats(stats.get(name, {})) for name in self.names}
        fp = {name: r["flip_probability"] for name, r in res.items()}
        t5d = {name: r["top5_distance"] for name, r in res.items()}
        test_set = self._test_set(ctx)
        over = [n for n in test_set if n in self.names and fp.get(n) is not None]
        mean = lambda d: (sum(d[n] for n in over) / len(over)) if over else None  # noqa: E731
        return {
            "perturbations": list(self.names), "difficulty": self.difficulty,
            "preset": None if self.source else self._preset(ctx), "source": self.source,
            "flip_probability": fp, "top5_distance": t5d,
            "mean_flip_probability": mean(fp), "mean_top5_distance": mean(t5d), "mean_over": over,
            "num_frames": {name: self._frames(ctx, name) for name in self.names},
            "num_sequences": max([r["num_sequences"] for r in res.values()], default=0),
            "benchmark": self._benchmark(ctx), "encoding": self._encoding(ctx),
            "approximations": self._approximations(ctx), **self._normalise(fp, t5d, test_set)}

    def _frames(self, ctx: EvalContext, name: str) -> int:
        if self.source is not None:
            return int(self._source(name).num_frames)
        return num_frames(name, self._preset(ctx))

    def _preset(self, ctx: EvalContext) -> str:
        """The option, else by the model's input size (the run's images come at that size)."""
        if self.preset:
            return str(self.preset)
        size = int(ctx.image_size or 224)
        return resolve_preset(None, size, size)

    def _normalise(self, fp: dict[str, float | None], t5d: dict[str, float | None],
                   test_set: tuple[str, ...]) -> dict[str, Any]:
        empty = {"baseline": None, "flip_rate": None, "top5_distance_rate": None, "mfr": None, "mt5d": None}
        if self.baseline is None:
            return {**empty, "normalisation_reason": "no baseline given: add baseline=PATH/results.json (a "
                    "perturbations result of a reference model, e.g. AlexNet or ResNet-50) to report FR, mFR and mT5D"}
        path, base = load_baseline(self.baseline)
        if int(base.get("difficulty", 1)) != self.difficulty:
            return {**empty, "baseline": path, "normalisation_reason": f"the baseline was run at difficulty "
                    f"{base.get('difficulty')}, this run at {self.difficulty}; rerun one to match"}
        bfp, bt5d = base.get("flip_probability") or {}, base.get("top5_distance") or {}
        fr = {n: flip_rate(fp[n], bfp.get(n)) for n in self.names}
        tr = {n: flip_rate(t5d[n], bt5d.get(n)) for n in self.names}
        missing = [n for n in test_set if fr.get(n) is None or tr.get(n) is None]
        reason = (f"mFR / mT5D need all 10 test perturbations with a non-zero baseline; missing or zero: "
                  f"{', '.join(missing)}") if missing else None
        return {"baseline": path, "flip_rate": fr, "top5_distance_rate": tr, "mfr": mfr(fp, bfp, test_set),
                "mt5d": mt5d(t5d, bt5d, test_set), "normalisation_reason": reason}

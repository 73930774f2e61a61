"""Readers for the released perturbation sequences: CIFAR-10/100-P (``.npy``) and ImageNet-P (``.mp4``).

Hendrycks & Dietterich, "Benchmarking Neural Network Robustness to Common Corruptions and Perturbations",
ICLR 2019 (arXiv:1903.12261). Layouts:

* CIFAR-10-P / CIFAR-100-P: ``ROOT/<perturbation>[_2|_3].npy``, uint8 (10000, T, 32, 32, 3), one sequence per
  test image in CIFAR test order. The release has no labels (the flip metrics need none): ``ROOT/labels.npy``
  when present, else ``labels=``, else unknown (-1).
* ImageNet-P: ``ROOT/<perturbation>[_2|_3]/<wnid>/<id>.mp4`` (224 × 224 H.264 frames); labels index the sorted
  wnid folders. Decoding needs ``torchcodec``, ``av`` (PyAV) or ``opencv-python``.

Only the noise perturbations have ``_2``/``_3`` files (difficulty 2/3); for the others the metric applies the
difficulty (every d-th frame) to the plain file.

>>> src = open_perturbation_source("/data/CIFAR-10-P", "rotate")     # doctest: +SKIP
>>> frames, labels = src.get_sequences(torch.arange(8))              # doctest: +SKIP
>>> frames.shape                                                      # doctest: +SKIP
torch.Size([8, 31, 3, 32, 32])
"""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robustvit.corruptions.perturbations import is_noise
from robustvit.data.base import BatchedImageDataset
from robustvit.errors import RobustvitError


def perturbation_file_stem(name: str, difficulty: int = 1) -> str:
    """``gaussian_noise_2`` for noise at difficulty 2; the plain name otherwise."""
    return f"{name}_{difficulty}" if difficulty > 1 and is_noise(name) else name


class PerturbationSource:
    """Sequences of one perturbation: ``len()``, ``num_frames``, ``get_sequences(index)``."""

    name: str
    num_frames: int

    def __len__(self) -> int:
        raise NotImplementedError

    def get_sequences(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Float frames (n, T, 3, H, W) in [0, 1] and long labels (n,) (-1 = unknown)."""
        x, y = self.read_sequences(index)
        return x.float().div_(255), y

    def read_sequences(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`get_sequences` before its division by 255: uint8 frames as stored (what the loader carries)."""
        raise NotImplementedError


class SequenceDataset(BatchedImageDataset):
    """A :class:`PerturbationSource` as a data set for ``robustvit.data.loader`` (videos then decode in its
    workers): item ``i`` is sequence ``i``, float frames (n, T, 3, H, W) from ``get_batch``, uint8 from
    ``read_batch``."""

    def __init__(self, source: PerturbationSource) -> None:
        self.source = source
        self.classes = list(getattr(source, "classes", None) or [])
        self.spec = f"perturbation source {getattr(source, 'name', '')}"

    def __len__(self) -> int:
        return len(self.source)

    def get_batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.source.get_sequences(index)

    def read_batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.source.read_sequences(index)


class NpySequences(PerturbationSource):
    """CIFAR-P: one uint8 array (N, T, H, W, 3), memory-mapped."""

    def __init__(self, path: str | Path, name: str = "", labels: torch.Tensor | np.ndarray | None = None) -> None:
        path = Path(path)
        try:
            self.array = np.load(path, mmap_mode="r")
        except (OSError, ValueError) as e:
            raise RobustvitError(f"cannot read {path} as a .npy array ({e}); re-download the CIFAR-P file") from None
        a = self.array
        if a.ndim != 5 or a.shape[-1] != 3 or a.dtype != np.uint8:
            raise RobustvitError(f"{path} holds {a.dtype} {tuple(a.shape)}; a CIFAR-P file is uint8 (N, T, H, W, 3)")
        self.name, self.path = name or path.stem, path
        self.num_frames = int(a.shape[1])
        if labels is None and (path.parent / "labels.npy").is_file():
            labels = np.load(path.parent / "labels.npy")
        self.labels = None if labels is None else torch.as_tensor(np.asarray(labels)).long().reshape(-1)
        if self.labels is not None and len(self.labels) < len(a):
            raise RobustvitError(f"{len(self.labels)} labels for the {len(a)} sequences of {path}; "
                                 "give one label per sequence")

    def __len__(self) -> int:
        return int(self.array.shape[0])

    def read_sequences(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(index).long().reshape(-1).numpy()
        frames = torch.from_numpy(np.ascontiguousarray(self.array[idx]))          # (n, T, H, W, 3) uint8
        y = self.labels[idx] if self.labels is not None else torch.full((len(idx),), -1, dtype=torch.long)
        return frames.permute(0, 1, 4, 2, 3), y


def x264_available() -> bool:
    """Whether PyAV with the libx264 encoder is installed (``pip install av``)."""
    if importlib.util.find_spec("av") is None:
        return False
    import av
    return "libx264" in av.codecs_available


def encode_x264(frames: torch.Tensor, *, noise: bool) -> bytes:
    """One sequence of uint8 frames (T, 3, H, W) as an .mp4 the way ImageNet-P's videos were made: H.264
    (libx264), ``-tune grain`` for the noise sequences, ``-crf 20`` for the others, yuv420p (needs PyAV)."""
    import av
    h, w = frames.shape[-2:]
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.options = {"tune": "grain"} if noise else {"crf": "20"}
        for f in frames.permute(0, 2, 3, 1).contiguous().numpy():
            out.mux(stream.encode(av.VideoFrame.from_ndarray(f, format="rgb24")))
        out.mux(stream.encode())
    return buf.getvalue()


def x264_roundtrip(frames: torch.Tensor, *, noise: bool) -> torch.Tensor:
    """:func:`encode_x264`, then decoded again: uint8 (T, 3, H, W)."""
    import av
    with av.open(io.BytesIO(encode_x264(frames, noise=noise))) as inp:
        decoded = [torch.from_numpy(f.to_ndarray(format="rgb24")) for f in inp.decode(video=0)]
    return torch.stack(decoded).permute(0, 3, 1, 2).contiguous()


def _decoders() -> list[str]:
    """The installed video decoders, in order of preference."""
    return [m for m in ("torchcodec", "av", "cv2") if importlib.util.find_spec(m) is not None]


def read_video_frames(path: str | Path) -> torch.Tensor:
    """Decode every frame of a video as uint8 (T, 3, H, W) RGB with torchcodec, PyAV or OpenCV."""
    path = str(path)
    found = _decoders()
    if not found:
        raise RobustvitError("reading ImageNet-P .mp4 files needs a video decoder; install one: pip install av "
                             "(or torchcodec, or opencv-python)")
    kind = found[0]
    try:
        if kind == "torchcodec":
            from torchcodec.decoders import VideoDecoder
            return VideoDecoder(path)[:].contiguous()
        if kind == "av":
            import av
            with av.open(path) as container:
                frames = [torch.from_numpy(f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]
        else:
            import cv2
            cap = cv2.VideoCapture(path)
            frames = []
            while True:
                ok, frame = cap.read()
                if not ok:
                    break
                frames.append(torch.from_numpy(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)))
            cap.release()
    except Exception as e:  # noqa: BLE001  (decoder libraries raise their own types)
        raise RobustvitError(f"cannot decode {path} with {kind} ({type(e).__name__}: {e}); check the file") from None
    if not frames:
        raise RobustvitError(f"{path} has no video frames; re-download it")
    return torch.stack(frames).permute(0, 3, 1, 2).contiguous()


class VideoFolderSequences(PerturbationSource):
    """ImageNet-P: ``FOLDER/<wnid>/<id>.mp4``; labels = index of the sorted wnid folders."""

    def __init__(self, folder: str | Path, name: str = "") -> None:
        folder = Path(folder)
        classes = sorted(d.name for d in folder.iterdir() if d.is_dir())
        self.samples: list[tuple[str, int]] = [(str(f), c) for c, wnid in enumerate(classes)
                                               for f in sorted((folder / wnid).glob("*.mp4"))]
        if not self.samples:
            raise RobustvitError(f"{folder} holds no <wnid>/<id>.mp4 videos; point the source at the ImageNet-P root")
        self.classes, self.name, self.folder = classes, name or folder.name, folder
        self._frames: int | None = None

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def num_frames(self) -> int:  # type: ignore[override]
        if self._frames is None:
            self._frames = int(read_video_frames(self.samples[0][0]).shape[0])
        return self._frames

    def read_sequences(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(index).long().reshape(-1).tolist()
        videos = [read_video_frames(self.samples[i][0]) for i in idx]
        t = min(v.shape[0] for v in videos)
        if any(v.shape[1:] != videos[0].shape[1:] for v in videos):
            raise RobustvitError(f"videos of different frame sizes in {self.folder}; re-download ImageNet-P")
        return torch.stack([v[:t] for v in videos]), torch.tensor([self.samples[i][1] for i in idx], dtype=torch.long)


def open_perturbation_source(root: str | Path, name: str, difficulty: int = 1, *,
                             labels: Any = None) -> PerturbationSource:
    """The sequences of ``name`` at ``difficulty``: ``root/<stem>.npy`` (CIFAR-P) or ``root/<stem>/`` (ImageNet-P)."""
    root = Path(root)
    if not root.is_dir():
        raise RobustvitError(f"perturbation source {root} is not a folder; give the CIFAR-10-P or ImageNet-P root")
    stem = perturbation_file_stem(name, difficulty)
    if (root / f"{stem}.npy").is_file():
        return NpySequences(root / f"{stem}.npy", name, labels)
    if (root / stem).is_dir():
        return VideoFolderSequences(root / stem, name)
    raise RobustvitError(f"{root} has neither {stem}.npy (CIFAR-P) nor {stem}/ (ImageNet-P); "
                         "download the data set or choose other perturbations")


__all__ = ["PerturbationSource", "SequenceDataset", "NpySequences", "VideoFolderSequences", "open_perturbation_source",
           "perturbation_file_stem", "read_video_frames"]

"""Which images a run uses: the whole data set, a seeded class-stratified sample, its first N images, or a
published list (e.g. RobustBench's 5,000 ImageNet validation images).

:func:`select_subset` (labels, n, method, seed → sorted data-set indices) does the selection. ``stratified``
(the default) ranks every image once (:func:`subset_order`) so that *every prefix* is a class-stratified sample:
classes in proportion to their size (with fewer images than classes, that many distinct random classes), images
within a class in random order. Image ``i`` of class ``k`` (``c_k`` images), at random position ``j`` within its
class, gets the key ``(j + u_k) / c_k`` with one random offset ``u_k`` per class (systematic sampling). Samples
nest: the 50 images of ``autoattack:limit=50`` are among the 500 of ``pgd:limit=500``, both among ``--limit``.

Randomness: ``numpy.random.default_rng(seed)`` (PCG64), N uniform numbers (within-class order), then C (class
offsets); keys sorted stably: the same subset on any machine. ``first`` is the first N images (folder data sets
are sorted by class). Labels are read without decoding images (:func:`dataset_labels`).

>>> labels = torch.arange(1000) // 50                 # 20 classes of 50 images, sorted by class
>>> idx = select_subset(labels, 40, "stratified", seed=0)
>>> torch.bincount(labels[idx]).tolist() == [2] * 20
True
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robustvit.data.base import ImageDataset
from robustvit.errors import RobustvitError

#: Ways to draw ``--limit N`` images (``file`` comes from ``--subset FILE``).
SUBSET_METHODS = ("stratified", "first")


def check_method(method: str) -> str:
    if method not in SUBSET_METHODS:
        raise RobustvitError(f"unknown subset method {method!r}; use stratified (a seeded class-stratified sample) "
                             "or first (the first N images)")
    return method


def subset_order(labels: torch.Tensor | np.ndarray | None, n: int | None = None, method: str = "stratified",
                 seed: int = 0) -> torch.Tensor:
    """All data-set indices ranked so that the first k are the k-image subset for every k (long, (N,)).
    ``labels`` None (unknown): a uniform random ranking for ``stratified``; ``n`` is then the size."""
    check_method(method)
    if labels is None:
        if n is None:
            raise RobustvitError("subset_order needs labels or the number of images")
        lab = np.zeros(int(n), dtype=np.int64)
    else:
        lab = np.asarray(torch.as_tensor(labels).cpu().reshape(-1).long().numpy(), dtype=np.int64)
    size = len(lab)
    if method == "first" or size == 0:
        return torch.arange(size, dtype=torch.long)
    if int(lab.min()) < 0:                              # unknown labels (-1): one class of their own
        lab = np.where(lab < 0, int(lab.max()) + 1, lab)
    rng = np.random.default_rng(int(seed))
    within = rng.random(size)
    by_class = np.lexsort((within, lab))                 # class-major, random order inside each class
    counts = np.bincount(lab)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    j = np.empty(size, dtype=np.float64)
    j[by_class] = np.arange(size) - starts[lab[by_class]]  # position of each image within its class
    offset = rng.random(len(counts))
    key = (j + offset[lab]) / counts[lab]
    return torch.from_numpy(np.argsort(key, kind="stable").astype(np.int64))


def select_subset(labels: torch.Tensor | np.ndarray | None, n: int, method: str = "stratified", seed: int = 0,
                  *, size: int | None = None) -> torch.Tensor:
    """``n`` data-set indices (long, sorted ascending) drawn by ``method`` (``stratified`` or ``first``) with
    ``seed``; see the module docstring. ``labels`` None: unknown labels, ``size`` images (uniform draw)."""
    total = len(labels) if labels is not None else int(size or 0)
    if n < 1:
        raise RobustvitError(f"--limit must be >= 1, got {n}")
    if n > total:
        raise RobustvitError(f"--limit {n} is larger than the data set ({total} images); use --limit {total} or less")
    return subset_order(labels, total, method, seed)[:n].sort().values


def dataset_labels(ds: Any) -> torch.Tensor | None:
    """The label of every image of ``ds`` (long, (N,)) without decoding images; None when unknown.
    File data sets read them from their sample list, in-memory ones from their label tensor; a sample list whose
    second entries are not class indices (segmentation: mask files) has none."""
    if isinstance(ds, SubsetDataset):
        base = dataset_labels(ds.ds)
        return None if base is None else base[ds.indices]
    samples = getattr(ds, "samples", None)
    if isinstance(samples, list):
        if not all(isinstance(s[1], (int, np.integer)) for s in samples):
            return None
        return torch.tensor([s[1] for s in samples], dtype=torch.long)
    labels = getattr(ds, "labels", None)
    if isinstance(labels, (torch.Tensor, np.ndarray)) and len(labels) == len(ds):
        return torch.as_tensor(labels).long().reshape(-1)
    inner = getattr(ds, "ds", None)
    if inner is not None and inner is not ds and len(inner) == len(ds):
        return dataset_labels(inner)
    return None


def relative_paths(ds: Any, root: Path | None = None) -> list[str] | None:
    """Each sample's path relative to the data root (``<class>/<file>``), for file data sets; else None."""
    samples = getattr(ds, "samples", None)
    if not isinstance(samples, list) or not samples:
        return None
    paths = [Path(p) for p, _ in samples]
    spec = str(getattr(ds, "spec", ""))
    if root is None and ":" in spec:
        root = Path(spec.split(":", 1)[1])
    if root is None or not paths[0].is_relative_to(root):
        root = paths[0].parent.parent
    return [p.relative_to(root).as_posix() if p.is_relative_to(root) else p.as_posix() for p in paths]


def read_subset_file(path: str | Path) -> list[str]:
    """The entries of a subset file: one a line (blank lines and ``#`` comments skipped), or a JSON list."""
    p = Path(path).expanduser()
    try:
        text = p.read_text()
    except OSError as e:
        raise RobustvitError(f"cannot read the subset file {p} ({type(e).__name__}); give a text file with one "
                             "image index or relative path a line, or a JSON list") from None
    if text.lstrip().startswith("["):
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise RobustvitError(f"subset file {p} is not a valid JSON list ({e.msg}, line {e.lineno})") from None
        if not isinstance(raw, list) or not all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in raw):
            raise RobustvitError(f"subset file {p}: a JSON subset is a list of image indices or relative paths")
        entries = [str(v) for v in raw]
    else:
        entries = [e for e in (ln.split("#", 1)[0].strip() for ln in text.splitlines()) if e]
    if not entries:
        raise RobustvitError(f"subset file {p} lists no image")
    return entries


def load_subset_file(path: str | Path, ds: Any) -> torch.Tensor:
    """A subset file → the data-set indices it lists (long, sorted). Entries are integer indices into ``ds``
    or paths relative to its root (``n01440764/ILSVRC2012_val_00000293.JPEG``; a path that matches
    a sample's file name inside any class folder is accepted too). Unknown entries are an error naming the first."""
    entries = read_subset_file(path)
    n = len(ds)
    if all(e.lstrip("-").isdigit() for e in entries):
        idx = np.array([int(e) for e in entries], dtype=np.int64)
        bad = [str(v) for v in idx[(idx < 0) | (idx >= n)][:3]]
        if bad:
            raise RobustvitError(f"subset file {path}: indices {', '.join(bad)} are outside the data set (0-{n - 1}); "
                                 "list indices of this data set or paths relative to its root")
    else:
        rel = relative_paths(ds)
        if rel is None:
            raise RobustvitError(f"subset file {path} lists paths but {getattr(ds, 'spec', 'the data')} is not read "
                                 "from files; list image indices instead")
        index = {r: i for i, r in enumerate(rel)}
        names: dict[str, int] = {}          # bare file names (-1: in several class folders, ambiguous)
        for i, r in enumerate(rel):
            name = r.rsplit("/", 1)[-1]
            names[name] = -1 if name in names else i
        found, unknown = [], []
        for e in entries:
            key = e.replace("\\", "/").removeprefix("./")
            i = index.get(key)
            if i is None and "/" not in key:
                i = names.get(key)
            if i is None or i < 0:
                unknown.append(e)
            else:
                found.append(i)
        if unknown:
            raise RobustvitError(f"subset file {path}: {len(unknown)} entries are not images of "
                                 f"{getattr(ds, 'spec', 'the data')} ({', '.join(unknown[:3])}"
                                 f"{', …' if len(unknown) > 3 else ''}); paths are relative to the data root")
        idx = np.array(found, dtype=np.int64)
    uniq = np.unique(idx)
    if len(uniq) != len(idx):
        raise RobustvitError(f"subset file {path} lists {len(idx) - len(uniq)} images twice; list each image once")
    return torch.from_numpy(uniq)


class SubsetDataset(ImageDataset):
    """Images ``indices`` of another data set, in that order (a view: ``sub[i] = ds[indices[i]]``). Reading a
    batch reads the underlying images in index order (file locality) and returns them in the view's order."""

    def __init__(self, ds: ImageDataset, indices: torch.Tensor) -> None:
        self.ds, self.indices = ds, torch.as_tensor(indices).long().reshape(-1)
        self.classes, self.spec = list(ds.classes), ds.spec

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.ds[int(self.indices[i])]

    def get_batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._read(self.ds.get_batch, index)

    def read_batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """As :meth:`get_batch`, in the underlying data set's transport (uint8 where it has 8-bit images)."""
        return self._read(self.ds.read_batch, index)

    def _read(self, read: Any, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ids = self.indices[torch.as_tensor(index).long().reshape(-1)]
        ordered, perm = ids.sort()
        x, y = read(ordered)
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(len(perm))
        return x[inv], torch.as_tensor(y)[inv]

    @property
    def samples(self) -> list[tuple[str, int]]:
        """The (path, label) of each image of the view, for file data sets."""
        base = self.ds.samples            # AttributeError for in-memory data sets
        return [base[i] for i in self.indices.tolist()]

    def __getattr__(self, name: str) -> Any:     # resize, strict, extra, … of the underlying data set
        if name in ("ds", "indices"):
            raise AttributeError(name)
        return getattr(self.ds, name)


@dataclass
class Subset:
    """The images a run uses: ``indices``, data-set indices in ascending order (the order they are read in), and
    how they were chosen. :meth:`draw` takes a smaller sample of them the same way (a suite's ``limit=``)."""

    indices: torch.Tensor        # long, ascending
    method: str                  # "all", "stratified", "first" or "file"
    seed: int                    # the seed of the stratified ranking (recorded as None for first/all)
    total: int                   # images in the data set
    num_classes: int | None      # classes covered (None: labels unknown)
    file: str | None = None
    labels: torch.Tensor | None = None   # labels of the whole data set (None: unknown)
    rank: torch.Tensor | None = None     # the same images as a stratified ranking (computed on demand)

    @property
    def whole(self) -> bool:
        return self.method == "all"

    def ranking(self) -> torch.Tensor:
        """The images as a stratified ranking (data-set indices): its first k are a stratified sample of them."""
        if self.rank is None:
            sub = self.labels[self.indices] if self.labels is not None else None
            self.rank = self.indices[subset_order(sub, len(self.indices), "stratified", self.seed)]
        return self.rank

    def draw(self, n: int, method: str) -> torch.Tensor:
        """``n`` of these images (ascending data-set indices): ``stratified`` the first n of :meth:`ranking` (so
        draws nest: a smaller one is inside a larger one, and a stratified run's draw inside its ``--limit``),
        ``first`` the n lowest indices."""
        check_method(method)
        if n < 1:
            raise RobustvitError(f"limit must be >= 1, got {n}")
        if n >= len(self.indices):
            return self.indices
        if method == "first":
            return self.indices[:n]
        return self.ranking()[:n].sort().values

    def covered(self, indices: torch.Tensor) -> int | None:
        return None if self.labels is None else int(torch.unique(self.labels[indices]).numel())

    def sample(self, n: int, method: str) -> Subset:
        """:meth:`draw` as a :class:`Subset` (for a suite's record)."""
        ids = self.draw(n, method)
        if len(ids) == len(self.indices):
            return self
        rank = self.ranking()[:n] if method == "stratified" else None
        return Subset(ids, method, self.seed, self.total, self.covered(ids), None, self.labels, rank)

    def record(self) -> dict[str, Any] | None:
        """``data.subset`` of results.json (None: the whole data set)."""
        if self.whole:
            return None
        out: dict[str, Any] = {"method": self.method, "seed": self.seed if self.method == "stratified" else None,
                               "num_images": int(len(self.indices)), "num_classes": self.num_classes, "of": self.total}
        if self.file is not None:
            out["file"] = self.file
        return out

    def fingerprint(self) -> dict[str, Any]:
        """What makes two runs use the same images (for resuming)."""
        ids = self.indices.numpy().astype("<i8").tobytes()
        return {"method": self.method, "seed": self.seed, "num_images": int(len(self.indices)),
                "ids": hashlib.sha1(ids).hexdigest()[:16]}


def make_subset(ds: Any, *, limit: int | None = None, method: str = "stratified", seed: int = 0,
                file: str | Path | None = None, labels: torch.Tensor | None = None) -> Subset:
    """The run's images of ``ds``: ``--subset FILE``, else ``--limit N`` drawn by ``method`` with ``seed``, else all."""
    check_method(method)
    n = len(ds)
    if labels is None:
        labels = dataset_labels(ds)
    whole = Subset(torch.arange(n), "all", int(seed), n, None, None, labels)
    if file is not None:
        if limit is not None:
            raise RobustvitError("--limit and --subset FILE exclude each other: the file lists the images (shorten "
                                 "it, or give a suite its own limit=)")
        chosen = load_subset_file(file, ds)
        return Subset(chosen, "file", int(seed), n, whole.covered(chosen), str(file), labels)
    if limit is not None:
        if limit < 1:
            raise RobustvitError(f"--limit must be >= 1, got {limit}")
        if limit > n:
            raise RobustvitError(f"--limit {limit} is larger than the data set ({n} images); use --limit {n} or less")
    if limit is None or limit == n:
        whole.num_classes = whole.covered(whole.indices) if labels is not None else None
        return whole
    if method == "first":
        ids = torch.arange(limit)
        return Subset(ids, "first", int(seed), n, whole.covered(ids), None, labels)
    rank = subset_order(labels, n, "stratified", seed)[:limit]
    ids = rank.sort().values
    return Subset(ids, "stratified", int(seed), n, whole.covered(ids), None, labels, rank)


__all__ = ["SUBSET_METHODS", "Subset", "SubsetDataset", "dataset_labels", "load_subset_file",
           "make_subset", "read_subset_file", "select_subset", "subset_order"]

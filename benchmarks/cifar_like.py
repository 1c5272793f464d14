"""Write a learnable stand-in for CIFAR-10 in its file format, for machines without the data.

Each of the 10 classes is a smooth random 3x32x32 pattern (a few random plane waves per colour
channel); an image is its class's pattern, shifted by up to ``--shift`` pixels, with random
contrast and brightness and Gaussian pixel noise of ``--noise`` (on a 0-1 scale), stored as
uint8 like the real files: ``ROOT/cifar-10-batches-py/data_batch_1`` ... ``data_batch_5``,
``test_batch`` and ``batches.meta`` (pickles with bytes keys). ``load("cifar10", root=ROOT)``
and ``AIRPLAN_DATA_DIR=ROOT airplan sql "TRAIN cifar10 ..."`` then read it as they would read
CIFAR-10. It is not CIFAR-10: figures measured on it say so.

    python benchmarks/cifar_like.py ROOT [--train 50000 --test 10000 --noise 0.35 --seed 0]
"""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path

import numpy as np

NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def patterns(rng: np.random.Generator, waves: int = 4) -> np.ndarray:
    """(10, 3, 40, 40) smooth patterns in [0, 1], larger than an image so shifts stay inside."""
    yy, xx = np.mgrid[0:40, 0:40] / 40.0
    out = np.zeros((10, 3, 40, 40))
    for c in range(10):
        for ch in range(3):
            for _ in range(waves):
                fy, fx = rng.uniform(-3, 3, 2)
                out[c, ch] += np.sin(2 * np.pi * (fy * yy + fx * xx) + rng.uniform(0, 2 * np.pi))
    out -= out.min(axis=(2, 3), keepdims=True)
    return out / out.max(axis=(2, 3), keepdims=True)


def images(labels: np.ndarray, base: np.ndarray, rng: np.random.Generator, noise: float,
           shift: int) -> np.ndarray:
    n = labels.size
    dy, dx = rng.integers(4 - shift, 4 + shift + 1, (2, n))
    out = np.empty((n, 3, 32, 32), dtype=np.float32)
    for i in range(n):
        out[i] = base[labels[i], :, dy[i]:dy[i] + 32, dx[i]:dx[i] + 32]
    contrast = rng.uniform(0.5, 1.0, (n, 1, 1, 1))
    bright = rng.uniform(-0.2, 0.2, (n, 1, 1, 1))
    out = 0.5 + contrast * (out - 0.5) + bright + noise * rng.standard_normal(out.shape)
    return (np.clip(out, 0, 1) * 255).round().astype(np.uint8).reshape(n, 3072)


def write(root: Path, n_train: int, n_test: int, noise: float, shift: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    base = patterns(rng)
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    per_batch = -(-n_train // 5)

    def dump(name: str, n: int, label: str) -> None:
        y = rng.integers(0, 10, n)
        doc = {b"batch_label": label.encode(), b"labels": [int(v) for v in y],
               b"data": images(y, base, rng, noise, shift),
               b"filenames": [f"{name}_{j}.png".encode() for j in range(n)]}
        with open(folder / name, "wb") as handle:
            pickle.dump(doc, handle, protocol=2)

    for i in range(1, 6):
        dump(f"data_batch_{i}", min(per_batch, n_train - (i - 1) * per_batch),
             f"training batch {i} of 5")
    dump("test_batch", n_test, "testing batch 1 of 1")
    with open(folder / "batches.meta", "wb") as handle:
        pickle.dump({b"label_names": [n.encode() for n in NAMES],
                     b"num_cases_per_batch": per_batch, b"num_vis": 3072}, handle, protocol=2)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--train", type=int, default=50000)
    parser.add_argument("--test", type=int, default=10000)
    parser.add_argument("--noise", type=float, default=0.35)
    parser.add_argument("--shift", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    folder = write(args.root, args.train, args.test, args.noise, args.shift, args.seed)
    print(f"wrote {args.train} train and {args.test} test images to {folder}")


if __name__ == "__main__":
    main()

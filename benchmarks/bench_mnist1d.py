"""The mnist1d generator against MNIST-1D's published reference accuracies.

Greydanus (2020) reports, at 4000 training and 1000 test samples: logistic regression ~32%,
an MLP ~68%, a CNN ~94%, and accuracy that keeps growing with more samples. This trains the
same kinds of model centrally on the generated data (Adam, learning rate 0.01, 6000 steps of
100 samples; MLP: two hidden ReLU layers of 100; CNN: three stride-2 1-D convolutions of 25
channels and a linear layer) and prints JSON: the test accuracy of each model per seed.

    OMP_NUM_THREADS=1 python benchmarks/bench_mnist1d.py --train 4000 --seeds 0 1
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch
from torch import nn

from airplan_qo.data import load

PUBLISHED = {"logistic": 0.32, "mlp": 0.68, "cnn": 0.94}


def models() -> dict[str, nn.Module]:
    return {
        "logistic": nn.Sequential(nn.Flatten(), nn.Linear(40, 10)),
        "mlp": nn.Sequential(nn.Flatten(), nn.Linear(40, 100), nn.ReLU(), nn.Linear(100, 100),
                             nn.ReLU(), nn.Linear(100, 10)),
        "cnn": nn.Sequential(nn.Conv1d(1, 25, 5, 2, 1), nn.ReLU(), nn.Conv1d(25, 25, 3, 2, 1),
                             nn.ReLU(), nn.Conv1d(25, 25, 3, 2, 1), nn.ReLU(), nn.Flatten(),
                             nn.Linear(125, 10)),
    }


def accuracy(model: nn.Module, data: tuple[torch.Tensor, ...], *, seed: int, steps: int,
             batch: int = 100, lr: float = 1e-2) -> float:
    """Test accuracy of ``model`` trained on ``data`` = (x_train, y_train, x_test, y_test)."""
    torch.manual_seed(seed)
    for p in model.parameters():        # re-initialise under this seed
        if p.dim() > 1:
            nn.init.kaiming_uniform_(p, a=5 ** 0.5)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    x_tr, y_tr, x_te, y_te = data
    for _ in range(steps):
        idx = torch.randint(0, len(y_tr), (batch,), generator=gen)
        loss = nn.functional.cross_entropy(model(x_tr[idx]), y_tr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return float((model(x_te).argmax(1) == y_te).float().mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", type=int, default=4000, help="training samples (test: 1000)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--steps", type=int, default=6000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    for seed in args.seeds:
        ds = load("mnist1d", seed=seed, num_samples=args.train + 1000,
                  test_fraction=1000 / (args.train + 1000))
        data = (torch.tensor(ds.x_train), torch.tensor(ds.y_train), torch.tensor(ds.x_test),
                torch.tensor(ds.y_test))
        for name, model in models().items():
            start = time.perf_counter()
            acc = accuracy(model, data, seed=seed, steps=args.steps)
            rows.append({"seed": seed, "model": name, "n_train": ds.n_train,
                         "test_accuracy": round(acc, 4), "published_at_4000": PUBLISHED[name],
                         "seconds": round(time.perf_counter() - start, 1)})
            print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"python": platform.python_version(), "torch": torch.__version__,
                      "results": rows}))


if __name__ == "__main__":
    main()

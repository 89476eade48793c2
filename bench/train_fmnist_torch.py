#!/usr/bin/python3
"""PyTorch 1.13 reference for `lazyc train --data fashion-mnist --model cnn|resnet18`.

    OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/train_fmnist_torch.py \
        [--model cnn|resnet18] [--epochs 3] [--batch 128] [--lr 2e-3] [--weight-decay 5e-4] [--seed 1] \
        [--data-dir /usr/share/datasets/fashion-mnist] [--train-limit N] [--test-limit N]

The same model (cnn: conv32-BN-ReLU-maxpool, conv64-BN-ReLU-maxpool,
linear; resnet18: torchvision's with a 3x3 stride-1 stem and no max-pool,
tests/reference/fmnist_ref.py), the same normalisation, AdamW with a per-step cosine schedule, the last
partial training batch dropped, 2 threads. Prints the summary JSON that
`lazyc train` writes, so the two can be compared line by line.
"""
import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import fmnist_ref  # noqa: E402  (resnet18 as lazyc defines it)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, kind, ndim = struct.unpack(">HBB", data[:4])
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    t = torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8)
    return t.reshape(dims)


def load(data_dir, split, limit):
    x = read_idx(f"{data_dir}/{split}-images-idx3-ubyte.gz")
    y = read_idx(f"{data_dir}/{split}-labels-idx1-ubyte.gz").long()
    if limit:
        x, y = x[:limit], y[:limit]
    x = (x.float() / 255.0 - 0.2860) / 0.3530
    return x.unsqueeze(1), y


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc = nn.Linear(64 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(torch.flatten(x, 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["cnn", "resnet18"], default="cnn")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--train-limit", type=int, default=0)
    ap.add_argument("--test-limit", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(a.seed)
    xtr, ytr = load(a.data_dir, "train", a.train_limit)
    xte, yte = load(a.data_dir, "t10k", a.test_limit)
    model = CNN() if a.model == "cnn" else fmnist_ref.make_resnet18_fmnist()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    per_epoch = len(xtr) // a.batch
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=per_epoch * a.epochs)
    epochs, train_s, images = [], 0.0, 0
    start = time.perf_counter()
    acc = math.nan
    for epoch in range(a.epochs):
        g = torch.Generator().manual_seed(a.seed * 1000 + epoch)
        order = torch.randperm(len(xtr), generator=g)
        model.train()
        t0 = time.perf_counter()
        losses = []
        for b in range(per_epoch):
            idx = order[b * a.batch:(b + 1) * a.batch]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
            images += a.batch
        train_s += time.perf_counter() - t0
        model.eval()
        right = 0
        with torch.no_grad():
            for i in range(0, len(xte), 1000):
                right += (model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
        acc = right / len(xte)
        epochs.append({"epoch": epoch + 1, "train_loss": sum(losses) / len(losses), "test_accuracy": acc})
        print(f"epoch {epoch + 1}: train loss {epochs[-1]['train_loss']:.4f}, test accuracy {acc:.4f}",
              flush=True)
    print(json.dumps({"model": f"{a.model} (torch)", "epochs": epochs, "test_accuracy": acc,
                      "wall_s": round(time.perf_counter() - start, 3),
                      "images_per_s": round(images / train_s, 1)}))


if __name__ == "__main__":
    main()

"""A torchvision ResNet-18 trained on Fashion-MNIST through lazyc.torch:
every training step (forward, loss, backward, SGD update) is one lazyc
execution. Evaluation runs in torch after lzt.sync.

    python examples/torch_fmnist.py [DATA_DIR] [STEPS] [TEST_IMAGES]

DATA_DIR holds Debian's dataset-fashion-mnist files
(default /usr/share/datasets/fashion-mnist).
"""
import gzip
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

import lazyc.torch as lzt


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(shape)


def load(d, split):
    x = read_idx("%s/%s-images-idx3-ubyte.gz" % (d, split)).float().div(255).sub(0.2860).div(0.3530)
    y = read_idx("%s/%s-labels-idx1-ubyte.gz" % (d, split)).long()
    return x.unsqueeze(1), y                                  # [N, 1, 28, 28], [N]


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    n_test = int(sys.argv[3]) if len(sys.argv) > 3 else 10000
    xtr, ytr = load(d, "train")
    xte, yte = load(d, "t10k")
    xte, yte = xte[:n_test], yte[:n_test]
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = nn.Conv2d(1, 64, 3, 1, 1, bias=False)      # 1 channel, 28x28 images
    model.maxpool = nn.Identity()
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    step = lzt.train_step(model, opt, F.cross_entropy)      # traced on the first calls

    batch, t0 = 64, time.time()
    for i in range(steps):
        j = torch.randint(0, len(xtr) - batch, ()).item()
        lzt.metrics_reset()
        loss = step(xtr[j:j + batch], ytr[j:j + batch])    # a float; one lazyc execution
        sched.step()                                       # the new rate is data: no new trace
        if i % 50 == 0 or i == steps - 1:
            m = lzt.metrics()
            print("step %d: loss %.4f (%d execution, %d compiles)" % (i, loss, m["executions"], m["compiles"]))
    print("%d steps in %.1f s" % (steps, time.time() - t0))

    lzt.sync(model, opt)                                   # lazyc's weights and statistics -> torch
    model.eval()
    with torch.no_grad():
        pred = torch.cat([model(xte[k:k + 500]).argmax(1) for k in range(0, len(xte), 500)])
    print("test accuracy %.4f" % (pred == yte).float().mean().item())


if __name__ == "__main__":
    main()

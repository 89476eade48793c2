"""The PyTorch 2.9 side every torch-based runner shares: the model (built on
the CPU from bench/torch_reference.py's definitions, with the same seed and
the same batch, so every torch system starts from the same weights and the
first-step losses must agree), the optimizer and the plain step.

Import only after peers_common.parse_args(): this imports torch.
"""
import torch
import torch.nn.functional as F

import peers_common as pc


def versions():
    import torchvision
    return {"torch": torch.__version__, "torchvision": torchvision.__version__}


def build(args, device="cpu"):
    """(model, x, y, params) on device, in training mode."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.tokens:
        x = torch.randint(0, args.classes, args.input, dtype=torch.int64)
    else:
        x = torch.rand(args.input) * 2 - 1
    y = torch.randint(0, args.classes, args.target, dtype=torch.int64)
    if args.model == "mlp":
        m = pc.MLP
        layers, fin = [], m["in"]
        for _ in range(m["depth"]):
            layers += [torch.nn.Linear(fin, m["hidden"], bias=False), torch.nn.ReLU()]
            fin = m["hidden"]
        layers.append(torch.nn.Linear(fin, m["classes"], bias=False))
        model = torch.nn.Sequential(*layers)
    else:
        model = pc.ref.build_model(args.model, args.size, args.input, args.classes)
    model.train()
    model = model.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    return model, x.to(device), y.to(device), params


def loss_fn(model, x, y):
    out = model(x)
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def sgd(params):
    return torch.optim.SGD(params, lr=pc.LR, momentum=pc.MOMENTUM)


def plain_step(model, x, y, opt):
    """zero_grad (set_to_none), forward, cross-entropy, backward, SGD."""
    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, x, y)
        loss.backward()
        opt.step()
        return loss
    return step


def loss_float(loss):
    return float(loss.detach().cpu().item())

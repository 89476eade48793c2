"""PyTorch values for tests/test_capture_guard.c (issue: a captured step
computes exactly what the lazy step computes). Prints one line per case."""
import torch

torch.set_printoptions(precision=9)

# case 1: gradients zeroed outside the step every 2 calls, then an SGD step
W = torch.tensor([1.0, 2.0], requires_grad=True)
opt = torch.optim.SGD([W], lr=0.1, momentum=0.9)
for k in range(1, 7):
    x = torch.tensor([float(k), 0.5 * k])
    (W * W * x).sum().backward()
    if k % 2 == 0:
        opt.step()
        opt.zero_grad(set_to_none=True)
print("case1_sgd_W", [f"{v:.9g}" for v in W.tolist()])

# case 4: W1 stops requiring grad after call 2
W1 = torch.tensor([1.0, 2.0], requires_grad=True)
W2 = torch.tensor([3.0, 4.0], requires_grad=True)
opt = torch.optim.SGD([W1, W2], lr=0.1)
x = torch.tensor([1.0, 2.0])
losses = []
for k in range(4):
    if k == 2:
        W1.requires_grad_(False)
    opt.zero_grad(set_to_none=True)
    loss = (W1 * W2 * x).sum()
    loss.backward()
    opt.step()
    losses.append(loss.item())
print("case4_losses", [f"{v:.9g}" for v in losses])
print("case4_W1", [f"{v:.9g}" for v in W1.tolist()], "W2", [f"{v:.9g}" for v in W2.tolist()])

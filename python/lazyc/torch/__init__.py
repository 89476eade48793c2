"""The PyTorch bridge: a whole torch training step as one lazyc execution.

    import lazyc.torch as lzt
    step = lzt.train_step(model, optimizer, loss_fn, clip_grad_norm=None)
    loss = step(x, y)              # a float
    lzt.sync(model, optimizer)     # lazyc's parameters, buffers, optimizer state -> torch
    lzt.metrics(); lzt.metrics_reset()
    torch.compile(model, backend="lazyc")
"""
from .._lib import metrics, metrics_reset  # noqa: F401
from .lower import Unsupported  # noqa: F401
from .step import train_step, sync, install_clip_warnings  # noqa: F401
from . import dynamo as _dynamo

_dynamo.register()
install_clip_warnings()

#!/usr/bin/env python3
"""JAX (jax.jit on the CPU): one executable per training step, jax.jit of
value_and_grad of the loss plus the SGD momentum update (PyTorch's form:
buf = 0.9 buf + grad, p -= 0.01 buf), with the parameters, momentum buffers
and batch-norm statistics donated (donate_argnums) so XLA updates them in
place. Models: jax_models.MODELS (mlp, resnet18, BERT_pytorch); the others
are not written in JAX (a cell saying so).

    JAX_PLATFORMS=cpu $(scripts/pyenv.sh jax) bench/peers/jax_step.py --model resnet18

compiles: XLA backend compiles (jax.monitoring's backend-compile event),
warm-up included; executions_per_step: jitted calls per step (the loop runs
no other JAX op, which the compile count would show). The initial weights
are JAX's own random draws (no torch in this environment), so the first
loss only agrees with the torch systems' to the first digit or so.
"""
import os
import sys

import peers_common as pc

JAX_MODELS = ("mlp", "resnet18", "BERT_pytorch")
# the event jax records once per XLA compile (jax/_src/dispatch.py)
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def body(args):
    import jax
    import jax.numpy as jnp
    from jax import monitoring
    import jax_models
    cell = pc.Cell(args)
    count = {"executions": 0, "compiles": 0}

    def on_event(event, duration, **kw):
        if event == BACKEND_COMPILE_EVENT:
            count["compiles"] += 1
    monitoring.register_event_duration_secs_listener(on_event)

    init, apply = jax_models.MODELS[args.model]
    key = jax.random.PRNGKey(0)
    kx, ky, kp, kd = jax.random.split(key, 4)
    if args.tokens:
        x = jax.random.randint(kx, args.input, 0, args.classes)
    else:
        x = jax.random.uniform(kx, args.input, jnp.float32, -1.0, 1.0)
    y = jax.random.randint(ky, args.target, 0, args.classes)
    params, state = init(kp, args)
    bufs = jax.tree_util.tree_map(jnp.zeros_like, params)

    def loss_fn(params, state, x, y, key):
        logits, new_state = apply(params, state, x, key)
        logits = logits.reshape(-1, logits.shape[-1])
        logp = jax.nn.log_softmax(logits)
        loss = -jnp.take_along_axis(logp, y.reshape(-1, 1), axis=1).mean()
        return loss, new_state

    def train_step(params, bufs, state, x, y, i):
        key = jax.random.fold_in(kd, i)
        (loss, state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, state, x, y, key)
        bufs = jax.tree_util.tree_map(lambda b, g: pc.MOMENTUM * b + g, bufs, grads)
        params = jax.tree_util.tree_map(lambda p, b: p - pc.LR * b, params, bufs)
        return params, bufs, state, loss

    jstep = jax.jit(train_step, donate_argnums=(0, 1, 2))
    box = {"params": params, "bufs": bufs, "state": state, "i": 0}
    jax.block_until_ready((x, y, params, bufs, state))

    def step():
        box["params"], box["bufs"], box["state"], loss = jstep(
            box["params"], box["bufs"], box["state"], x, y, box["i"])
        box["i"] += 1
        count["executions"] += 1
        return loss

    cell.time_steps(step, lambda: jax.block_until_ready(box["params"]), lambda: dict(count),
                    lambda l: float(l))
    cell.d["jit_cache_size"] = jstep._cache_size()
    return cell.finish("executions", ("compiles",))


def versions():
    import jax
    import jaxlib
    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__}


if __name__ == "__main__":
    args = pc.parse_args("jax", models=pc.MODELS)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if args.model not in JAX_MODELS:
        pc.emit(args, {"system": "jax", "model": args.model, "size": args.size,
                       "unsupported": f"not written in JAX (only {', '.join(JAX_MODELS)})"})
        sys.exit(0)
    sys.exit(pc.run_cell(args, body, versions))

"""The models of the JAX runner, written with jax.numpy and jax.lax only
(no Flax in the pinned set): the MLP, resnet18 (torchvision's layout and
initialisation: He-normal fan-out convolutions, batch norm in training mode
with running statistics updated like PyTorch's, momentum 0.1, unbiased
variance) and BERT_pytorch (tests/reference/bert_ref.py: token, position and
segment embeddings, LayerNorm eps 1e-12, post-norm encoder layers of 12
heads with exact GELU, dropout 0.1 on embeddings, attention probabilities
and both residual branches, a linear head to the vocabulary).

Each init(key, args) returns (params, state); apply(params, state, x, key)
returns (logits, new state). NCHW images as lazyc's zoo takes them.
"""
import math

import jax
import jax.numpy as jnp
from jax import lax

import peers_common as pc


def linear_init(key, fan_in, fan_out, bias=True):
    # PyTorch's nn.Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    k1, k2 = jax.random.split(key)
    bound = 1.0 / math.sqrt(fan_in)
    p = {"w": jax.random.uniform(k1, (fan_out, fan_in), jnp.float32, -bound, bound)}
    if bias:
        p["b"] = jax.random.uniform(k2, (fan_out,), jnp.float32, -bound, bound)
    return p


def linear(p, x):
    y = x @ p["w"].T
    return y + p["b"] if "b" in p else y


# --- MLP (bench/bench_mlp.c's) ----------------------------------------------

def mlp_init(key, args):
    m = pc.MLP
    sizes = [m["in"]] + [m["hidden"]] * m["depth"] + [m["classes"]]
    keys = jax.random.split(key, len(sizes) - 1)
    return [linear_init(k, a, b, bias=False) for k, a, b in zip(keys, sizes, sizes[1:])], {}


def mlp_apply(params, state, x, key):
    for p in params[:-1]:
        x = jax.nn.relu(linear(p, x))
    return linear(params[-1], x), state


# --- resnet18 ---------------------------------------------------------------

def conv_init(key, cin, cout, k):
    std = math.sqrt(2.0 / (cout * k * k))   # kaiming_normal_, fan_out, relu
    return jax.random.normal(key, (cout, cin, k, k), jnp.float32) * std


def conv(w, x, stride, pad):
    return lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad), (pad, pad)],
                                    dimension_numbers=("NCHW", "OIHW", "NCHW"))


def bn_init(c):
    return {"g": jnp.ones((c,)), "b": jnp.zeros((c,))}, {"mean": jnp.zeros((c,)), "var": jnp.ones((c,))}


def bn(p, s, x):
    mean = x.mean(axis=(0, 2, 3))
    var = x.var(axis=(0, 2, 3))
    n = x.size // x.shape[1]
    new_s = {"mean": 0.9 * s["mean"] + 0.1 * mean,
             "var": 0.9 * s["var"] + 0.1 * var * (n / max(n - 1, 1))}
    inv = lax.rsqrt(var + 1e-5) * p["g"]
    y = (x - mean[None, :, None, None]) * inv[None, :, None, None] + p["b"][None, :, None, None]
    return y, new_s


def resnet18_init(key, args):
    keys = iter(jax.random.split(key, 64))
    params, state = {"conv1": conv_init(next(keys), 3, 64, 7)}, {}
    params["bn1"], state["bn1"] = bn_init(64)
    cin = 64
    for li, cout in enumerate((64, 128, 256, 512)):
        for bi in range(2):
            stride = 2 if li > 0 and bi == 0 else 1
            name = f"layer{li + 1}.{bi}"
            p, s = {"conv1": conv_init(next(keys), cin, cout, 3),
                    "conv2": conv_init(next(keys), cout, cout, 3)}, {}
            p["bn1"], s["bn1"] = bn_init(cout)
            p["bn2"], s["bn2"] = bn_init(cout)
            if stride != 1 or cin != cout:
                p["down"] = conv_init(next(keys), cin, cout, 1)
                p["down_bn"], s["down_bn"] = bn_init(cout)
            params[name], state[name] = p, s
            cin = cout
    params["fc"] = linear_init(next(keys), 512, args.classes)
    return params, state


def resnet18_apply(params, state, x, key):
    new = {}
    x, new["bn1"] = bn(params["bn1"], state["bn1"], conv(params["conv1"], x, 2, 3))
    x = jax.nn.relu(x)
    x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2),
                          [(0, 0), (0, 0), (1, 1), (1, 1)])
    for li in range(4):
        for bi in range(2):
            name = f"layer{li + 1}.{bi}"
            p, s, ns = params[name], state[name], {}
            stride = 2 if li > 0 and bi == 0 else 1
            out, ns["bn1"] = bn(p["bn1"], s["bn1"], conv(p["conv1"], x, stride, 1))
            out = jax.nn.relu(out)
            out, ns["bn2"] = bn(p["bn2"], s["bn2"], conv(p["conv2"], out, 1, 1))
            if "down" in p:
                x, ns["down_bn"] = bn(p["down_bn"], s["down_bn"], conv(p["down"], x, stride, 0))
            x = jax.nn.relu(out + x)
            new[name] = ns
    x = x.mean(axis=(2, 3))
    return linear(params["fc"], x), new


# --- BERT_pytorch -----------------------------------------------------------

VOCAB, HIDDEN, HEADS, FFN, MAX_LEN, DROP = 30522, 768, 12, 3072, 512, 0.1


def ln_init():
    return {"g": jnp.ones((HIDDEN,)), "b": jnp.zeros((HIDDEN,))}


def layer_norm(p, x, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + eps) * p["g"] + p["b"]


def dropout(key, x):
    keep = jax.random.bernoulli(key, 1.0 - DROP, x.shape)
    return jnp.where(keep, x / (1.0 - DROP), 0.0)


def bert_init(key, args):
    layers = pc.ref.BERT_LAYERS[args.size]
    keys = iter(jax.random.split(key, 8 + 4 * layers))
    params = {"tok": jax.random.normal(next(keys), (VOCAB, HIDDEN)),
              "pos": jax.random.normal(next(keys), (MAX_LEN, HIDDEN)),
              "seg": jax.random.normal(next(keys), (2, HIDDEN)),
              "norm": ln_init(), "layers": []}
    for _ in range(layers):
        params["layers"].append({
            "in_proj": linear_init(next(keys), HIDDEN, 3 * HIDDEN),
            "out_proj": linear_init(next(keys), HIDDEN, HIDDEN),
            "linear1": linear_init(next(keys), HIDDEN, FFN),
            "linear2": linear_init(next(keys), FFN, HIDDEN),
            "norm1": ln_init(), "norm2": ln_init()})
    params["head"] = linear_init(next(keys), HIDDEN, VOCAB)
    return params, {}


def bert_apply(params, state, tokens, key):
    b, s = tokens.shape
    keys = iter(jax.random.split(key, 1 + 4 * len(params["layers"])))
    x = params["tok"][tokens] + params["pos"][:s][None] + params["seg"][0][None, None]
    x = dropout(next(keys), layer_norm(params["norm"], x, 1e-12))
    hd = HIDDEN // HEADS
    for p in params["layers"]:
        qkv = linear(p["in_proj"], x).reshape(b, s, 3, HEADS, hd)
        q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
        att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd), axis=-1)
        att = dropout(next(keys), att)
        a = (att @ v).transpose(0, 2, 1, 3).reshape(b, s, HIDDEN)
        x = layer_norm(p["norm1"], x + dropout(next(keys), linear(p["out_proj"], a)), 1e-5)
        h = dropout(next(keys), jax.nn.gelu(linear(p["linear1"], x), approximate=False))
        x = layer_norm(p["norm2"], x + dropout(next(keys), linear(p["linear2"], h)), 1e-5)
    return linear(params["head"], x), state


MODELS = {"mlp": (mlp_init, mlp_apply), "resnet18": (resnet18_init, resnet18_apply),
          "BERT_pytorch": (bert_init, bert_apply)}

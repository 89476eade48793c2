#!/usr/bin/python3
"""Writes the safetensors fixtures of tests/test_safetensors.c.

    /usr/bin/python3 tests/reference/gen_safetensors.py [OUTDIR]

OUTDIR defaults to tests/fixtures/safetensors (committed); test_fixtures_fresh.sh
regenerates it and checks byte-identity.

torch.safetensors is written by write_safetensors.save_file the way PyTorch's
safetensors package writes a state dict: mixed dtypes (F32, BF16, F16, I64,
I32), a 0-d tensor, an empty tensor, __metadata__. torch_expected.lzf holds
the same tensors in the parity-fixture format (gen_fixtures.py), widened by
PyTorch itself (bf16/f16 -> f32), so the C test checks lazyc's reading of
every value bit for bit.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_fixtures import write_fixture  # noqa: E402
from write_safetensors import save_file  # noqa: E402

METADATA = {"format": "pt", "epoch": "3", "note": "quote \" backslash \\ tab \t end"}


def tensors():
    g = torch.Generator().manual_seed(1234)
    rand = lambda *shape: torch.rand(shape, generator=g) * 4 - 2  # noqa: E731
    return {
        "conv.weight": rand(4, 3, 3, 3),
        "conv.bias": rand(4).to(torch.bfloat16),
        # bf16 cannot hold these exactly: PyTorch rounds them, lazyc widens what is stored
        "fc.weight": (rand(3, 5) * 1000).to(torch.bfloat16),
        "fc.bias": torch.tensor([0.5, -1.25e-3, 65504.0, 6.0e-8, -0.0], dtype=torch.float16),
        "bn.num_batches_tracked": torch.tensor(7, dtype=torch.int64),
        "ids": torch.tensor([[3, -1, 2 ** 31 - 1], [0, -2 ** 31, 9]], dtype=torch.int32),
        "big": torch.tensor([2 ** 62, -5], dtype=torch.int64),
        "scale": torch.tensor(0.125),
        "empty": torch.zeros(0, 3),
    }


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "fixtures", "safetensors")
    os.makedirs(outdir, exist_ok=True)
    ts = tensors()
    save_file(ts, os.path.join(outdir, "torch.safetensors"), metadata=METADATA)
    widened = [(n.replace(".", "_"), t.float() if t.is_floating_point() else t) for n, t in ts.items()]
    write_fixture(outdir, "torch_expected", "safetensors", widened)
    print(f"gen_safetensors: wrote {len(ts)} tensors to {os.path.normpath(outdir)}")


if __name__ == "__main__":
    main()

"""Golden values of sparse attention from torch: forward and gradients.

  python scripts/gen_fixtures_attention.py  -> crates/attention/tests/fixtures/attention_torch.json

Needs torch (a venv outside the repo). Each case: a pattern (CSR indptr / indices, some
queries with no key), Q, K, V (leading batch and head dims, some broadcast), a scale, an
optional bias (one value per pair, in pattern order), an upstream gradient G; torch's
output O = softmax over the valid keys of (scale Q K^T + bias), times V, computed densely
with the rows that have no valid key set to zero, and torch autograd's gradients of
sum(O * G) for Q, K, V and the bias. float64 cases, and float32 cases whose inputs are
the float64 ones rounded (torch computing in float32).
"""
import json
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "crates", "attention", "tests", "fixtures", "attention_torch.json")


def dense_attention(q, k, v, valid, scale, bias_dense):
    s = scale * q @ k.transpose(-1, -2)
    if bias_dense is not None:
        s = s + bias_dense
    s = s.masked_fill(~valid, float("-inf"))
    rows = valid.any(-1, keepdim=True)
    p = torch.softmax(s.masked_fill(~rows, 0.0), -1).masked_fill(~valid, 0.0)
    return p @ v


def case(rng, name, qs, ks, vs, n, m, density, scale, with_bias, dtype):
    valid = rng.random((n, m)) < density
    valid[rng.integers(n)] = False  # a query with no valid key
    indptr = np.concatenate([[0], np.cumsum(valid.sum(1))])
    indices = np.nonzero(valid)[1]
    x = [rng.standard_normal(s) for s in (qs, ks, vs)]
    bias = rng.standard_normal(int(valid.sum())) if with_bias else None
    vt = torch.tensor(valid)
    q, k, v = (torch.tensor(a, dtype=dtype, requires_grad=True) for a in x)
    b = torch.tensor(bias, dtype=dtype, requires_grad=True) if with_bias else None
    bd = torch.zeros(n, m, dtype=dtype).masked_scatter(vt, b) if with_bias else None
    o = dense_attention(q, k, v, vt, scale, bd)
    g = torch.tensor(rng.standard_normal(tuple(o.shape)), dtype=dtype)
    (o * g).sum().backward()
    flat = lambda t: t.detach().double().reshape(-1).tolist()  # noqa: E731
    return {
        "name": name,
        "dtype": "f64" if dtype == torch.float64 else "f32",
        "shape": [n, m],
        "indptr": indptr.tolist(),
        "indices": indices.tolist(),
        "q_shape": list(qs), "k_shape": list(ks), "v_shape": list(vs),
        "q": flat(q), "k": flat(k), "v": flat(v),
        "scale": scale,
        "bias": None if b is None else flat(b),
        "grad": flat(g),
        "out_shape": list(o.shape),
        "out": flat(o),
        "dq": flat(q.grad), "dk": flat(k.grad), "dv": flat(v.grad),
        "dbias": None if b is None else flat(b.grad),
    }


def main():
    cases = []
    for dtype in (torch.float64, torch.float32):
        rng = np.random.default_rng(0)
        cases.append(case(rng, "single head", (9, 5), (11, 5), (11, 3), 9, 11, 0.4, 0.45, False, dtype))
        cases.append(case(rng, "batch, heads, bias", (2, 3, 8, 4), (1, 3, 8, 4), (3, 8, 6), 8, 8, 0.5, 0.5, True, dtype))
        cases.append(case(rng, "wide head", (6, 40), (6, 40), (6, 33), 6, 6, 0.7, 0.15, True, dtype))
    with open(OUT, "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f, separators=(",", ":"))
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()

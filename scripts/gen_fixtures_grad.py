"""Golden fixtures of the VJPs (gradients) from torch autograd over torch.masked.

  python scripts/gen_fixtures_grad.py  -> tests/fixtures/grad.json

Needs torch and numpy (a venv outside the repo). Every case is float64: an input with a
mask that has a fully masked lane, a lane with one valid element and an amax tie, garbage
(NaN, inf) under the mask, an upstream gradient `g` with NaN at the invalid output
positions (which must not be read), and torch's gradient of `(op(x) * g).sum()` over the
valid outputs, taken with `torch.autograd.grad`.

Reductions and normalizations run through torch.masked (sum, prod, amax, amin, mean, norm,
logsumexp, median, softmax, log_softmax, softmin, normalize, cumsum, cumprod);
quantile (not in torch.masked), var and std (torch.masked's gradients of these are NaN
across the whole batch when one lane is fully masked, pytorch #41508) through torch.var,
torch.std and a linear-interpolation quantile over torch.sort(stable=True) (ties rank by
position, the contract's order) on each lane's valid values; the
unary elementwise ops through the plain torch function on the data, the gradient kept at
the valid positions.

Where torch's gradient is NaN but the contract says otherwise, the contract's value is
written and the case is marked ("contract": what was applied): a masked-out position or a
fully masked lane gets 0, var/std on a lane with count <= correction get 0, logsumexp of
a lane whose valid values are all -inf splits g evenly. Everything else is torch's value.
"""
import json
import os
import sys
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_json import enc  # noqa: E402

warnings.filterwarnings("ignore")
rng = np.random.default_rng(1616)
M = torch.masked
F = torch.nn.functional


def data(shape):
    """Values, mask: lane 0 (last dim) fully masked, lane 1 with one valid element, a tie
    for the maximum in lane 2, NaN / inf under the mask."""
    n = int(np.prod(shape))
    x = rng.uniform(-2, 2, n).round(3)
    m = rng.uniform(size=n) < 0.7
    last = shape[-1]
    m[:last] = False
    m[last:2 * last] = False
    m[last + 1] = True
    if n >= 3 * last:
        m[2 * last:3 * last] = True
        x[2 * last + 1] = x[2 * last + 3] = 5.0
    garbage = np.where(rng.uniform(size=n) < 0.5, np.nan, np.inf)
    x = np.where(m, x, garbage)
    return x.reshape(shape), m.reshape(shape)


def lanes_valid(m, dims):
    """Whether each output position (dims reduced, keepdim) has a valid element."""
    return m.any(axis=tuple(dims), keepdims=True) if dims is not None else m.any(keepdims=True)


def run(name, x, m, dims, keepdim, opts, forward):
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    mt = torch.tensor(m)
    out = forward(xt, mt)
    # the forward's valid outputs: reductions by their lanes, maps by the input mask
    if out.shape == xt.shape and name in MAPS + UNARY:
        ok = m
    else:
        d = dims if dims is not None else list(range(x.ndim))
        ok = lanes_valid(m, d)
        if not keepdim:
            ok = ok.reshape(out.shape)
    g = rng.uniform(-1, 1, out.shape).round(3)
    g_in = np.where(ok, g, np.nan)
    gt = torch.tensor(np.where(ok, g, 0.0))
    # the valid outputs only: torch.where sends no gradient to the others
    loss = (torch.where(torch.tensor(ok), out, torch.zeros_like(out)) * gt).sum()
    (gx,) = torch.autograd.grad(loss, xt, allow_unused=True)
    gx = np.zeros_like(x) if gx is None else gx.detach().numpy().copy()
    applied = []
    # the contract where torch differs
    if np.isnan(gx[~m]).any() or (gx[~m] != 0).any():
        applied.append("0 at masked-out positions")
    gx[~m] = 0.0
    if name not in MAPS + UNARY:
        d = dims if dims is not None else list(range(x.ndim))
        valid_count = np.broadcast_to(m.sum(axis=tuple(d), keepdims=True), x.shape)
        lane_ok = np.broadcast_to(lanes_valid(m, d), x.shape)
        if name in ("var", "std"):
            c = opts["correction"]
            bad = m & (valid_count <= c)
            if np.isnan(gx[bad]).any() or (gx[bad] != 0).any():
                applied.append("0 where count <= correction")
            gx[bad] = 0.0
            if name == "std":
                xv = np.where(m, x, 0.0)
                s = (xv * m).sum(axis=tuple(d), keepdims=True)
                mean = s / np.maximum(m.sum(axis=tuple(d), keepdims=True), 1)
                spread = ((xv - mean) ** 2 * m).sum(axis=tuple(d), keepdims=True)
                zero = m & np.broadcast_to(spread == 0, x.shape)
                if np.isnan(gx[zero]).any():
                    applied.append("0 for zero spread")
                gx[zero] = 0.0
        gx[~lane_ok] = 0.0
    return {
        "op": name,
        "shape": list(x.shape),
        "x": [enc(v) for v in x.ravel()],
        "mask": m.ravel().tolist(),
        "dims": dims,
        "keepdim": keepdim,
        "options": opts,
        "g_shape": list(out.shape),
        "g": [enc(v) for v in g_in.ravel()],
        "grad": [enc(v) for v in gx.ravel()],
        "contract": applied,
    }


MAPS = ["softmax", "log_softmax", "softmin", "normalize", "cumsum", "cumprod"]
UNARY = ["abs", "neg", "square", "relu", "sqrt", "exp", "log", "sin", "tanh", "sigmoid",
         "atan", "softplus", "gelu", "silu", "erf", "clamp", "pow"]


def cases():
    out = []
    for shape in [(4, 6), (3, 2, 4)]:
        x, m = data(shape)
        nd = len(shape)
        dim_sets = [[nd - 1], [0]] + ([[0, 2]] if nd == 3 else [])
        for dims in dim_sets:
            for keepdim in (False, True):
                def red(name, f, opts=None):
                    out.append(run(name, x, m, dims, keepdim, opts or {},
                                   lambda xt, mt: f(xt, mt)))
                kw = dict(dim=tuple(dims), keepdim=keepdim)
                red("sum", lambda a, k: M.sum(a, mask=k, **kw))
                if len(dims) == 1:
                    red("prod", lambda a, k: M.prod(a, dim=dims[0], keepdim=keepdim, mask=k))
                red("amax", lambda a, k: M.amax(a, mask=k, **kw))
                red("amin", lambda a, k: M.amin(a, mask=k, **kw))
                red("mean", lambda a, k: M.mean(a, mask=k, **kw))
                # torch.masked's var/std gradients are NaN across the whole batch when one
                # lane is fully masked (pytorch #41508): torch.var / torch.std on each
                # lane's valid values instead
                for c in (1.0, 0.0, 2.5):
                    red("var", lambda a, k, c=c: per_lane(a, k, dims, keepdim, lambda v: torch.var(v, correction=c)), {"correction": c})
                    red("std", lambda a, k, c=c: per_lane(a, k, dims, keepdim, lambda v: torch.std(v, correction=c)), {"correction": c})
                for p in (2.0, 1.0, 3.0):
                    red("norm", lambda a, k, p=p: M.norm(a, p, mask=k, **kw), {"ord": p})
                red("logsumexp", lambda a, k: M.logsumexp(a, mask=k, **kw))
                if len(dims) == 1:
                    red("median", lambda a, k: M.median(a, dim=dims[0], keepdim=keepdim, mask=k), {"mode": "lower"})
                    for q in (0.3, 0.5, 0.9):
                        red("quantile", lambda a, k, q=q: per_lane(a, k, dims, keepdim, lambda v: stable_quantile(v, q)),
                            {"q": q, "interpolation": "linear"})
        for d in range(nd):
            for name, f, opts in [
                ("softmax", lambda a, k, d=d: M.softmax(a, d, mask=k), {}),
                ("log_softmax", lambda a, k, d=d: M.log_softmax(a, d, mask=k), {}),
                ("softmin", lambda a, k, d=d: M.softmin(a, d, mask=k), {}),
                ("normalize", lambda a, k, d=d: M.normalize(a, 2.0, d, mask=k), {"ord": 2.0}),
                ("cumsum", lambda a, k, d=d: M.cumsum(a, d, mask=k), {}),
                ("cumprod", lambda a, k, d=d: M.cumprod(a, d, mask=k), {}),
            ]:
                out.append(run(name, x, m, [d], False, opts, f))
        xp = np.where(m, np.abs(x) + 0.1, x)  # a positive domain for sqrt and log
        for name in UNARY:
            opts = {}
            src = xp if name in ("sqrt", "log", "pow") else x
            if name == "clamp":
                opts = {"min": -0.5, "max": 0.5}
                f = lambda a, k: torch.clamp(a, -0.5, 0.5)
            elif name == "pow":
                opts = {"exponent": 2.5}
                f = lambda a, k: torch.pow(a, 2.5)
            elif name == "relu":
                f = lambda a, k: torch.relu(a)
            elif name in ("softplus", "gelu", "silu"):
                f = lambda a, k, name=name: getattr(F, name)(a)
            else:
                f = lambda a, k, name=name: getattr(torch, name)(a)
            out.append(run(name, src, m, None, False, opts, f))
    return out


def stable_quantile(v, q):
    """torch.quantile's linear interpolation over a stable sort: tied values rank by
    position, the contract's order (torch.quantile's own sort may order ties either way)."""
    s, _ = torch.sort(v, stable=True)
    pos = q * (v.numel() - 1)
    lo = int(np.floor(pos))
    frac = pos - lo
    if frac == 0:
        return s[lo]
    return s[lo] + frac * (s[lo + 1] - s[lo])


def per_lane(a, k, dims, keepdim, f):
    """f of each lane's valid values (the reduced dims flattened, kept dims first); NaN
    for a lane with no valid value."""
    nd = a.dim()
    kept = [d for d in range(nd) if d not in dims]
    perm = kept + list(dims)
    ap = a.permute(perm)
    kp = k.permute(perm)
    nk = int(np.prod([a.shape[d] for d in kept])) if kept else 1
    flat = ap.reshape(nk, -1)
    fk = kp.reshape(nk, -1)
    vals = []
    for r in range(nk):
        v = flat[r][fk[r]]
        vals.append(f(v) if v.numel() else torch.tensor(float("nan"), dtype=a.dtype))
    out = torch.stack(vals).reshape([a.shape[d] for d in kept])
    if keepdim:
        for d in sorted(dims):
            out = out.unsqueeze(d)
    return out


def main():
    cs = cases()
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "grad.json")
    with open(path, "w") as f:
        json.dump({"torch": torch.__version__, "cases": cs}, f, separators=(",", ":"))
    marked = sum(1 for c in cs if c["contract"])
    print(f"{len(cs)} cases ({marked} with the contract applied where torch differs) -> {path}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes python/masked/_ops.py and python/masked/_methods.py from the engine's registry.

Every op of the registry becomes a module function with torch.masked's signature (where
torch.masked has the op) and a `MaskedArray` method with the same arguments after
`input`. Run it after adding an op (with the package built: `scripts/python_test.sh`
builds it); python/tests/test_registry.py fails while the files are stale.

    python scripts/gen_python_ops.py            # rewrite the two files
    python scripts/gen_python_ops.py --check    # exit 1 if they are stale
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PKG = ROOT / "python" / "masked"

# option -> (default as Python source, positional?)
DEFAULTS = {
    "correction": ("None", False),
    "ord": ("2.0", True),
    "eps": ("1e-12", False),
    "q": ("0.5", True),
    "interpolation": ('"linear"', False),
    "mode": ('"avg"', False),
    "min": ("None", True),
    "max": ("None", True),
    "exponent": (None, True),
    "nan": ("0.0", True),
    "posinf": ("None", True),
    "neginf": ("None", True),
}
# options that come before `dim` (torch.masked's norm and quantile)
BEFORE_DIM = {"ord", "q"}


def signature(name: str, kind: str, options: list[str]) -> tuple[str, str, str]:
    """(parameters, call of the helper, the method's parameters) for one op."""
    pos_before = [o for o in options if DEFAULTS[o][1] and o in BEFORE_DIM]
    pos_after = [o for o in options if DEFAULTS[o][1] and o not in BEFORE_DIM]
    kw = [o for o in options if not DEFAULTS[o][1]]

    def p(o: str) -> str:
        d = DEFAULTS[o][0]
        return o if d is None else f"{o}={d}"

    opts = "{" + ", ".join(f'"{o}": {o}' for o in options) + "}"
    if kind in ("reduce", "reduce_one"):
        dim_default = "-1" if name in ("median", "nanmedian", "median_index") else "None"
        params = [p(o) for o in pos_before] + [f"dim={dim_default}"] + [p(o) for o in pos_after]
        extra = []
        if "correction" in options:
            params.append("unbiased=None")
            opts = '{"correction": _correction(unbiased, correction)}'
        params += ["*"] + [p(o) for o in kw] + ["keepdim=False", "dtype=None", "mask=None"]
        call = f'_reduce("{name}", input, dim, keepdim, dtype, mask, {opts})'
        del extra
    elif kind == "normalize":
        dim = "dim=None" if pos_before else "dim"
        params = [p(o) for o in pos_before] + [dim] + [p(o) for o in pos_after]
        params += ["*"] + [p(o) for o in kw] + ["dtype=None", "mask=None", "out=None"]
        call = f'_normalize("{name}", input, dim, dtype, mask, out, {opts})'
    elif kind == "unary":
        params = [p(o) for o in pos_before + pos_after]
        params += ["*"] + [p(o) for o in kw] + ["mask=None", "out=None"]
        if name == "pow":
            call = '_pow(input, exponent, mask, out)'
        else:
            call = f'_unary("{name}", input, mask, out, {opts})'
    else:  # binary
        params = ["other", "*", 'rule="strict"', "mask=None", "out=None"]
        call = f'_binary("{name}", input, other, rule, mask, out)'
    if params and params[-1] == "*":
        params.pop()
    full = ", ".join(["input"] + params)
    # the method: the same parameters after `self`, without mask= (the array has one)
    mparams = [x for x in params if x != "mask=None"]
    mcall_args = []
    star = False
    for x in params:
        if x == "*":
            star = True
            continue
        n = x.split("=")[0]
        if n == "mask":
            continue
        mcall_args.append(f"{n}={n}" if star else n)
    if mparams and mparams[-1] == "*":
        mparams.pop()
    method = (", ".join(["self"] + mparams), ", ".join(["self"] + mcall_args))
    return full, call, method


def doc(name: str, kind: str, summary: str, differentiable: bool) -> str:
    lines = [summary, ""]
    if kind in ("reduce", "reduce_one"):
        lines.append(
            "A reduction over `dim` (None: every dim; "
            + ("one dim or None" if kind == "reduce_one" else "an int or a tuple of ints")
            + "), keepdim either way; `dtype` computes in that dtype (torch's dtype=)."
        )
    elif kind == "normalize":
        lines.append("A normalization along one `dim` (required); `out=` writes into a caller's MaskedArray.")
    elif kind == "unary":
        lines.append("Elementwise; the mask is kept (NaN under it never leaks). `out=` writes into a caller's MaskedArray.")
    else:
        lines.append(
            "Elementwise on two operands with NumPy broadcasting, Python scalars on either side; "
            "`rule='strict'` (MaskedTensor's: equal masks) or `rule='and'` (numpy.ma's: valid where both are)."
        )
    lines.append(
        "`input` is a MaskedArray (then `mask` must be None) or anything MaskedArray takes, with "
        "`mask` torch.masked's mask (True = valid). Sparse in, sparse out."
    )
    if differentiable:
        lines.append("Differentiable: `mk.vjp` and `mk.torch`." if kind != "binary" else "")
    text = "\n    ".join(x for x in lines if x is not None).rstrip()
    return "\n".join(line.rstrip() for line in text.split("\n"))


def render(ops: list) -> tuple[str, str]:
    head = (
        '"""Every op of the registry as a module function (generated by '
        'scripts/gen_python_ops.py from the engine\'s registry: do not edit)."""\n\n'
        "# ruff: noqa\n"
        "from __future__ import annotations\n\n"
        "from typing import Any\n\n"
        "from ._api import _binary, _correction, _normalize, _pow, _reduce, _unary\n"
        "from ._array import MaskedArray\n\n"
        f"__all__ = {sorted(o[0] for o in ops)!r}\n"
    )
    fns = []
    mth = [
        '"""The op methods of MaskedArray (generated by scripts/gen_python_ops.py from the '
        'engine\'s registry: do not edit)."""\n\n'
        "# ruff: noqa\n"
        "from __future__ import annotations\n\n"
        "from typing import Any\n\n\n"
        "class _Ops:\n"
        '    """Every op of the registry as a method (the module function with `self` as '
        'input)."""\n\n'
        "    __slots__ = ()\n"
    ]
    for name, kind, options, differentiable, summary in ops:
        full, call, (mparams, margs) = signature(name, kind, list(options))
        d = doc(name, kind, summary, differentiable)
        fns.append(
            f"\n\ndef {name}({full}) -> MaskedArray:\n"
            f'    """{d}\n    """\n'
            f"    return {call}\n"
        )
        mth.append(
            f"\n    def {name}({mparams}) -> Any:\n"
            f'        """{summary} (`mk.{name}` with this array as input)."""\n'
            f"        from . import _ops\n\n"
            f"        return _ops.{name}({margs})\n"
        )
    return head + "".join(fns), "".join(mth)


def load_extension():
    """The built extension module, loaded without running the package's __init__ (which
    imports the files this script writes)."""
    import importlib.machinery
    import importlib.util

    spec = importlib.util.find_spec("masked")
    places = list(spec.submodule_search_locations) if spec else []
    places.append(str(PKG))
    for place in places:
        for f in sorted(pathlib.Path(place).glob("_masked*.so")) + sorted(pathlib.Path(place).glob("_masked*.pyd")):
            loader = importlib.machinery.ExtensionFileLoader("masked._masked", str(f))
            s = importlib.util.spec_from_loader("masked._masked", loader)
            m = importlib.util.module_from_spec(s)
            loader.exec_module(m)
            return m
    raise SystemExit("the extension is not built: run scripts/python_test.sh (or pip install .)")


def main() -> int:
    _masked = load_extension()

    ops_src, methods_src = render(_masked.ops())
    targets = {PKG / "_ops.py": ops_src, PKG / "_methods.py": methods_src}
    if "--check" in sys.argv:
        stale = [str(p) for p, s in targets.items() if not p.exists() or p.read_text() != s]
        if stale:
            print("stale (run scripts/gen_python_ops.py):", *stale)
            return 1
        return 0
    for p, s in targets.items():
        p.write_text(s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Coefficients of the f32 `asinh` and `acosh` polynomials (crates/core/src/dtype/math.rs).

Chebyshev interpolation in f64 (numpy only), converted to the power basis the Rust code
evaluates by Horner's rule (printed highest degree first), each coefficient rounded to f32; then the f32 evaluation
simulated in numpy over 2M points of each range and its worst error in ulps printed
against numpy's f64 function rounded to f32 (the Rust test checks the whole f32 range).

  python scripts/fit_hyperbolic_f32.py

- asinh, |x| <= 1: asinh(a) = a + a z P(z), z = a^2 (degree 7 in z).
- asinh, 1 < |x| <= 1.5: asinh(a) = Q(a - 1.25) (degree 7).
- acosh, 1 <= x <= 2: acosh(1 + t) = sqrt(2t) H(t) (degree 6 in t).
"""
import numpy as np
from numpy.polynomial import chebyshev as C
from numpy.polynomial import Polynomial


def fit(f, lo, hi, deg):
    """Power-basis coefficients in w (lo <= w <= hi) of f's Chebyshev interpolant."""
    n = deg + 1
    t = np.cos(np.pi * (2 * np.arange(n) + 1) / (2 * n))
    w = lo + (t + 1) * (hi - lo) / 2
    p = Polynomial(C.cheb2poly(C.chebfit(t, f(w), deg)))
    # t = (2w - lo - hi) / (hi - lo)
    return p(Polynomial([-(lo + hi) / (hi - lo), 2 / (hi - lo)])).coef


def horner32(c, w):
    p = np.full_like(w, np.float32(c[-1]))
    for ci in c[-2::-1]:
        p = (p * w + np.float32(ci)).astype(np.float32)
    return p


def worst_ulps(r, ref):
    a = r.astype(np.float32).view(np.int32).astype(np.int64)
    b = ref.astype(np.float32).view(np.int32).astype(np.int64)
    return int(np.abs(a - b).max())


def show(name, coefs, err):
    """The coefficients highest degree first, as the Rust arrays hold them."""
    print(f"{name}: worst {err} ulp")
    print("    [" + ", ".join(str(np.float32(c)) for c in coefs[::-1]) + "]")


def g(z):
    """(asinh(sqrt z) / sqrt z - 1) / z, -1/6 at 0."""
    a = np.sqrt(np.maximum(z, 1e-300))
    return np.where(z < 1e-8, -1 / 6 + 3 * z / 40, (np.arcsinh(a) / a - 1) / np.maximum(z, 1e-300))


def h(t):
    """acosh(1 + t) / sqrt(2t), 1 at 0."""
    s = np.sqrt(2 * np.maximum(t, 1e-300))
    return np.where(t < 1e-8, 1 - t / 12, np.arccosh(1 + t) / s)


p = fit(g, 0.0, 1.0, 7)
a = np.linspace(0, 1, 2_000_001).astype(np.float32)
z = (a * a).astype(np.float32)
r = (a + a * (z * horner32(p, z)).astype(np.float32)).astype(np.float32)
show("asinh P (|x| <= 1, in z = x^2)", p, worst_ulps(r, np.arcsinh(a.astype(np.float64))))

q = fit(lambda w: np.arcsinh(w + 1.25), -0.25, 0.25, 7)  # in w = a - 1.25
a = np.linspace(1, 1.5, 2_000_001).astype(np.float32)
r = horner32(q, (a - np.float32(1.25)).astype(np.float32))
show("asinh Q (1 < |x| <= 1.5, in w = |x| - 1.25)", q, worst_ulps(r, np.arcsinh(a.astype(np.float64))))

hc = fit(h, 0.0, 1.0, 6)
x = np.linspace(1, 2, 2_000_001).astype(np.float32)
t = (x - np.float32(1)).astype(np.float32)
r = (np.sqrt((2 * t).astype(np.float32)) * horner32(hc, t)).astype(np.float32)
show("acosh H (1 <= x <= 2, in t = x - 1)", hc, worst_ulps(r, np.arccosh(x.astype(np.float64))))

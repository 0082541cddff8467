"""What the fixture generators share: JSON encoding of float values ("nan", "inf",
"-inf" as strings, which the Rust tests decode)."""
import math


def enc(v):
    """A float for the fixture JSON: NaN and the infinities as strings."""
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v

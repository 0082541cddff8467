#!/usr/bin/env python3
"""Seed inputs for the fuzz targets (fuzz/corpus/TARGET): valid files of every form the
readers accept (numpy .npy of each dtype, order and rank; Matrix Market of each field
and symmetry; COO .npz stored and deflated), the hostile files of the reliability
issue, and JSON of every serialised container. A fuzzing run grows the corpus from
these and `cargo fuzz cmin` minimises it before it is committed.

Usage: python3 scripts/fuzz_seeds.py   (needs numpy; writes into fuzz/corpus)
"""
import io
import json
import os
import zipfile

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    data = data if isinstance(data, bytes) else data.encode()
    # the npy target's first byte picks the reader: values, mask, .npz member stream
    variants = [(f"-{k}", bytes([k]) + data) for k in range(3)] if target == "npy" else [("", data)]
    for suffix, b in variants:
        with open(os.path.join(d, "seed-" + name + suffix), "wb") as f:
            f.write(b)


def npy_bytes(a):
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


rng = np.random.default_rng(7)
x = rng.normal(size=(3, 4))
for dt in ["<f2", "<f4", "<f8", ">f8", "<i4", "<i8", "|b1", "|u1", "|i1"]:
    put("npy", f"{dt[1:]}-{dt[0] == '>'}", npy_bytes((x * 3).astype(dt)))
put("npy", "fortran", npy_bytes(np.asfortranarray(x)))
put("npy", "scalar", npy_bytes(np.float64(2.5)))
put("npy", "empty", npy_bytes(np.zeros((0, 3), np.float32)))
put("npy", "rank4", npy_bytes(np.ones((2, 1, 2, 2), np.float32)))
put("npy", "mask", npy_bytes(x > 0))
# the hostile header: shape (10^11, 10^5), no body
h = "{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000, 100000), }"
h = h + " " * (118 - len(h)) + "\n"
put("npy", "hostile-shape", b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h.encode())

put("mtx", "general", "%%MatrixMarket matrix coordinate real general\n% c\n3 4 3\n1 1 1.5\n2 3 -2\n3 4 1e3\n")
put("mtx", "integer", "%%MatrixMarket matrix coordinate integer general\n2 2 2\n1 2 7\n2 1 -9\n")
put("mtx", "pattern", "%%MatrixMarket matrix coordinate pattern general\n2 3 2\n1 3\n2 1\n")
put("mtx", "symmetric", "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 1\n2 1 2\n3 2 3\n")
put("mtx", "skew", "%%MatrixMarket matrix coordinate integer skew-symmetric\n3 3 2\n2 1 4\n3 1 5\n")
put("mtx", "hostile-rows", "%%MatrixMarket matrix coordinate real general\n4000000000 4000000000 3\n1 1 1\n2 2 2\n3 3 3\n")
put("mtx", "hostile-count", "%%MatrixMarket matrix coordinate real general\n3 3 99999999999\n1 1 1\n")


def npz_bytes(members, deflate):
    b = io.BytesIO()
    mode = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(b, "w", mode) as z:
        for k, v in members.items():
            z.writestr(k + ".npy", npy_bytes(v))
    return b.getvalue()


coo = {
    "coords": np.array([[0, 1, 2], [3, 0, 1]], np.int64),
    "data": np.array([1.5, -2.0, 4.0]),
    "shape": np.array([3, 4], np.int64),
}
put("npz", "stored", npz_bytes(coo, False))
put("npz", "deflated", npz_bytes(coo, True))
put("npz", "fill", npz_bytes(dict(coo, fill_value=np.array(0.0)), False))
put("npz", "int32", npz_bytes(dict(coo, data=np.array([1, 2, 3], np.int32)), False))
put("npz", "bool", npz_bytes(dict(coo, data=np.array([True, False, True])), False))
put("npz", "rank3", npz_bytes({
    "coords": np.array([[0, 1], [1, 0], [2, 2]], np.int64),
    "data": np.array([1.0, 2.0], np.float32),
    "shape": np.array([2, 2, 3], np.int64),
}, True))

for i, j in enumerate([
    {"shape": [2, 3], "words": [37]},
    {"shape": [3, 4], "indptr": [0, 2, 2, 3], "indices": [1, 2, 3]},
    {"shape": [3, 4], "coords": [[0, 2, 0], [1, 3, 2]]},
    {"shape": [2, 2], "indices": [0, 3], "values": [1.0, 2.0]},
]):
    put("serde", f"json{i}", json.dumps(j))

for t, n in [("constructors", 64), ("by_name", 32), ("differential", 48)]:
    for i in range(8):
        put(t, f"random{i}", rng.integers(0, 256, size=n, dtype=np.uint8).tobytes())

"""A graph attention layer (GAT, Veličković et al. 2018) on the engine end to end: per-edge
logits, a softmax over each node's incoming edges (`mk.torch.segment_softmax`) and the
weighted sum of the neighbours' features (`mk.torch.spmm`), trained with torch.optim on a
random graph, with the same layer written densely in plain torch as the reference.

    python examples/python/gat.py
"""

from __future__ import annotations

import numpy as np
import torch

import masked as mk


def random_graph(n: int, p: float, seed: int) -> mk.AttentionPattern:
    """Each node hears itself and each other node with probability p (row i: the sources
    of node i's incoming edges)."""
    return mk.AttentionPattern.random(n, p, seed=seed)


class GAT(torch.nn.Module):
    """One GAT head: h = x W; e_ij = LeakyReLU(a_l . h_i + a_r . h_j) on the edges;
    alpha = softmax of e over each node's incoming edges; out_i = sum_j alpha_ij h_j."""

    def __init__(self, d_in: int, d_out: int, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w = torch.nn.Parameter(torch.randn(d_in, d_out, generator=g, dtype=torch.float64) / d_in**0.5)
        self.a_l = torch.nn.Parameter(torch.randn(d_out, generator=g, dtype=torch.float64) / d_out**0.5)
        self.a_r = torch.nn.Parameter(torch.randn(d_out, generator=g, dtype=torch.float64) / d_out**0.5)

    def forward(self, x: torch.Tensor, graph: mk.AttentionPattern, dense: bool = False) -> torch.Tensor:
        h = x @ self.w
        s, t = h @ self.a_l, h @ self.a_r
        if dense:  # the reference: n x n scores, masked softmax, dense product
            n = x.shape[0]
            valid = torch.zeros(n, n, dtype=torch.bool)
            rows = torch.from_numpy(np.repeat(np.arange(n), np.diff(graph.indptr)))
            valid[rows, torch.from_numpy(graph.indices)] = True
            e = torch.nn.functional.leaky_relu(s[:, None] + t[None, :], 0.2)
            alpha = torch.softmax(e.masked_fill(~valid, float("-inf")), -1)
            return alpha @ h
        rows = torch.from_numpy(np.repeat(np.arange(graph.shape[0]), np.diff(graph.indptr)))
        cols = torch.from_numpy(graph.indices)
        e = torch.nn.functional.leaky_relu(s[rows] + t[cols], 0.2)  # one logit per edge
        alpha = mk.torch.segment_softmax(e, graph)
        return mk.torch.spmm(alpha, graph, h)


def train(dense: bool, steps: int = 5, n: int = 200, seed: int = 0) -> list[float]:
    """Fits the layer's output to a fixed target; returns the losses."""
    torch.manual_seed(seed)
    graph = random_graph(n, 0.05, seed)
    x = torch.randn(n, 16, dtype=torch.float64)
    target = torch.randn(n, 8, dtype=torch.float64)
    layer = GAT(16, 8, seed)
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((layer(x, graph, dense) - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


if __name__ == "__main__":
    print("engine:", [round(v, 6) for v in train(dense=False)])
    print("dense: ", [round(v, 6) for v in train(dense=True)])

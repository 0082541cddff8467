"""A masked softmax attention layer and a masked variance loss trained with torch.optim,
once with torch.masked and once with mk.torch (the same model, data and seed).

A padded batch has one sequence that is all padding (its row of the attention mask is
fully False) and a feature block whose values are all masked out. torch.masked's variance
gives NaN gradients over that fully masked lane even after `nan_to_num` on the loss
term, and the optimiser step spreads the NaN into every parameter; mk.torch's gradients
are 0 there and training goes on.

    python examples/python/train_masked_attention.py
"""

from __future__ import annotations

import torch
import torch.masked

import masked as mk


def run(lib, steps: int = 5, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    batch, n, d = 4, 6, 8
    x = torch.randn(batch, n, d, dtype=torch.float64)
    lengths = torch.tensor([6, 3, 0, 5])  # the third sequence is all padding
    valid = torch.arange(n)[None, :] < lengths[:, None]  # [batch, n]
    attn_mask = valid[:, None, :] & valid[:, :, None]  # [batch, n, n]
    wq = torch.nn.Linear(d, d, dtype=torch.float64)
    wk = torch.nn.Linear(d, d, dtype=torch.float64)
    wv = torch.nn.Linear(d, d, dtype=torch.float64)
    params = [*wq.parameters(), *wk.parameters(), *wv.parameters()]
    opt = torch.optim.SGD(params, lr=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        q, k, v = wq(x), wk(x), wv(x)
        scores = q @ k.transpose(1, 2) / d**0.5
        p = lib.softmax(scores, -1, mask=attn_mask)
        p = torch.where(attn_mask, p, 0.0)  # padded rows attend to nothing
        h = p @ v  # [batch, n, d]
        # a masked variance over each sequence's valid positions, per feature
        feat_valid = valid[:, :, None].expand(batch, n, d)
        spread = lib.var(h, 1, mask=feat_valid)  # [batch, d]; the padded sequence's lane is empty
        loss = spread.nan_to_num().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    finite = all(torch.isfinite(t).all().item() for t in params)
    return losses + [float(finite)]


if __name__ == "__main__":
    theirs = run(torch.masked)
    ours = run(mk.torch)
    print("torch.masked losses:", [round(v, 6) for v in theirs[:-1]], "parameters finite:", bool(theirs[-1]))
    print("mk.torch losses:    ", [round(v, 6) for v in ours[:-1]], "parameters finite:", bool(ours[-1]))

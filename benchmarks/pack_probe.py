"""Probe for seed packing (the speed issue's item 1): is one step of N LASER-VFL Credit runs, computed
together, cheaper than N separate steps? Not the product: it measures the two ways packing could be
built before either is built.

* ``solo``: N method instances, each stepped as the trainer does today (store.begin, loss, backward,
  masked Adam).
* ``vmap``: the same N models as one ``[N, P]`` parameter leaf; ``torch.func.vmap`` runs one copy of
  the LASER loss over the member axis (the generic route: method code unchanged, but its data-dependent
  branches and the channel's bookkeeping would have to go), then one vectorised Adam step.
* ``native``: the loss written by hand with a leading member axis (what rewriting each method for a
  member axis would give): ``baddbmm`` over N*K extractors, one projection, one fused loss.

Every variant sees the same per-member batches, masks and LASER task draws, and the probe checks that
the three give the same loss values (so it times equal work). Run at one thread:

    python benchmarks/pack_probe.py --members 5 --steps 200 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.func import vmap

from vflbench.core.rng import Streams
from vflbench.methods import METHODS, Batch, Stage
from vflbench.methods.base import MethodContext, cross_entropy
from vflbench.nn.models import ModelSpec
from vflbench.nn.optim import MaskedOptimizer

K, WIDTHS, C = 4, [6, 6, 6, 5], 2  # Credit's 23 features in 4 blocks
SPEC = ModelSpec("mlp", 10, (10, 10))


def make(seed: int):
    ctx = MethodContext(
        k=K,
        n_classes=C,
        widths=WIDTHS,
        in_ch=1,
        model=SPEC,
        device=torch.device("cpu"),
        streams=Streams(seed),
        options={"laser_subsets": "batch"},
        positive_class=1,
    )
    return METHODS.get("laser")(ctx)


def adam_masked(flat, m, v, t, a, lr=1e-4, wd=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    """MaskedOptimizer's Adam on an ``[N, P]`` leaf: ``a`` ``[N, P]`` float, 1 where the element's
    member took part in the batch; ``t`` ``[N, P]`` per-element step counts (advanced here)."""
    with torch.no_grad():
        t.add_(a)
        g = flat.grad.add(flat, alpha=wd)
        m.lerp_(g, (1 - b1) * a)
        v.lerp_(g * g, (1 - b2) * a)
        tt = t.clamp_min(1.0)
        step = m / ((v.sqrt() / (1 - torch.pow(b2, tt)).sqrt_()).add_(eps)) * (lr / (1 - torch.pow(b1, tt)))
        flat.sub_(step * a)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    n, b, steps = a.members, a.batch, a.steps
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, steps, K, b, max(WIDTHS), generator=g)  # per member, per step: [K, B, w]
    obs = (torch.rand(n, steps, 1, K, generator=g) > 0.1).expand(n, steps, b, K).clone()  # per-batch masks (compat)
    obs[..., 0] = True  # every batch observes a block
    y = torch.randint(0, C, (n, steps, b), generator=g)
    methods = [make(s) for s in range(n)]
    tmpl = methods[0]
    stage = Stage()
    # the LASER task draws of every member and step, taken once from each member's own stream
    agg = torch.empty(n, steps, 1, K, K, K)  # one draw per batch (the authors' code, compat protocol)
    wts = torch.empty(n, steps, 1, K, K)
    for i, m in enumerate(methods):
        for s in range(steps):
            a_, w_ = m._tasks(Batch(x[i, s], obs[i, s], y[i, s], torch.arange(b), s))
            agg[i, s], wts[i, s] = a_, w_
    names = list(tmpl.store._specs)
    sizes = [tmpl.store._specs[k][0] for k in names]
    shapes = [tmpl.store._specs[k][1] for k in names]
    numel = [int(torch.tensor(sh).prod()) for sh in shapes]
    del sizes

    def laser_loss(flat, xb, ob, yb, ag, wt):  # one member's loss, written as LaserVFL.loss (linear heads)
        tmpl.store._cache = {k: p.view(sh) for k, p, sh in zip(names, flat.split(numel), shapes, strict=True)}
        emb = tmpl.ext(xb)  # [K, B, D]
        w, bias = tmpl.head.weight, tmpl.head.bias
        proj = (emb.reshape(K * b, -1) @ w.permute(1, 0, 2).reshape(-1, K * C)).view(K, b, K, C).permute(1, 2, 0, 3)
        logits = torch.matmul(ag, proj) + bias[None, :, None, :]
        ce = cross_entropy(logits, yb[:, None, None])
        return (ce * wt).sum() / ob.any(1).sum().clamp_min(1)

    # --- solo: today's trainer step, N times
    opts = [MaskedOptimizer(m.store, [], m.n_members, name="adam", lr=1e-4, weight_decay=1e-3) for m in methods]
    init = [m.store.flat.detach().clone() for m in methods]

    def run_solo():
        for m, f0 in zip(methods, init, strict=True):
            with torch.no_grad():
                m.store.flat.copy_(f0)
        for o in opts:
            o.state, o.steps = [{} for _ in o.entries], torch.zeros(o.n_members)
        losses = []
        for s in range(steps):
            for i, (m, o) in enumerate(zip(methods, opts, strict=True)):
                m.store.begin()
                m._epoch = ("batch", agg[i], wts[i])  # the drawn tasks, as begin_epoch stores them
                loss, active = m.loss(Batch(x[i, s], obs[i, s], y[i, s], torch.arange(b), s), stage)
                o.zero_grad()
                loss.backward()
                o.step(active)
                losses.append(float(loss.detach()))
        return torch.tensor(losses).view(steps, n)

    # --- packed, two ways: one [N, P] leaf, one vectorised Adam
    flat = torch.nn.Parameter(torch.stack(init))
    vm = vmap(laser_loss)

    def run_packed(kind):
        with torch.no_grad():
            flat.copy_(torch.stack(init))
        mom, var, t = torch.zeros_like(flat), torch.zeros_like(flat), torch.zeros_like(flat)
        losses = []
        for s in range(steps):
            if kind == "vmap":
                per = vm(flat, x[:, s], obs[:, s], y[:, s], agg[:, s], wts[:, s])
            else:
                per = native_loss(flat, x[:, s], obs[:, s], y[:, s], agg[:, s], wts[:, s])
            flat.grad = None
            per.sum().backward()
            seen = obs[:, s].any(1)  # [N, K]: LASER-VFL's active members are the observed blocks' extractors and heads
            adam_masked(flat, mom, var, t, torch.cat([seen, seen], 1).float()[:, member_of])
            losses.append(per.detach())
        return torch.stack(losses)

    member_of = tmpl.store.member_of
    off = {k: (sum(numel[:j]), shapes[j]) for j, k in enumerate(names)}

    def native_loss(flat, xb, ob, yb, ag, wt):  # [N, ...] inputs; every op over the member axis at once
        def p(k):
            o, sh = off[k]
            return (
                flat[:, o : o + int(torch.tensor(sh).prod())].reshape(n * sh[0], *sh[1:])
                if sh[0] == K
                else flat[:, o : o + int(torch.tensor(sh).prod())].reshape(n, *sh)
            )

        h = xb.reshape(n * K, b, -1)
        for li in range(3):
            h = torch.baddbmm(p(f"ext.b{li}"), h, p(f"ext.w{li}"))
            if li < 2:
                h = torch.relu(h)
        emb = h.view(n, K, b, -1)
        w = p("head.w").view(n, K, -1, C)  # [N, head, D, C]
        bias = p("head.b").view(n, K, C)
        proj = torch.einsum("nkbd,nhdc->nbhkc", emb, w)  # [N, B, head, block, C]
        logits = torch.matmul(ag, proj) + bias[:, None, :, None, :]
        ce = cross_entropy(logits, yb[:, :, None, None])
        return (ce * wt).sum((1, 2, 3)) / ob.any(2).sum(1).clamp_min(1)

    ls, lv, ln = run_solo(), run_packed("vmap"), run_packed("native")
    print(
        f"loss agreement over {steps} steps x {n} members: |solo-vmap| max {float((ls - lv).abs().max()):.2e}, "
        f"|solo-native| max {float((ls - ln).abs().max()):.2e}, |vmap-native| max {float((lv - ln).abs().max()):.2e}"
    )
    times = {"solo": [], "vmap": [], "native": []}
    for _ in range(a.rounds):  # interleaved A B C A B C
        for kind in times:
            t0 = time.perf_counter()
            run_solo() if kind == "solo" else run_packed(kind)
            times[kind].append((time.perf_counter() - t0) / steps * 1e3)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"{n} members, batch {b}, {a.threads} thread(s), {a.rounds} interleaved rounds of {steps} steps; ms per step "
        "of the whole pack (median, range):"
    )
    for k, v in times.items():
        print(
            f"  {k:7s} {med[k]:7.2f} ({min(v):.2f}-{max(v):.2f})  per member {med[k] / n:.2f}  speed-up vs solo "
            f"{med['solo'] / med[k]:.2f}x"
        )


if __name__ == "__main__":
    main()

"""SimSiam pretraining of each party's extractor on its own data (Chen & He 2021), the
self-supervised first stage the FALSE-VFL paper gives its baselines (App. D.1): a method with the
option ``pretrain=simsiam`` gets a stage ``pretrain`` over all training samples with labels hidden,
then fine-tunes on the labeled ones as usual.

Per party k and observed sample: two augmented views of the block, the party's extractor, a 3-layer
projector (``cut -> 512 -> 512 -> 512``, BatchNorm after every layer, ReLU after the first two) and a
2-layer predictor (``512 -> 128 -> 512``, BatchNorm and ReLU after the first); the loss is the
symmetric negative cosine ``(D(p1, sg(z2)) + D(p2, sg(z1))) / 2`` averaged over the party's observed
samples, summed over parties (each party trains only its own networks). Widths are the FedHSSL code's
defaults. BatchNorm statistics are over the party's observed samples of the batch, without affine
parameters (the heads are discarded after pretraining).

Views: tabular blocks get feature masking (each feature zeroed with probability 0.2) and Gaussian noise
(sigma 0.1) on the standardised features; image tiles get a random resized crop to the tile size
(area 0.5-1, aspect 3/4-4/3, bilinear) and Gaussian noise (sigma 0.1). All parties, samples and both
views go through the extractors in one call. The projector and predictor are members of the method
that only the ``pretrain`` stage steps.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from ..nn.models import Extractors, linear_bound
from .base import Batch, Option, Stage

if TYPE_CHECKING:
    from .base import Method

PRETRAIN = Stage("pretrain", samples="all", labels=False, hp="simsiam")
PRETRAIN_OPTION = Option(
    "pretrain",
    str,
    "none",
    "self-supervised pretraining of each party's extractor on all its training "
    "samples before training on the labeled ones (stage 'pretrain', preset block <type>.simsiam)",
    choices=("none", "simsiam"),
)

PROJ, PRED_HIDDEN = 512, 128  # the FedHSSL code's widths: every party's projector and predictor, at any K
SSL_WIDTH_OPTION = Option(
    "ssl_width",
    int,
    PROJ,
    "width of each party's SimSiam projectors (predictor: width -> width/4 -> width); 512 is the FedHSSL code's. "
    "The heads are per party, so their parameters grow as K x width^2 (at 512, 1.3 M a party for FedHSSL's two)",
    check=lambda v: None if v >= 4 else "must be >= 4",
)
MASK_P, NOISE = 0.2, 0.1
CROP_AREA, CROP_RATIO = (0.5, 1.0), (3 / 4, 4 / 3)


def with_pretraining(options: dict[str, Any], stages: tuple[Stage, ...]) -> tuple[Stage, ...]:
    return (PRETRAIN, *stages) if options.get("pretrain", "none") == "simsiam" else stages


ASSUMPTIONS = (
    "SimSiam: projector cut-512-512-512 and predictor 512-128-512 per party (FedHSSL code defaults), BatchNorm over "
    "the "
    "party's observed samples without affine parameters",
    "SimSiam views: tabular feature masking p=0.2 + Gaussian noise 0.1; images random resized crop (area 0.5-1) + "
    "noise 0.1",
    "SimSiam: no gradient clipping (the trainer has none); SGD momentum 0.9 with cosine decay from the preset's "
    "<type>.simsiam block",
)


def simsiam_for(method: Method, ext: Extractors) -> SimSiam | None:
    """The SimSiam heads for ``ext`` when the run asks for them (call at the end of ``build``); their
    assumptions join the method's in the manifest."""
    if method.options.get("pretrain", "none") != "simsiam":
        return None
    method.assumptions = (*type(method).assumptions, *ASSUMPTIONS)
    return SimSiam(method, ext)


def masked_batch_norm(x: torch.Tensor, m: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """BatchNorm without affine parameters over the rows ``m`` ``[K, N]`` selects, per party: ``x`` ``[K, N, D]``."""
    w = m.float()[..., None]
    n = w.sum(1, keepdim=True).clamp_min(1.0)
    mean = (x * w).sum(1, keepdim=True) / n
    var = ((x - mean) ** 2 * w).sum(1, keepdim=True) / n
    return (x - mean) * torch.rsqrt(var + eps)


def negative_cosine(p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """``-cos(p, sg(z))`` over the last axis."""
    return -F.cosine_similarity(p, z.detach(), dim=-1)


def resized_crop(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Per-sample RandomResizedCrop back to the input size, vectorised with one affine grid: ``[B, C, h, w]``."""
    b = x.shape[0]
    dev = x.device
    area = torch.empty(b, device=dev).uniform_(*CROP_AREA, generator=gen)
    log_r = torch.empty(b, device=dev).uniform_(math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1]), generator=gen)
    r = log_r.exp()
    sw, sh = (area * r).sqrt().clamp(max=1.0), (area / r).sqrt().clamp(max=1.0)  # crop size as a fraction of the tile
    tx = (torch.rand(b, generator=gen, device=dev) * 2 - 1) * (1 - sw)
    ty = (torch.rand(b, generator=gen, device=dev) * 2 - 1) * (1 - sh)
    theta = torch.zeros(b, 2, 3, device=dev, dtype=x.dtype)
    theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = sw, tx, sh, ty
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


class SimSiam:
    """Per-party projector and predictor banks (``[K, in, out]`` weights, one member per party)."""

    def __init__(self, method: Method, ext: Extractors | None, prefix: str = "ssl"):
        self.method, self.ext, self.prefix = method, ext, prefix
        k, cut = method.k, method.ctx.model.cut
        self.k = k
        self.member_ids = method.new_members(k)
        self.n_members = k
        mem = torch.as_tensor(self.member_ids, dtype=torch.long)
        self.layers = []  # (name, fan_in, fan_out)
        w = int(method.options.get("ssl_width", PROJ))
        hid = max(1, w * PRED_HIDDEN // PROJ)
        sizes = [("proj0", cut, w), ("proj1", w, w), ("proj2", w, w), ("pred0", w, hid), ("pred1", hid, w)]
        for name, fan_in, fan_out in sizes:
            bound = linear_bound(fan_in)
            method.store.add(f"{prefix}.{name}.w", (k, fan_in, fan_out), mem, bound)
            method.store.add(f"{prefix}.{name}.b", (k, 1, fan_out), mem, bound)
        self.image = method.ctx.model.arch != "mlp"
        widths = torch.as_tensor(method.ctx.widths)
        self.col_mask = (
            (torch.arange(int(widths.max()))[None, :] < widths[:, None]).float()[:, None, :].to(method.device)
        )  # [K, 1, w]
        # embedded categorical codes take no noise (a code is a name); masking one gives code 0, the missing cell
        self.noise_mask = None
        if any(method.ctx.embedded):
            nm = self.col_mask.clone()
            for p, cols in enumerate(method.ctx.embedded):
                for pos, _, _ in cols:
                    nm[p, 0, pos] = 0.0
            self.noise_mask = nm

    def _linear(self, name: str, x: torch.Tensor) -> torch.Tensor:
        s = self.method.store
        return torch.baddbmm(s[f"{self.prefix}.{name}.b"], x, s[f"{self.prefix}.{name}.w"])

    @property
    def param_names(self) -> list[str]:
        return [f"{self.prefix}.{n}.{wb}" for n in ("proj0", "proj1", "proj2", "pred0", "pred1") for wb in ("w", "b")]

    @torch.no_grad()
    def collapse_std(self, e: torch.Tensor, m: torch.Tensor) -> float:
        """The representation-collapse diagnostic of SimSiam (Chen & He 2021, Sec. 4.1): the std over
        samples of the L2-normalised projector output, averaged over its dimensions and the parties.
        A collapsed representation gives 0; a spread one about 1/sqrt(d) (d = 512 here)."""
        z = F.normalize(self.heads(e, m)[0], dim=-1)  # [K, N, d]
        w = m.float()[..., None]
        n = w.sum(1, keepdim=True).clamp_min(2.0)
        mean = (z * w).sum(1, keepdim=True) / n
        var = ((z - mean) ** 2 * w).sum(1, keepdim=True) / (n - 1)
        return float(var.sqrt().mean())

    def heads(self, e: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Projections z and predictions p of representations ``e`` ``[K, N, D]`` (rows ``m`` count)."""
        h = F.relu(masked_batch_norm(self._linear("proj0", e), m))
        h = F.relu(masked_batch_norm(self._linear("proj1", h), m))
        z = masked_batch_norm(self._linear("proj2", h), m)
        p = self._linear("pred1", F.relu(masked_batch_norm(self._linear("pred0", z), m)))
        return z, p

    def views(self, blocks, gen: torch.Generator):
        """Two augmented views of every block, stacked along the batch axis (``[K, 2B, w]`` or tiles ``[2B, C, h,
        w]``)."""
        if not self.image:
            x = torch.cat([blocks, blocks], 1)
            keep = (torch.rand(x.shape, generator=gen, device=x.device) >= MASK_P).float()
            noise = torch.randn(x.shape, generator=gen, device=x.device) * NOISE
            if self.noise_mask is not None:
                noise = noise * self.noise_mask
            return (x * keep + noise) * self.col_mask  # padding columns stay zero
        out = []
        for t in blocks:
            v = resized_crop(torch.cat([t, t], 0), gen)
            out.append(v + torch.randn(v.shape, generator=gen, device=v.device) * NOISE)
        return out

    def loss(self, batch: Batch) -> tuple[torch.Tensor | None, torch.Tensor]:
        method = self.method
        obs = batch.obs  # [B, K]
        seen = obs.any(0)
        active = torch.zeros(method.n_members, dtype=torch.bool, device=obs.device)
        active[self.ext.member_ids] = seen
        active[self.member_ids] = seen
        if not bool(seen.any()):
            return None, active
        m = torch.cat([obs.T, obs.T], 1)  # [K, 2B]
        e = self.ext(self.views(batch.blocks, method.gen), need=m)  # [K, 2B, D]; stays on the party: nothing is sent
        z, p = self.heads(e, m)
        b = obs.shape[0]
        z1, z2, p1, p2 = z[:, :b], z[:, b:], p[:, :b], p[:, b:]
        per = 0.5 * (negative_cosine(p1, z2) + negative_cosine(p2, z1))  # [K, B]
        w = obs.T.float()
        return ((per * w).sum(1) / w.sum(1).clamp_min(1.0)).sum(), active

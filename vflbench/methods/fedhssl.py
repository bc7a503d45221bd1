"""FedHSSL (He et al., "A hybrid self-supervised learning framework for vertical federated
learning", IEEE TBD 2024), the fourth baseline of the FALSE-VFL paper's Tables 12-17 (App. D.1).

Each party k holds a **cross-party encoder** (the model's extractor) and a **local encoder** split
into a bottom and a top part (MLP: the first layer, then the rest; images: the lower and the upper
layers of the network). With ``pretrain=simsiam`` (default) two self-supervised stages alternate
epoch by epoch, as in the official code's loop:

* ``cross`` (fully observed training samples, labeled or not; no augmentation: the parties' blocks
  are the views). Party k projects and predicts its cross-party representation, ``z_k``, ``p_k``.
  The active party 0 predicts the passive parties' projections, ``mean_j D(p_0, sg(z_j))``; each
  passive party predicts the active party's, ``D(p_j, sg(z_0))`` (the code's ``comm_mode=first``;
  D is the negative cosine). The projections cross the party boundary (``send``).
* ``local`` (every training sample; each party on the samples that observe its block). Two augmented
  views of the block through the local encoder and a local projector/predictor:
  ``local_ratio * [D(p1, sg(z2)) + D(p2, sg(z1))] + constraint_ratio * [D(p1, sg(zc1)) + D(p2, sg(zc2))]``
  where ``zc`` is the cross-party projection of the same view (the cross-party guidance). After every
  local epoch, **partial model aggregation** averages a part of the local model over the parties
  (``pma``: ``top``, the official code's set: top encoder with the local projector and predictor;
  ``bottom``: the bottom encoders; ``none``).

Then ``train`` fine-tunes everything on the fully aligned labeled samples: party k sends
``(h_cross + h_local) / 2`` (the code's ``pool=mean``), the server concatenates the parties'
representations into the fusion discriminator (the model's head). A missing party's representation
is zero at prediction (zero-imputation, App. D.1). ``pretrain=none`` fine-tunes from the
initialisation (the labeled-only variant the tables compare against).

The views, projector and predictor are the ones of :mod:`vflbench.methods.simsiam`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..core.errors import VFLBenchError
from ..nn.models import IMAGE_EXTRACTORS, MLPBank
from .base import (
    METHODS,
    Batch,
    BatchPrediction,
    Epoch,
    Method,
    Option,
    Stage,
    masked_mean_ce,
    zero_missing_inputs,
)
from .simsiam import ASSUMPTIONS as SIMSIAM_ASSUMPTIONS
from .simsiam import SSL_WIDTH_OPTION, SimSiam, negative_cosine

CROSS = Stage("cross", samples="complete", labels=False, hp="simsiam", group="fedhssl")
LOCAL = Stage("local", samples="all", labels=False, hp="simsiam", group="fedhssl")
TRAIN = Stage("train", samples="aligned")
TRAIN_LABELED = Stage("train", samples="labeled")  # finetune=labeled: every labeled sample, with its observed blocks


def split_image_encoder(arch: str, in_ch: int, out: int) -> tuple[nn.Module, nn.Module]:
    """An image extractor cut in two: (lower layers, upper layers)."""
    full = IMAGE_EXTRACTORS[arch](in_ch, out)
    if isinstance(full, nn.Sequential):  # cnn-small: the first conv block, then the rest
        return full[:4], full[4:]
    # torchvision ResNet-18: stem, layer1, layer2 | layer3, layer4, pooling, fc
    bottom = nn.Sequential(full.conv1, full.bn1, full.relu, full.maxpool, full.layer1, full.layer2)
    top = nn.Sequential(full.layer3, full.layer4, full.avgpool, nn.Flatten(), full.fc)
    return bottom, top


@METHODS.register("fedhssl")
class FedHSSL(Method):
    @classmethod
    def loss_refusal(cls, options):
        return None  # survives a lost party: an absent party's representation is filled (option absent)

    name, display, hp_key, f1_rule = "fedhssl", "FedHSSL", "fedhssl", "single"
    boundary_refusal = (
        "its self-supervised stages exchange projections between parties, outside the party-to-server "
        "boundary a mechanism wraps"
    )
    runtime_refusal = (
        "its self-supervised stages exchange projections between parties, which the runtime does not route"
    )
    paper = "FedHSSL (He et al., IEEE Trans. Big Data 2024), as a baseline of FALSE-VFL (App. D.1)"
    assumptions = (
        "FedHSSL: cross-party and local SimSiam alternate epoch by epoch for the preset's fedhssl.simsiam epochs each "
        "(the official code's loop); cross-party SimSiam on every fully observed training sample, labeled or not",
        "FedHSSL: comm_mode=first (the active party 0 predicts the mean over passive parties' projections, each "
        "passive "
        "party the active party's), as in the official code",
        "FedHSSL: local encoder = first MLP layer (bottom) + the rest (top); images: stem, layer1-2 | layer3-4, "
        "pooling, fc",
        "FedHSSL: fine-tuning representation (h_cross + h_local) / 2 per party (the code's pool=mean), concatenated "
        "into the "
        "fusion discriminator; zero for a missing party (training: fully aligned labeled samples only)",
        "FedHSSL: no learning-rate rescaling by 0.5/(local_ratio + constraint_ratio) and no gradient clipping (the "
        "code "
        "has both); Table 9's learning rates are used as given",
    )
    option_specs = (
        Option(
            "pretrain",
            str,
            "simsiam",
            "FedHSSL's self-supervised stages before fine-tuning, or none (fine-tune from "
            "the initialisation: the labeled-only variant)",
            choices=("none", "simsiam"),
        ),
        SSL_WIDTH_OPTION,
        Option(
            "local_ratio",
            float,
            0.5,
            "weight of the local SimSiam term (the official code's default)",
            check=lambda v: None if v >= 0 else "must be >= 0",
        ),
        Option(
            "constraint_ratio",
            float,
            0.5,
            "weight of the cross-party guidance term of local SimSiam (0 turns the "
            "guidance off, the official code's default; the FedHSSL paper's method has it on)",
            check=lambda v: None if v >= 0 else "must be >= 0",
        ),
        Option(
            "pma",
            str,
            "top",
            "partial model aggregation after each local epoch: FedAvg of the local top encoders with "
            "the local projectors and predictors (the official code), of the local bottom encoders, or none",
            choices=("top", "bottom", "none"),
        ),
        # Readings of the FALSE-VFL paper's FedHSSL rows (results/false/README.md, controlled runs); the defaults are
        # App. D.1's
        Option(
            "finetune",
            str,
            "aligned",
            "fine-tune on the fully aligned labeled samples only (App. D.1: FedHSSL needs fully aligned data) or on "
            "every labeled sample with its observed blocks (an absent party filled as at prediction: absent=)",
            choices=("aligned", "labeled"),
        ),
        Option(
            "absent",
            str,
            "zero",
            "an absent party's representation at the fusion head: zero (App. D.1's zero-imputation), mean (its mean "
            "representation over the previous fine-tuning epoch's samples that observe it), or present_mean (the mean "
            "of the present parties' representations of the same sample)",
            choices=("zero", "mean", "present_mean"),
        ),
        Option(
            "block_dropout",
            float,
            0.0,
            "during fine-tuning, drop each observed block of a sample with this probability (never all of them), "
            "filled as absent=",
            check=lambda v: None if 0 <= v < 1 else "must be in [0, 1)",
        ),
    )

    @classmethod
    def stages_for(cls, options):
        train = TRAIN if options.get("finetune", "aligned") == "aligned" else TRAIN_LABELED
        return (CROSS, LOCAL, train) if options.get("pretrain", "simsiam") == "simsiam" else (train,)

    @classmethod
    def validate_options(cls, options: dict[str, Any]) -> str | None:
        if (
            options.get("pretrain", "simsiam") == "simsiam"
            and options.get("local_ratio", 0.5) + options.get("constraint_ratio", 0.5) <= 0
        ):
            return "local_ratio + constraint_ratio must be > 0 (else the local stage has no loss)"
        return None

    def build(self) -> None:
        k, spec = self.k, self.ctx.model
        if k < 2:
            raise VFLBenchError(
                "FedHSSL needs at least 2 parties (its cross-party SimSiam predicts one party from another)."
            )
        self.pretrained = self.options["pretrain"] == "simsiam"
        self.cross, _ = self.extractors("cross", list(range(k)))
        self.image = spec.arch != "mlp"
        self.pma = self.options["pma"]
        if self.image:
            self.bottoms, self.tops = [], []
            for _ in range(k):
                bottom, b_id = self.module(lambda: self._split()[0])
                top, t_id = self.module(lambda: self._split()[1])
                self.bottoms.append((bottom, b_id))
                self.tops.append((top, t_id))
            self.bottom_ids = [i for _, i in self.bottoms]
            self.top_ids = [i for _, i in self.tops]
        else:
            hidden = list(spec.hidden)
            mid = hidden[0] if hidden else spec.cut
            self.bottom_ids = self.new_members(k)
            self.top_ids = self.new_members(k)
            self.bottom = MLPBank(
                self.store,
                "local_bottom",
                list(range(k)),
                self.bottom_ids,
                self.ctx.widths,
                [],
                mid,
                self.ctx.embedded or None,
            )
            self.top = MLPBank(self.store, "local_top", list(range(k)), self.top_ids, [mid] * k, hidden[1:], spec.cut)
        if self.pma == "bottom" and self.pretrained and len(set(self.ctx.widths)) > 1 and not self.image:
            raise VFLBenchError(
                f"pma=bottom averages the parties' bottom encoders, which read blocks of different widths here "
                f"({sorted(set(self.ctx.widths))}); use pma=top (the official code) or none, or a partitioner with "
                "equal blocks."
            )
        self.head, self.head_ids = self.heads("head", 1, spec.cut * k)
        self.ssl_cross = self.ssl_local = None
        if self.pretrained:
            self.ssl_cross = SimSiam(self, self.cross, prefix="ssl_cross")
            self.ssl_local = SimSiam(self, None, prefix="ssl_local")
            self.assumptions = (*type(self).assumptions, *SIMSIAM_ASSUMPTIONS)
        self.cross_ids = list(self.cross.member_ids)
        self.absent = self.options["absent"]
        self.block_dropout = float(self.options["block_dropout"])
        self.finetune_all = self.options["finetune"] == "labeled"
        self.mean_rep = torch.zeros(k, spec.cut, device=self.device)  # absent=mean: the previous epoch's mean per party
        self._rep_sum = torch.zeros(k, spec.cut, device=self.device)
        self._rep_n = torch.zeros(k, 1, device=self.device)
        self.impute_input = False
        self.eval_variants = ("impute_input",)  # also score zero-imputation of the features (metric@impute_input)
        mem = torch.zeros(self.n_members, dtype=torch.bool)
        self._sets = {}
        for name, ids in (
            ("cross", self.cross_ids + (self.ssl_cross.member_ids if self.ssl_cross else [])),
            ("local", self.bottom_ids + self.top_ids + (self.ssl_local.member_ids if self.ssl_local else [])),
            ("train", self.cross_ids + self.bottom_ids + self.top_ids + list(self.head_ids)),
        ):
            m = mem.clone()
            m[ids] = True
            self._sets[name] = m

    def _split(self):
        return split_image_encoder(self.ctx.model.arch, self.ctx.in_ch, self.ctx.model.cut)

    # -- encoders
    def local(self, blocks, need: torch.Tensor | None = None) -> torch.Tensor:
        """Local representations ``[K, B, cut]``: bottom, ReLU, top (MLP), or the two image halves."""
        if not self.image:
            return self.top(torch.relu(self.bottom(blocks)))
        b = blocks[0].shape[0]
        outs = []
        for p, ((bottom, _), (top, _)) in enumerate(zip(self.bottoms, self.tops, strict=True)):
            rows = None if need is None else need[p]
            out = blocks[0].new_zeros(b, self.ctx.model.cut)
            if rows is None or bool(rows.all()):
                out = top(bottom(blocks[p]))
            elif bool(rows.any()):
                out[rows] = top(bottom(blocks[p][rows]))
            outs.append(out)
        return torch.stack(outs)

    def representations(self, blocks, use: torch.Tensor) -> torch.Tensor:
        """What each party sends at fine-tuning and prediction: ``(h_cross + h_local) / 2``, zero where
        ``use`` ``[K, B]`` is False."""
        h = 0.5 * (self.cross(blocks, need=use) + self.local(blocks, need=use))
        return self.fill_absent(self.send(h, use) * use[:, :, None].float(), use)

    def fill_absent(self, r: torch.Tensor, use: torch.Tensor) -> torch.Tensor:
        """``r`` ``[K, B, D]`` with zeros where ``use`` ``[K, B]`` is False -> the absent parties filled as
        the option ``absent`` says (zero: unchanged)."""
        if self.absent == "zero":
            return r
        if self.absent == "mean":
            fill = self.mean_rep[:, None, :].expand_as(r)
        else:  # present_mean: the mean of the present parties' representations of each sample
            present = use.float()
            fill = ((r * present[:, :, None]).sum(0) / present.sum(0).clamp_min(1.0)[:, None])[None].expand_as(r)
        return torch.where(use[:, :, None], r, fill)

    def use_variant(self, variant: str | None) -> None:
        """``impute_input``: a missing block's (standardised) features are set to zero and encoded like
        an observed block, instead of its representation being zero at the server."""
        self.impute_input = variant == "impute_input"

    def logits(self, blocks, use: torch.Tensor) -> torch.Tensor:
        if self.impute_input:
            blocks, use = zero_missing_inputs(blocks, use), torch.ones_like(use)
        return self.fuse(self.representations(blocks, use))

    def fuse(self, r: torch.Tensor) -> torch.Tensor:
        """The server's head on the concatenated representations ``r`` ``[K, B, D]`` -> logits ``[B, C]``."""
        return self.head(r.permute(1, 0, 2).reshape(r.shape[1], -1)[None])[0]

    # -- stages
    def trainable(self, stage: Stage) -> torch.Tensor:
        return self._sets[stage.name].clone()

    def _active(self, stage: str, any_rows: bool) -> torch.Tensor:
        return (self._sets[stage] if any_rows else torch.zeros_like(self._sets[stage])).to(self.device)

    def draw(self, batch: Batch, stage: Stage) -> None:
        """block_dropout: which blocks of the batch fine-tuning keeps (``[K, B]``, before the never-all rule)."""
        if stage.name == TRAIN.name and self.block_dropout > 0:
            self._keep = torch.rand(self.k, batch.size, generator=self.gen, device=self.device) >= self.block_dropout

    def loss(self, batch: Batch, stage: Stage):
        if stage.name == CROSS.name:
            return self._cross_loss(batch)
        if stage.name == LOCAL.name:
            return self._local_loss(batch)
        if self.finetune_all:  # every labeled sample, each party where it observes the block
            rows = batch.obs.any(1)
            use = batch.obs.T.clone()
        else:
            rows = batch.obs.all(1)
            use = rows[None, :].expand(self.k, -1).clone()
        if self.block_dropout > 0:  # drop observed blocks (never all of a sample's)
            dropped = use & self._keep
            use = torch.where(dropped.any(0)[None, :], dropped, use)
        r = self.representations(batch.blocks, use)
        if self.absent == "mean":  # this epoch's mean representation per party, for the next epoch and prediction
            with torch.no_grad():
                self._rep_sum += (r * use[:, :, None].float()).sum(1)
                self._rep_n += use.sum(1, keepdim=True).float()
        lg = self.fuse(r)
        loss = masked_mean_ce(lg[None], batch.y, rows[None])[0]
        return loss, self._active("train", bool(rows.any()))

    def _cross_loss(self, batch: Batch):
        full = batch.obs.all(1)  # the stage's pool is fully observed samples; kept general
        m = full[None, :].expand(self.k, -1)
        if not bool(full.any()):
            return None, self._active("cross", False)
        e = self.cross(batch.blocks, need=m)
        z, p = self.ssl_cross.heads(e, m)  # [K, B, d]
        zs = self.send(z.detach(), m)  # the projections the parties exchange (targets: no gradient crosses)
        active_pred = negative_cosine(p[0:1], zs[1:]).mean(0)  # party 0 against every passive party: [B]
        passive = negative_cosine(p[1:], zs[0:1].expand(self.k - 1, -1, -1))  # [K-1, B]
        w = full.float()
        per_party = torch.cat([active_pred[None], passive]) * w  # [K, B]
        return (per_party.sum(1) / w.sum().clamp_min(1.0)).sum(), self._active("cross", True)

    def _local_loss(self, batch: Batch):
        obs = batch.obs
        if not bool(obs.any()):
            return None, self._active("local", False)
        gen = self.gen
        views = self.ssl_local.views(batch.blocks, gen)
        b = obs.shape[0]
        m = torch.cat([obs.T, obs.T], 1)  # [K, 2B]
        h = self.local(views, need=m)
        z, p = self.ssl_local.heads(h, m)
        z1, z2, p1, p2 = z[:, :b], z[:, b:], p[:, :b], p[:, b:]
        lr_, cr = self.options["local_ratio"], self.options["constraint_ratio"]
        per = lr_ * (negative_cosine(p1, z2) + negative_cosine(p2, z1))  # [K, B]
        if cr > 0:
            with torch.no_grad():  # the guidance target: the cross-party projection of the same view
                zc, _ = self.ssl_cross.heads(self.cross(views, need=m), m)
            per = per + cr * (negative_cosine(p1, zc[:, :b]) + negative_cosine(p2, zc[:, b:]))
        w = obs.T.float()
        return ((per * w).sum(1) / w.sum(1).clamp_min(1.0)).sum(), self._active("local", True)

    def end_epoch(self, epoch: Epoch) -> None:
        """Partial model aggregation after each local epoch (equal weights: every party's local
        stage sees the same number of batches, as in the official code's FedAvg call)."""
        if epoch.stage.name == "train" and self.absent == "mean":
            self.mean_rep = torch.where(self._rep_n > 0, self._rep_sum / self._rep_n.clamp_min(1.0), self.mean_rep)
            self._rep_sum.zero_()
            self._rep_n.zero_()
        if epoch.stage.name != LOCAL.name or self.pma == "none":
            return
        if not self.image:
            names = (
                [f"local_top.{wb}{i}" for i in range(self.top.n_layers) for wb in ("w", "b")]
                + self.ssl_local.param_names
                if self.pma == "top"
                else [f"local_bottom.{wb}{i}" for i in range(self.bottom.n_layers) for wb in ("w", "b")]
            )
            for n in names:
                self.store.average_members(n)
            return
        if self.pma == "top":
            for n in self.ssl_local.param_names:
                self.store.average_members(n)
        mods = [m for m, _ in (self.tops if self.pma == "top" else self.bottoms)]
        with torch.no_grad():
            states = [m.state_dict() for m in mods]
            for key, t in states[0].items():
                if t.is_floating_point():
                    avg = torch.stack([s[key] for s in states]).mean(0)
                    for s in states:
                        s[key].copy_(avg)

    @torch.no_grad()
    def predict(self, batch: Batch):
        obs = batch.obs
        counted = obs.any(1)
        lg = self.logits(batch.blocks, obs.T)
        return BatchPrediction(
            lg.argmax(-1)[None], counted[None].clone(), None if self.c != 2 else self.score(lg)[None], counted
        )

    # -- diagnostics (vflbench.training.pipeline.SSLProbe)
    def probe_representations(self, blocks, obs: torch.Tensor) -> torch.Tensor:
        """Frozen per-party representations ``[K, B, D]`` for a linear probe (zeros where unobserved)."""
        return 0.5 * (self.cross(blocks, need=obs.T) + self.local(blocks, need=obs.T)) * obs.T[:, :, None].float()

    def collapse_std(self, blocks, obs: torch.Tensor) -> float:
        m = obs.T
        return self.ssl_cross.collapse_std(self.cross(blocks, need=m), m)

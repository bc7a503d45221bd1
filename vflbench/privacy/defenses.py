"""Label defenses on the downward path (``--label-defense SPEC``), listed by ``vflbench attacks``:

* ``gaussian:scale=S``: Gaussian noise on every returned gradient, sigma = S x the step's median gradient norm (one
  value means the same on every dataset); no guarantee.
* ``max_norm``: Li et al. (ICLR 2022): within a step, g_i + N(0, s_i^2 I) with s_i^2 = (max_j |g_j|^2 - |g_i|^2) / d,
  so that every perturbed gradient has the same expected squared norm (defeats norm scoring); no guarantee.
* ``rr:epsilon=E``: randomized response on the training labels before training (Ghazi et al., "Deep Learning with
  Label Differential Privacy", NeurIPS 2021, its RR baseline): a label is kept with probability
  e^E / (e^E + C - 1), else drawn uniformly from the other C - 1 classes. Everything computed from the noisy labels,
  every gradient of every epoch included, is E-label-DP by post-processing: the certified ``epsilon_label``.

The gradient defenses act where the server sends the gradients down (a hook on what it received,
:meth:`vflbench.privacy.channel.Channel.watch`): in one process and across processes alike, each party receives
the perturbed gradient."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..core.errors import VFLBenchError, did_you_mean
from ..core.registry import Registry

if TYPE_CHECKING:  # torch is imported where a defense acts, not where a flag is parsed (the CLI answers at once)
    import torch


@dataclass(frozen=True)
class DefenseSpec:
    """A parsed ``--label-defense``: its name and parameters (canonical text: :meth:`__str__`)."""

    name: str = "none"
    params: tuple[tuple[str, float], ...] = ()

    def __str__(self) -> str:
        return self.name + (":" + ",".join(f"{k}={v:g}" for k, v in self.params) if self.params else "")

    def get(self, key: str) -> float:
        return dict(self.params)[key]


class LabelDefense:
    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    acts_on: ClassVar[str] = ""
    params: ClassVar[dict[str, tuple[float, str]]] = {}  # name -> (default, help)
    certifies: ClassVar[bool] = False  # gives a certified label epsilon
    on_gradients: ClassVar[bool] = True

    def __init__(self, spec: DefenseSpec, gen: torch.Generator | None = None):
        self.spec, self.gen = spec, gen

    def epsilon_label(self) -> float | None:
        return None

    def gradient(self, g: torch.Tensor, sent: torch.Tensor, party_of, summed: bool) -> torch.Tensor:
        return g

    def randomize(self, y: torch.Tensor, n_classes: int, gen: torch.Generator) -> torch.Tensor:
        return y


DEFENSES: Registry[type[LabelDefense]] = Registry("label defense")


@DEFENSES.register("none")
class NoDefense(LabelDefense):
    name = "none"
    on_gradients = False


def _rows(g: torch.Tensor, sent: torch.Tensor, summed: bool) -> torch.Tensor:
    """[..., B] bool: the rows of ``g`` that go down (sent), in ``g``'s leading shape."""
    sent = sent.to(g.device)
    return sent.any(0) if summed else sent


@DEFENSES.register("gaussian")
class GaussianGradientNoise(LabelDefense):
    name = "gaussian"
    paper = "Gaussian noise on returned gradients (as in VFLAIR's DP defenses)"
    acts_on = "the gradients the server returns"
    params = {"scale": (1.0, "sigma as a multiple of the step's median gradient norm")}

    def gradient(self, g, sent, party_of, summed):
        rows = _rows(g, sent, summed)
        norms = g.norm(dim=-1)[rows]
        if not len(norms):
            return g
        import torch

        sigma = float(self.spec.get("scale")) * float(norms.median())
        noise = torch.randn(g.shape, generator=self.gen, device=g.device, dtype=g.dtype) * sigma
        return g + noise * rows[..., None].to(g.dtype)


@DEFENSES.register("max_norm")
class MaxNorm(LabelDefense):
    name = "max_norm"
    paper = "Li et al., Label Leakage and Protection in Two-party Split Learning (ICLR 2022)"
    acts_on = "the gradients the server returns"

    def gradient(self, g, sent, party_of, summed):
        rows = _rows(g, sent, summed).to(g.dtype)
        sq = (g * g).sum(-1) * rows  # [..., B]
        top = sq.max(dim=-1, keepdim=True).values
        var = ((top - sq).clamp_min(0) / g.shape[-1]) * rows
        import torch

        noise = torch.randn(g.shape, generator=self.gen, device=g.device, dtype=g.dtype)
        return g + noise * var.sqrt()[..., None]


@DEFENSES.register("rr")
class RandomizedResponse(LabelDefense):
    name = "rr"
    paper = "Ghazi et al., Deep Learning with Label Differential Privacy (NeurIPS 2021), randomized response"
    acts_on = "the training labels, before training (every gradient is then label-DP)"
    params = {"epsilon": (1.0, "the label epsilon: a label is kept with probability e^eps / (e^eps + C - 1)")}
    certifies = True
    on_gradients = False

    def epsilon_label(self) -> float:
        return float(self.spec.get("epsilon"))

    def randomize(self, y: torch.Tensor, n_classes: int, gen: torch.Generator) -> torch.Tensor:
        import torch

        eps = self.epsilon_label()
        keep_p = math.exp(eps) / (math.exp(eps) + n_classes - 1)
        u = torch.rand(y.shape, generator=gen)
        other = (y + 1 + torch.randint(0, n_classes - 1, y.shape, generator=gen)) % n_classes
        return torch.where(u < keep_p, y, other)


def parse_defense(value: Any) -> DefenseSpec:
    """``none | gaussian[:scale=S] | max_norm | rr:epsilon=E`` -> a canonical :class:`DefenseSpec`."""
    if isinstance(value, DefenseSpec):
        return value
    text = str(value if value is not None else "none").strip()
    name, _, rest = text.partition(":")
    name = name.strip().replace("-", "_")
    if name not in DEFENSES:
        raise VFLBenchError(
            f"Unknown label defense {name!r}.{did_you_mean(name, DEFENSES.names())} `vflbench attacks` lists them."
        )
    cls = DEFENSES.get(name)
    given: dict[str, float] = {}
    for item in [x for x in rest.split(",") if x.strip()]:
        key, eq, v = item.partition("=")
        key = key.strip()
        if not eq or key not in cls.params:
            raise VFLBenchError(
                f"--label-defense {name}: unknown parameter {key!r}; its parameters: {', '.join(cls.params) or 'none'}."
            )
        try:
            given[key] = float(v)
        except ValueError:
            raise VFLBenchError(f"--label-defense {name}: {key} takes a number, got {v!r}.") from None
        if not math.isfinite(given[key]) or given[key] <= 0:
            raise VFLBenchError(f"--label-defense {name}: {key} must be a positive number, got {v}.")
    return DefenseSpec(name, tuple((k, given.get(k, d)) for k, (d, _) in cls.params.items()))


def make_defense(spec: DefenseSpec, gen: torch.Generator | None = None) -> LabelDefense:
    return DEFENSES.get(spec.name)(spec, gen)

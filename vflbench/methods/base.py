"""The method interface: a method holds only the maths.

A method

* declares its options (:class:`Option`: type, default, help, and optionally the protocol field
  that supplies the default) and its training stages (:class:`Stage`: which samples it uses, and
  whether it sees their labels);
* builds its models in :meth:`Method.build` (parameters are registered per *member*, the
  independently trained units: an extractor, a head);
* returns, for a :class:`Batch` at a stage, a loss and the members it trains (:meth:`Method.loss`);
* predicts for a batch (:meth:`Method.predict`), per predictor, with the samples that count.

It calls :meth:`Method.send` wherever a party's representation leaves the party; that is the
party-to-server boundary (:mod:`vflbench.privacy.channel`), where traffic is counted and where a privacy
mechanism or quantiser can be installed without editing the method. Per-run scalars for the CSV
(e.g. an epsilon) come from :meth:`Method.extras`.

The trainer (:mod:`vflbench.training.trainer`) owns everything else: stages, epochs, batches, backward,
the optimiser and its schedule, callbacks and progress. The conformance suite
``tests/test_method_contract.py`` runs every registered method through the same checks;
``docs/ADDING_A_METHOD.md`` walks through a complete example.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from ..core.errors import VFLBenchError
from ..core.registry import Registry
from ..core.rng import Streams
from ..nn.models import Extractors, HeadBank, ModelSpec, ParamStore
from ..privacy.channel import Channel
from .losses import cross_entropy, gap_signs, masked_mean_ce, zero_missing_inputs  # noqa: F401  (re-exported)
from .options import OPTION_TYPES, Option, fusion_option  # noqa: F401  (re-exported)

SAMPLE_SETS = ("labeled", "aligned", "complete", "all")


@dataclass(frozen=True)
class Stage:
    """A training stage. ``samples``: ``labeled`` (the labeled training samples; all of them when the
    run has no ``--labeled``), ``aligned`` (only labeled samples that observe every block), or
    ``complete`` (every sample, labeled or not, that observes every block), or ``all`` (labeled and
    unlabeled). ``labels=False`` hides the labels (``batch.y`` is None). ``hp`` names the preset
    block of this stage's hyper-parameters (None: the run's). Consecutive stages with the same
    ``group`` alternate epoch by epoch instead of running one after the other."""

    name: str = "train"
    samples: str = "labeled"
    labels: bool = True
    hp: str | None = None
    group: str | None = None

    def __post_init__(self):
        if self.samples not in SAMPLE_SETS:
            raise ValueError(f"Stage samples must be one of {SAMPLE_SETS}, got {self.samples!r}")


@dataclass
class Batch:
    """One training or evaluation batch, everything a method may read.

    ``blocks``: ``[K, B, w]`` stacked tabular blocks, or a list of K image tiles ``[B, C, h, w]``.
    ``obs``: ``[B, K]`` bool observed-mask (per-batch masks are identical rows).
    ``y``: ``[B]`` labels; -1 where a sample is unlabeled (stages over ``all`` samples); None when
    the stage hides labels or at prediction. ``idx``: the samples' indices in their split;
    ``number``: the batch's position in the epoch."""

    blocks: Any
    obs: torch.Tensor
    y: torch.Tensor | None
    idx: torch.Tensor
    number: int

    @property
    def size(self) -> int:
        return int(self.obs.shape[0])

    @property
    def labeled(self) -> torch.Tensor | None:
        return None if self.y is None else self.y >= 0


@dataclass
class Epoch:
    """What :meth:`Method.begin_epoch` sees: the stage's full training mask ``obs`` ``[n, K]`` (by
    sample index), the epoch's sample ``order``, the batch size, whether masks are per batch, and the
    labels the stage trains with ``y`` ``[n]`` (by sample index; None when the stage hides them)."""

    stage: Stage
    number: int
    obs: torch.Tensor
    order: torch.Tensor
    batch_size: int
    per_batch: bool
    y: torch.Tensor | None = None


@dataclass
class BatchPrediction:
    preds: torch.Tensor  # [P, B] long
    valid: torch.Tensor  # [P, B] bool: predictor p answers for sample b
    scores: torch.Tensor | None  # [P, B] float: positive-class score (binary tasks)
    counted: torch.Tensor  # [B] bool: sample enters the metric denominators


@dataclass
class MethodContext:
    """What a method is built from (filled by the pipeline from the resolved run)."""

    k: int
    n_classes: int
    widths: list[int]
    in_ch: int
    model: ModelSpec
    device: torch.device
    streams: Streams
    options: dict[str, Any] = field(default_factory=dict)
    positive_class: int | None = None
    epochs: int | None = None  # the run's planned epochs over all stages (a horizon, e.g. to calibrate noise)
    monitored: bool = False  # a pass over the training set follows every epoch (--target)
    # per party: (position in its block, table rows, size) of each embedded categorical column (data.datasets.encoding)
    embedded: list[list[tuple[int, int, int]]] = field(default_factory=list)


class Method:
    """Base class. Subclasses set the class attributes below and implement :meth:`build`,
    :meth:`loss` and :meth:`predict`."""

    name: ClassVar[str]
    display: ClassVar[str]
    paper: ClassVar[str] = ""
    hp_key: ClassVar[str] = "all"  # which hyper-parameter block of a preset applies
    f1_rule: ClassVar[str]  # "per_predictor_mean" | "per_predictor_nonzero" | "single"
    option_specs: ClassVar[tuple[Option, ...]] = ()
    stages: ClassVar[tuple[Stage, ...]] = (Stage(),)
    local_only: ClassVar[bool] = False  # True: no representation ever leaves a party (e.g. Local)
    needs_labeled: ClassVar[bool] = False  # True: semi-supervised only; a run must give --labeled
    eval_variants: tuple[
        str, ...
    ] = ()  # other ways to predict, logged as metric@variant (see use_variant); a run's options may set it in build
    assumptions: ClassVar[tuple[str, ...]] = ()  # choices the paper leaves open, recorded in the manifest
    packable: ClassVar[bool] = (
        False  # the loss can run under torch.func.vmap over a pack of runs (vflbench.training.packing)
    )
    pack_state: ClassVar[tuple[str, ...]] = ()  # attributes holding a run's own draws that the loss reads
    boundary_refusal: ClassVar[str | None] = None  # why a --mechanism cannot wrap this method's boundary (None: it can)
    setting_options: ClassVar[tuple[str, ...]] = ()  # run flags this method takes as its own options (--secagg)
    runtime_refusal: ClassVar[str | None] = (
        None  # why the parties of this method cannot run as separate processes (None: they can; federation.runtime)
    )
    sums_at_server: ClassVar[bool] = (
        # the server reads only the sum of the parties' values (Channel.aggregate): secure aggregation can hide each one
        False
    )
    boundary = None  # the run's vflbench.privacy.mechanisms.Boundary once a mechanism is attached
    faults = None  # the run's vflbench.runs.faults.PartyFaults when parties can be lost (predictions mask them)
    # `vflbench tune`: the method's own options worth searching, name -> ("float"|"int"|"log", low, high) or
    # ("choice", values); the common hyper-parameters (lr, weight decay, batch size, epochs) are searched for every
    # method (vflbench.grids.tuning)
    search_space: ClassVar[dict[str, tuple]] = {}
    # the conformance suite's short runs (8 epochs at lr 3e-3 on 1,500 synthetic samples): a method's overrides
    smoke_hp: ClassVar[dict[str, Any]] = {}  # e.g. plain SGD needs a larger step
    smoke_options: ClassVar[dict[str, Any]] = {}  # method options of those runs (where the case sets none itself)
    # True: the method trains on the whole training set at once (gradient-boosted trees: :meth:`fit_whole`), not in
    # minibatch steps of a loss; the trainer hands it the set, its masks and the class weights the neural methods'
    # sampler would use
    trains_whole: ClassVar[bool] = False
    # what an attack (``--attack``) can observe of this method: "boundary" (representations up, gradients down: the
    # neural methods), "secureboost" (SecureBoost's messages: instance spaces, g/h), "none" (nothing crosses)
    attack_surface: ClassVar[str] = "boundary"

    @classmethod
    def rounds(cls, options: dict[str, Any], epochs: int) -> tuple[int, str]:
        """How many epochs ``--fail-party`` may name (given the run's ``epochs`` over all stages), and what they are."""
        return epochs, "epochs (over all its stages)"

    @classmethod
    def loss_refusal(cls, options: dict[str, Any]) -> str | None:
        """Why a run of this method cannot go on when a party is lost, i.e. when its block is missing for
        every sample from then on (None: it can; vflbench.runs.faults). The default: it cannot."""
        return "its model reads every party's block"

    def __init__(self, ctx: MethodContext):
        self.ctx = ctx
        self.k, self.c = ctx.k, ctx.n_classes
        self.device = ctx.device
        self.options = {**{o.name: o.default for o in self.option_specs}, **ctx.options}
        self.stages = type(self).stages_for(self.options)  # this run's stages (options may add one)
        self.store = ParamStore()
        self.init_gen = ctx.streams.torch("init")
        self.gen = torch.Generator(device=ctx.device)
        self.gen.manual_seed(ctx.streams.seed_for("method"))
        self.n_members = 0
        self.member_group: list[int] = []  # which optimiser of the original code each member belongs to
        self.extractor_sets: list[Extractors] = []
        self.module_members: list[tuple[torch.nn.Module, int]] = []
        self.channel = Channel(self.k)
        self.build()
        self.store.finalize(self.init_gen)
        self.store.to(self.device)
        for e in self.extractor_sets:
            e.to(self.device)
        for mod, _ in self.module_members:
            mod.to(self.device)

    # -- declared interface
    @classmethod
    def option(cls, name: str) -> Option:
        for o in cls.option_specs:
            if o.name == name:
                return o
        raise KeyError(name)

    @classmethod
    def stages_for(cls, options: dict[str, Any]) -> tuple[Stage, ...]:
        """The stages of a run with these (resolved) options: ``stages`` unless an option adds or
        changes one (e.g. ``pretrain=simsiam`` puts a self-supervised stage first)."""
        return cls.stages

    @classmethod
    def validate_options(cls, options: dict[str, Any]) -> str | None:
        """Checks across options (each option's own check runs first); an error message or None."""
        return None

    @classmethod
    def behaviour_components(cls, options: dict[str, Any], info=None) -> list[str]:
        """Behaviour components (vflbench.runs.behaviour) a run of this method uses beyond ``method.NAME``, by its
        options (SecureBoost under Paillier: its packing) and its dataset's ``info`` (Ensemble on a binary target:
        its scores)."""
        return []

    @classmethod
    def libraries(cls, options: dict[str, Any]) -> list[str]:
        """Libraries whose version the run's numbers depend on (their versions enter the key: XGBoost's for gbdt
        and for SecureBoost's sketch binning)."""
        return []

    def predicts_while_growing(self) -> bool:
        """Whether a :attr:`trains_whole` method can predict with the rounds grown so far, in the middle of its
        training (then ``early_stop`` scores each round as it is grown and ends the training when the count stops,
        instead of growing every round and scoring them after): the same rounds kept, the same numbers, fewer rounds
        grown."""
        return False

    @classmethod
    def class_weighting(cls, balanced: bool) -> str:
        """How a run weighs the classes when its protocol samples them in balance (``balanced``) or not: the neural
        methods draw each class equally often (a class-balanced sampler), the methods trained at once weigh each row
        by ``n / (C n_c)`` (:func:`vflbench.training.train_set.class_weights`); ``none`` otherwise."""
        if not balanced:
            return "none"
        return "balanced weights" if cls.trains_whole else "balanced sampling"

    @classmethod
    def settings_refusal(cls, settings: dict[str, Any]) -> str | None:
        """Why this method cannot run with these run settings (checked when a run is resolved); None: it can."""
        return None

    def fit_whole(self, blocks: list[Any], y: Any, observed: Any, weights: Any, progress) -> list[float]:
        """A :attr:`trains_whole` method's training: ``blocks`` each party's training columns ([n, w_k] numpy),
        ``y`` [n], ``observed`` [n, K] the training mask, ``weights`` [n] the class weights; ``progress(done, total,
        loss)`` after each round. Returns the training loss after each round."""
        raise NotImplementedError

    def build(self) -> None:
        raise NotImplementedError

    def loss(self, batch: Batch, stage: Stage) -> tuple[torch.Tensor | None, torch.Tensor]:
        """The training loss for ``batch`` at ``stage`` and the members it trains (bool
        ``[n_members]``); only those are stepped. A batch on which nothing trains returns no active
        member (the trainer skips it) and may return None as its loss; a packable method returns a
        finite loss there instead of branching on the data (see :mod:`vflbench.training.packing`)."""
        raise NotImplementedError

    def predict(self, batch: Batch) -> BatchPrediction:
        raise NotImplementedError

    def display_loss(self, batch: Batch, value: float) -> float:
        """The training loss ``value`` of ``batch`` as the progress bar shows it: the loss itself, unless its scale
        says nothing to a reader (LASER-VFL's paper weights: their weighted mean). Only what is shown; the
        optimised loss and the recorded curve are ``value``."""
        return value

    def party_losses(self, batch: Batch, stage: Stage) -> tuple[torch.Tensor, torch.Tensor] | None:
        """For a method whose parties train alone (Local, Ensemble): each party's own loss term
        ``[K]``, the training loss being their sum, and the active members; None (the default): the
        method has one joint loss. A runtime that runs parties as processes trains each party on its
        own term (:mod:`vflbench.federation.runtime`)."""
        return None

    def begin_epoch(self, epoch: Epoch) -> None:
        """Called before each epoch, so a method can draw an epoch's randomness in one call."""

    def end_epoch(self, epoch: Epoch) -> None:
        """Called after each epoch's last step (e.g. to aggregate parameters across parties)."""

    def draw(self, batch: Batch, stage: Stage) -> None:
        """Called before :meth:`loss` on every training batch: draw the batch's randomness here (and
        keep it on ``self``), not in the loss, so that the loss is a pure function of the batch, the
        parameters and the attributes named in ``pack_state`` (what packed training needs)."""

    def extras(self) -> dict[str, Any]:
        """Per-run scalars added as columns of the run's CSV rows (and to its manifest)."""
        return {}

    # -- a saved model (vflbench run --save-model; vflbench serve)
    def party_members(self) -> dict[int, list[int]]:
        """The members each party computes before what it sends at prediction (its part of a saved model): the
        members of its extractors; a method whose parties send more (Ensemble: their logits) adds its own."""
        out: dict[int, list[int]] = {k: [] for k in range(self.k)}
        for ex in self.extractor_sets:
            for m, p in zip(ex.member_ids, ex.party_of, strict=True):
                out[int(p)].append(int(m))
        return out

    def model_parts(self) -> dict[str, Any]:
        """The trained model split by who holds it: ``party_K`` (what party K computes: its members' values in the
        parameter store) and ``server`` (every other value). Image extractors are not split yet."""
        if any(e.modules is not None for e in self.extractor_sets) or self.module_members:
            raise VFLBenchError(
                f"{self.display}: saving a model split by party is built for tabular (MLP) models; this run's "
                "extractors are image modules."
            )
        flat = self.store.flat.detach().cpu()
        owner = torch.full((max(self.n_members, 1),), -1, dtype=torch.long)
        for k, members in self.party_members().items():
            owner[torch.as_tensor(members, dtype=torch.long)] = k
        elem = owner[self.store.member_of.cpu()] if len(flat) else torch.zeros(0, dtype=torch.long)
        parts: dict[str, Any] = {}
        for k in range(-1, self.k):
            idx = torch.nonzero(elem == k).flatten()
            parts["server" if k < 0 else f"party_{k}"] = {"flat_index": idx, "flat": flat[idx].clone()}
        return parts

    def prediction_rounds(self) -> int:
        """The rounds a prediction takes, each a question to every party and its answer, one after the other
        (serving charges a party's delay once per round): one for a method whose parties send what they compute
        and are done."""
        return 1

    def load_part(self, name: str, part: dict[str, Any]) -> None:
        """Put a saved part (:meth:`model_parts`) back into the built method."""
        with torch.no_grad():
            idx = part["flat_index"].to(self.store.flat.device)
            self.store.flat[idx] = part["flat"].to(self.store.flat.device, self.store.flat.dtype)

    def manifest_extras(self) -> dict[str, Any]:
        """What the method records in the manifest beyond its CSV columns, under its own name (e.g. SecureBoost's
        bytes by message kind and its Paillier operations); empty: nothing."""
        return {}

    def probe_representations(self, blocks, obs: torch.Tensor) -> torch.Tensor | None:
        """The per-party representations ``[K, B, D]`` a linear probe reads after self-supervised
        pretraining (zeros where ``obs`` ``[B, K]`` is False); None when the method has none. The
        default reads the party extractors ``self.ext`` of the SimSiam-pretrained baselines."""
        ext = getattr(self, "ext", None)
        if ext is None or getattr(self, "ssl", None) is None:
            return None
        return ext(blocks, need=obs.T) * obs.T[:, :, None].float()

    def party_representations(self, blocks, obs: torch.Tensor) -> torch.Tensor | None:
        """Each party's bottom model on its own block, ``[K, B, D]``: what party k can compute by itself (model
        completion, vflbench.privacy.attacks.completion, starts from it). The default reads the party extractors
        ``self.ext`` of a method with one sender per party; None when there is no such model."""
        ext = getattr(self, "ext", None)
        if ext is None or getattr(self, "party_of", None) is not None:
            return None
        return ext(blocks, need=obs.T)

    def collapse_std(self, blocks, obs: torch.Tensor) -> float | None:
        """SimSiam's collapse diagnostic on these samples (see :meth:`SimSiam.collapse_std`); None without one."""
        ssl = getattr(self, "ssl", None)
        return None if ssl is None else ssl.collapse_std(self.ext(blocks, need=obs.T), obs.T)

    def on_attach(self, boundary) -> None:
        """Called when a mechanism is attached at this method's boundary (e.g. to log a variant)."""

    def use_variant(self, variant: str) -> None:
        """Predict the ``variant`` way (one of ``eval_variants``) until told otherwise."""
        raise VFLBenchError(f"{self.display} has no evaluation variant {variant!r}.")

    def trainable(self, stage: Stage) -> torch.Tensor:
        """Members the optimiser of ``stage`` may update (all by default; e.g. a second stage that
        trains only a classifier returns its members). With SimSiam pretraining (``self.ssl``), its
        stage trains the extractors and the SimSiam heads only, and the heads never train after it
        (the optimiser then skips their parameters: the same numbers, fewer operations)."""
        t = torch.ones(self.n_members, dtype=torch.bool)
        ssl = getattr(self, "ssl", None)
        if ssl is not None and getattr(ssl, "ext", None) is not None:
            if stage.name == "pretrain":
                t[:] = False
                t[ssl.ext.member_ids] = True
                t[ssl.member_ids] = True
            else:
                t[ssl.member_ids] = False
        return t

    # -- the party-to-server boundary
    def send(self, reps: torch.Tensor, sent: torch.Tensor, party_of: torch.Tensor | None = None) -> torch.Tensor:
        """Call where representations ``[M, B, D]`` leave their parties; ``sent`` ``[M, B]`` says which
        cross, ``party_of`` ``[M]`` which party each sender is (a tensor kept on the method). A lost party
        (vflbench.runs.faults) sends nothing, whatever the method asked of it: the server receives zeros."""
        if self.faults is not None and self.faults.any_lost:
            here = self.faults.available(reps.device)
            here = here if party_of is None else here[party_of.to(reps.device)]
            sent, reps = sent & here[:, None], reps * here[:, None, None].to(reps.dtype)
        return self.channel.up(reps, sent, party_of)

    # -- construction helpers
    def new_members(self, n: int, groups: list[int] | None = None) -> list[int]:
        ids = list(range(self.n_members, self.n_members + n))
        self.n_members += n
        self.member_group += groups if groups is not None else [0] * n
        return ids

    def extractors(
        self, prefix: str, party_of: list[int], groups: list[int] | None = None
    ) -> tuple[Extractors, list[int]]:
        ids = self.new_members(len(party_of), groups)
        ex = Extractors(
            self.ctx.model,
            self.store,
            prefix,
            party_of,
            ids,
            self.ctx.widths,
            self.ctx.in_ch,
            self.init_gen,
            self.ctx.embedded or None,
        )
        self.extractor_sets.append(ex)
        return ex, ids

    def heads(
        self, prefix: str, n: int, in_dim: int, groups: list[int] | None = None, hidden: int | None = None
    ) -> tuple[HeadBank, list[int]]:
        """``n`` fusion heads; ``hidden`` None follows the model's ``head_hidden`` (0 = one Linear)."""
        ids = self.new_members(n, groups)
        return HeadBank(
            self.store, prefix, ids, in_dim, self.c, self.ctx.model.head_hidden if hidden is None else hidden
        ), ids

    def module(self, make: Callable[[], torch.nn.Module], group: int = 0) -> tuple[torch.nn.Module, int]:
        """Any ``torch.nn.Module`` as one member (e.g. a decoder or a discriminator). ``make`` runs
        under a seed drawn from the method's ``init`` stream, so initialisation is reproducible."""
        (mid,) = self.new_members(1, [group])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=self.init_gen)))
            mod = make()
        self.module_members.append((mod, mid))
        return mod, mid

    def fusion_is_mean(self) -> bool:
        """Fusion of representations before a Linear head: 'mean' (the papers' default) or 'sum'."""
        f = self.options.get("fusion", "mean")
        if f not in ("mean", "sum"):
            raise VFLBenchError(
                f"fusion must be 'mean' or 'sum' for {self.display}, got {f!r} (PlugVFL always concatenates)."
            )
        return f == "mean"

    # -- shared
    def module_params(self) -> list[tuple[torch.nn.Parameter, int]]:
        return [mp for e in self.extractor_sets for mp in e.member_params()] + [
            (p, mid) for mod, mid in self.module_members for p in mod.parameters()
        ]

    def n_params(self) -> int:
        return self.store.n_params() + sum(p.numel() for p, _ in self.module_params())

    def rows_per_sample(self) -> int:
        """Rows one training sample puts through the models in a step (FALSE-VFL: its importance samples):
        with the parameters and the batch size, the size of a step, which decides a run's threads."""
        return 1

    def train(self, mode: bool = True) -> None:
        self.store.train(mode)
        for e in self.extractor_sets:
            e.train(mode)
        for mod, _ in self.module_members:
            mod.train(mode)

    def random_classes(self, shape) -> torch.Tensor:
        return torch.randint(0, self.c, shape, generator=self.gen, device=self.device)

    def score(self, logits: torch.Tensor) -> torch.Tensor | None:
        if self.c != 2:
            return None
        return logits.softmax(-1)[..., self.ctx.positive_class if self.ctx.positive_class is not None else 1]


METHODS: Registry[type[Method]] = Registry("method")


def display_name(name: str) -> str:
    return METHODS.get(name).display if name in METHODS else name


def method_order(names) -> list[str]:
    """Registered methods in registry order, then unknown names (e.g. from an old CSV) sorted."""
    names = list(dict.fromkeys(names))
    return [m for m in METHODS.names() if m in names] + sorted(set(names) - set(METHODS.names()))

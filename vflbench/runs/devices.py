"""Where a run computes: ``--device auto`` decides per run, ``cpu`` and ``cuda`` force.

The rule for ``auto`` (``benchmarks/device_choice.py`` measures both devices side by side on a host
that has both, and is what set it):

* no CUDA device: the CPU;
* image extractors (convolutions: ``cnn-small``, ``resnet18``, ``resnet18-half``): CUDA. Their steps are
  large enough for a GPU to win by an order of magnitude;
* MLP extractors on tabular data: the CPU. Their steps are a few small matrix products, dominated by
  kernel launches on a GPU: on one H100 (2026-11-24), LASER-VFL on Credit took 0.615 s/epoch on CUDA
  against 0.342 s/epoch on one CPU thread of the same host, and a pack of 16 seeds on the GPU took
  2.70 s per seed for 20 epochs, about what 16 single-thread CPU workers give together. Measured again
  on an H100 host (2026-11-25, ``python benchmarks/device_choice.py --rounds 3 --packs 1,16``): one run
  0.362 s/epoch on one CPU thread against 0.654 on CUDA; a pack of 16 in one process 2.168 s/epoch on one
  CPU thread against 1.281 on CUDA (0.080 s per run and epoch), which 16 single-thread sweep workers
  (0.362 / 16 = 0.023 s per run and epoch, if the cores scale) still beat; not measured: the crossover
  for a host with few cores. LASER-VFL on 5,120 CIFAR-10-shaped samples: 7.41 s/epoch on the CPU, 0.63 on CUDA.
  Measured a third time on an H100 host (2026-11-26, ``python benchmarks/device_choice.py --rounds 3 --packs 1,16``
  and ``--rounds 2 --packs 2,4,8``), seconds
  per epoch of the pack, one CPU thread against CUDA: 0.289/0.608, 0.538/0.778, 0.920/0.771, 1.308/0.899,
  2.099/0.984. On the GPU a pack costs about the same whatever its width (launch-bound), so from a width of 4 a
  pack in one process runs faster on the GPU than on one CPU thread; but a sweep of single-thread workers on
  the host's 16 cores does 16 runs at a time (0.289 / 16 = 0.018 s per run and epoch, if the cores scale),
  still ahead of CUDA's best, 0.061 for a pack of 16. So ``auto`` keeps tabular runs on the CPU. A GPU host
  with few cores is the exception, where a packed sweep would gain from ``--device cuda`` (estimated from these
  figures, not measured on such a host): two cores do 0.289 / 2 = 0.145 s per run and epoch, a pack of 8 on CUDA
  0.112.

The choice and its reason are recorded in every manifest (``device``, ``device_reason``). A party or
server process of ``--runtime processes`` takes the device the in-process run would take, so both
runtimes compute on the same device.
"""

from __future__ import annotations

import torch

from ..core.errors import VFLBenchError

DEVICES = ("auto", "cpu", "cuda")

REASONS = {
    "forced": "forced by --device {name}",
    "no_cuda": "--device auto: no CUDA device on this host",
    "image": "--device auto: image extractors ({arch}) run faster on the GPU",
    "tabular": "--device auto: tabular MLP steps are too small for a GPU (launch-bound; benchmarks/device_choice.py); "
    "the CPU was faster on an H100 host (0.342 vs 0.615 s/epoch, LASER-VFL on Credit)",
}


def cuda_available() -> bool:
    return torch.cuda.is_available()


def choose_device(requested: str | torch.device, arch: str = "mlp") -> tuple[torch.device, str]:
    """(device, reason) for a run whose extractors are ``arch`` (``mlp`` or an image extractor)."""
    if isinstance(requested, torch.device):
        return requested, REASONS["forced"].format(name=requested)
    name = str(requested).strip().lower()
    if name not in DEVICES:
        raise VFLBenchError(f"Unknown device '{requested}'. Choices: {', '.join(DEVICES)}.")
    if name == "cuda" and not cuda_available():
        raise VFLBenchError("--device cuda requested but CUDA is not available; use --device cpu or auto.")
    if name != "auto":
        return torch.device(name), REASONS["forced"].format(name=name)
    if not cuda_available():
        return torch.device("cpu"), REASONS["no_cuda"]
    if arch != "mlp":
        return torch.device("cuda"), REASONS["image"].format(arch=arch)
    return torch.device("cpu"), REASONS["tabular"]

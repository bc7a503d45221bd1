"""Blocks that are present but wrong (vflbench.data.wrong_blocks): corruption and misalignment at training and at
test, and screening a suspect block as missing at prediction (vflbench.training.screening)."""

from __future__ import annotations

from typing import Any

from ...core.errors import VFLBenchError
from ..schema import Setting, declare

SCORES = ("auto", "cross", "density")


class ScreenSpec(str):
    """``SCORE[:FPR][@PARTIES]`` parsed once; it *is* its canonical label. ``score``: auto | cross | density;
    ``fpr``: the share of clean validation blocks a party's threshold flags (default 0.05; 0 flags nothing, 1 every
    block that has a score); ``parties``: the screened parties (None: every party but the label party, party 0)."""

    score: str
    fpr: float
    parties: tuple[int, ...] | None

    def __new__(cls, value: Any) -> ScreenSpec:
        if isinstance(value, ScreenSpec):
            return value
        text = str(value).strip().lower()
        body, _, where = text.partition("@")
        score, _, fpr = body.partition(":")
        if score not in SCORES:
            raise VFLBenchError(
                f"Unknown --screen score '{score}'; write auto, cross or density, optionally :FPR (the share of clean "
                "validation blocks flagged, default 0.05) and @PARTIES (e.g. cross:0.05@1+2)."
            )
        try:
            rate = float(fpr) if fpr else 0.05
        except ValueError:
            raise VFLBenchError(f"--screen {value}: the false-positive rate '{fpr}' is not a number.") from None
        if not 0.0 <= rate <= 1.0:
            raise VFLBenchError(f"--screen {value}: the false-positive rate {rate:g} is outside [0, 1].")
        parties = None
        if where:
            try:
                parties = tuple(sorted({int(p) for p in where.split("+")}))
            except ValueError:
                raise VFLBenchError(f"--screen {value}: after '@' write the parties' numbers joined by '+'.") from None
        obj = super().__new__(cls, f"{score}:{rate:g}" + (f"@{'+'.join(map(str, parties))}" if parties else ""))
        obj.score, obj.fpr, obj.parties = score, rate, parties
        return obj

    def screened(self, k: int) -> list[int]:
        if self.parties is None:
            return [p for p in range(k) if p != 0] or [0]
        bad = [p for p in self.parties if p >= k]
        if bad:
            raise VFLBenchError(f"--screen {self} names party {bad[0]}, but the run has parties 0-{k - 1}.")
        return list(self.parties)


def _corrupt(value: Any):
    from ...data.wrong_blocks import corrupt_spec

    return corrupt_spec(value)


def _misalign(value: Any):
    from ...data.wrong_blocks import misalign_spec

    return misalign_spec(value)


def _test(family: str):
    def parse(value: Any):
        from ...data.wrong_blocks import wrong_settings

        return wrong_settings(value, family)

    return parse


def _screen(value: Any):
    if value is None or str(value).strip() in ("", "none"):
        return None
    return ScreenSpec(value)


def _check(values: dict[str, Any], mcls) -> None:
    k = int(values.get("parties") or 0)
    specs = [values["train_corrupt"], values["train_misalign"], *values["test_corrupt"], *values["test_misalign"]]
    for s in specs:
        if not s.none and k:
            s.eligible(k)  # one party: misalignment and default corruption have no block to make wrong
    if values.get("screen") is not None and values.get("runtime") == "processes":
        raise VFLBenchError(
            "--screen is not built for --runtime processes (the server would need the parties' representations of "
            "the calibration rows); run it in one process (--runtime inprocess)."
        )
    mech = values.get("mechanism")
    if (
        values.get("screen") is not None
        and getattr(mech, "name", "none") != "none"
        and values["screen"].score != "density"
    ):
        raise VFLBenchError(
            f"--screen {values['screen'].score} reads the parties' representations as computed, not as the mechanism "
            "releases them; with --mechanism use --screen density (each party scores its own block, a flag crosses)."
        )
    if values.get("screen") is not None and getattr(mcls, "draws_noise", False) and values["screen"].score == "cross":
        raise VFLBenchError(
            f"--screen cross reads the parties' representations as computed; {mcls.display} releases them through its "
            "own privacy mechanism. Use --screen density (each party scores its own block) or auto."
        )
    if values.get("screen") is not None and k:
        values["screen"].screened(k)
        if mcls is not None and getattr(mcls, "local_only", False) and values["screen"].score == "cross":
            raise VFLBenchError(
                f"--screen cross reads the representations the parties send; {mcls.display}'s parties send none. "
                "Use --screen density."
            )


def _none(family: str):
    from ...data.wrong_blocks import WrongSpec

    return WrongSpec("none", family)


declare(
    Setting(
        "train_corrupt",
        _none("corrupt"),
        "training corruption of present blocks: none, gauss:RATE:SEVERITY (1-5), stuck:RATE, scale:RATE:FACTOR; "
        "@any or @1+2 after it picks the parties (default: all but the label party 0)",
        _corrupt,
        metavar="SPEC",
        column=False,
        example="gauss:0.2:3",
        bad="gauss:0.2:9",
        check=_check,
    )
)
declare(
    Setting(
        "test_corrupt",
        (_none("corrupt"),),
        "comma-separated test corruptions (each as --train-corrupt); every one is crossed with every --test-missing "
        "and --test-misalign setting, one result row each",
        _test("corrupt"),
        metavar="SPECS",
        column=False,
        example=["none", "gauss:0.5:3"],
        bad=["none", "none"],
    )
)
declare(
    Setting(
        "train_misalign",
        _none("misalign"),
        "training misalignment of present blocks: none, permute:RATE (a derangement among the affected rows), "
        "near:RATE (another row sharing the label party's key attribute)",
        _misalign,
        metavar="SPEC",
        column=False,
        example="permute:0.2",
        bad="permute:1.5",
    )
)
declare(
    Setting(
        "test_misalign",
        (_none("misalign"),),
        "comma-separated test misalignments (each as --train-misalign), crossed with the other test settings",
        _test("misalign"),
        metavar="SPECS",
        column=False,
        example=["none", "permute:0.5"],
        bad=["shuffle:0.5"],
    )
)
declare(
    Setting(
        "screen",
        None,
        "screen suspect blocks as missing at prediction: auto | cross (the other parties' representations predict "
        "this one's) | density (the party's own), [:FPR] the share of clean validation blocks flagged (0.05), "
        "[@1+2] the parties; adds METRIC@screen rows and screen_auroc",
        _screen,
        metavar="SCORE",
        column=False,
        example="cross:0.05",
        bad="magic",
    )
)

"""User-facing errors: one clear message that names the fix, turned into a non-zero exit by the CLI."""


class VFLBenchError(Exception):
    """An error caused by user input or the environment (not a bug).

    The CLI prints ``str(err)`` on one line and exits with status 2, without a traceback.
    """


class VFLBenchWarning(UserWarning):
    """Something the user should know that does not stop the run (e.g. columns no party owns).
    The CLI prints it as one yellow line."""


class TrainingDiverged(VFLBenchError):
    """The training loss became NaN or infinite; the CLI exits with status 3."""

    exit_code = 3

    def __init__(self, epoch: int, loss: float, stage: str | None = None):
        where = f"epoch {epoch}" + (f" of stage {stage}" if stage else "")
        super().__init__(f"training diverged at {where} (loss = {loss}); lower --lr")
        self.epoch, self.loss = epoch, loss


class DataUnavailableError(VFLBenchError):
    """A dataset's files are not on disk and cannot be downloaded or copied from the mirror."""


def did_you_mean(name: str, choices) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(choices), n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return f"{hint} Choices: {', '.join(sorted(choices))}."

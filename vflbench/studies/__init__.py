"""Studies: the report of each study folder under results/ (one module a study, registered by the study's name in
``registry``), rebuilt by `vflbench report results/STUDY` from the study's runs. A study reads results and methods'
names; only the command line imports this folder."""

from . import (  # noqa: F401
    attacks,
    big_tables,
    communication,
    encrypted,
    false_controlled,
    faults,
    robustness,
    scalability,
    serving,
    suite_protocol,
    suite_xgboost_rounds,
    trees,
    wan,
)
from .registry import REPORTS, study_of, write_report

__all__ = ["REPORTS", "study_of", "write_report"]

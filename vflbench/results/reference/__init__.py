"""The papers' result tables as CSV (package data), read by the reports that set a reproduced table beside the
paper's; no code."""

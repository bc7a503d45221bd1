"""The training of one run: its inputs (masks and tensors), the trainer (stages, epochs, batches, callbacks), packs of
runs trained together, evaluation and metrics, monitors (targets, budgets, early stopping), and the pipeline from a
resolved run to its rows. It imports every floor below it (core to runs, federation and results); grids, serving and
the CLI import it."""

"""Datasets and what a run sees of them: loaders and the registry of names (:mod:`.datasets`), preparation (split,
encoding, partition), feature partitioners, missingness mechanisms and entity alignment. It imports
:mod:`vflbench.core` alone; runs, methods, training and above may import it."""

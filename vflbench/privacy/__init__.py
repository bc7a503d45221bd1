"""Privacy at the party-to-server boundary: mechanisms and their accountant, the channel that counts and perturbs what
crosses, secure aggregation, label defenses, and the attacks that measure what leaks (:mod:`.attacks`). It imports
:mod:`vflbench.core` alone; methods, runs and everything above may import it."""

"""Gradient-boosted trees: vflbench's own histogram booster (:mod:`.booster`, the central algorithm), the binning of a
party's columns (:mod:`.binning`), and SecureBoost across parties (:mod:`.secureboost`, with homomorphic encryption in
:mod:`.he`). Numpy and gmpy2 only: the methods ``gbdt`` and ``secureboost`` (vflbench.methods) wrap them."""

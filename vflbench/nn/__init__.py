"""Neural building blocks: the parameter store and the vectorised MLP and image extractors (:mod:`.models`), the masked
optimisers (:mod:`.optim`), bias corrections. It imports :mod:`vflbench.core` alone; methods and training import it."""

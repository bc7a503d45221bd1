"""Many runs at once: experiment files (:mod:`.experiment`), sweeps with resume, packing and Ray (:mod:`.sweep`), and
hyper-parameter tuning (:mod:`.tuning`). It imports the floors below (runs, training, results); the CLI imports it."""

"""A run as requested and as resolved: the settings and their flags, the schema of requests, presets of hyper-
parameters, protocols, behaviour versions and the run key, devices, party faults. It imports core, data, nn,
privacy, compression and methods (for their declarations); federation, results, training, grids, serving and the CLI
import it."""

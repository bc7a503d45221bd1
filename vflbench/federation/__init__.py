"""Parties as processes: the wire between them (:mod:`.wire`), the runtime that starts and watches them, checkpoints
and rejoining after a lost party. It imports core, data, privacy, compression, methods and runs; training (the
pipeline hands a run to it), grids, serving and the CLI import it."""

"""What a run leaves and how it is read back: the CSV rows and manifest (:mod:`.outputs`), tables in the papers'
layouts (:mod:`.report`, :mod:`.artefacts`), statistics, ranks across tables, plots. It imports core, data, privacy,
methods and runs; training, grids, serving and the CLI import it."""

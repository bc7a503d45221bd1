"""Serving a trained federation: a run's model saved split by party (:mod:`.model_files`, ``vflbench run
--save-model``), inference under party deadlines where a late or lost party is a missing block (:mod:`.federation`),
parties as their own processes that each load only their part (:mod:`.party`), and the HTTP endpoint
(:mod:`.app`, ``vflbench serve``)."""

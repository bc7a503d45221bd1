"""The ground floor: errors, the registry type, named random streams, paths, limits, timing, progress bars, YAML and
tensor-tree files. Everything may import it; it imports no other vflbench package."""

"""Compression at the party-to-server boundary (``--compress``): what the flag takes (:mod:`.spec`, no torch), the
compressors (:mod:`.compressors`) and the channel that carries them (:mod:`.channel`). docs/COMMUNICATION.md."""

from .spec import COMPRESSORS, CompressionSpec, parse_compression

__all__ = ["COMPRESSORS", "CompressionSpec", "parse_compression"]

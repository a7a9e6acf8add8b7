"""Text lines that reach Python in chunks: the deserializer of the shim's ``LineChunksRDD``.

PySpark's ``sc.textFile`` sends every line as a frame of its own (a length and
its UTF-8 bytes), which the Python worker reads with two calls and decodes one
by one: in ``benchmarks/batch.py``'s data (lines of about 20 bytes) that costs
Python more than splitting the line into fields. ``LineChunksRDD`` sends a
task's lines as frames of about :data:`CHUNK_BYTES`, lines joined by ``'\\n'``;
:class:`LineChunks` decodes each frame once and splits it. This module is
imported by the Python workers that read such an RDD, so it imports nothing of
Spark's beyond PySpark's serializers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

from pyspark.serializers import FramedSerializer

#: Bytes of lines per frame: big enough that the per-frame cost vanishes, small enough
#: that a frame and its decoded lines are a small part of a Python worker's memory.
CHUNK_BYTES = 256 << 10


class LineChunks(FramedSerializer):
    """Frames of ``'\\n'``-joined UTF-8 lines to lines (``str``, or ``bytes`` without
    ``use_unicode``), as ``sc.textFile(path, use_unicode=...)`` yields them.

    A frame of ``k`` lines has ``k - 1`` separators: an empty frame is one empty
    line. A line that is not ASCII was decoded and encoded again in the JVM, as
    PySpark's own ``textFile`` sends it, so bytes that are not UTF-8 become U+FFFD
    exactly as there.
    """

    def __init__(self, use_unicode: bool = True) -> None:
        super().__init__()
        self.use_unicode = use_unicode

    def dumps(self, obj: Any) -> bytes:
        raise NotImplementedError("LineChunks only reads what the JVM sends")

    def loads(self, obj: bytes) -> bytes:
        return obj

    def load_stream(self, stream: IO[bytes]) -> Iterator[Any]:
        frames = super().load_stream(stream)  # type: ignore[no-untyped-call]
        if self.use_unicode:
            for frame in frames:
                yield from frame.decode("utf-8", "replace").split("\n")
        else:
            for frame in frames:
                yield from frame.split(b"\n")

    def __repr__(self) -> str:
        return f"LineChunks(use_unicode={self.use_unicode})"

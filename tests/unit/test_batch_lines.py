"""The deserializer of the shim's line chunks: frames of '\\n'-joined lines back to lines."""

from __future__ import annotations

import io

from pyspark.serializers import SpecialLengths, write_int

from spark_adaptive.spark.lines import LineChunks


def _stream(*frames: bytes, end: bool = True) -> io.BytesIO:
    out = io.BytesIO()
    for frame in frames:
        write_int(len(frame), out)
        out.write(frame)
    if end:
        write_int(SpecialLengths.END_OF_DATA_SECTION, out)
    out.seek(0)
    return out


def test_a_frame_of_k_lines_gives_k_lines_and_an_empty_frame_one_empty_line() -> None:
    frames = (b"a,1\n\nb,2", b"", "h\u00e9\x0cx\u2028y".encode(), b"\n")
    lines = list(LineChunks().load_stream(_stream(*frames)))
    # '\x0c' and U+2028 stay inside their line: only '\n' separates lines.
    assert lines == ["a,1", "", "b,2", "", "h\u00e9\x0cx\u2028y", "", ""]


def test_bytes_without_use_unicode_and_the_end_of_the_stream_without_its_marker() -> None:
    lines = list(LineChunks(use_unicode=False).load_stream(_stream(b"x\ny", b"z", end=False)))
    assert lines == [b"x", b"y", b"z"]


def test_bytes_that_are_not_utf8_become_the_replacement_character() -> None:
    assert list(LineChunks().load_stream(_stream(b"bad \xff!"))) == ["bad \ufffd!"]


def test_equal_serializers_compare_equal_so_unions_keep_them() -> None:
    assert LineChunks() == LineChunks()
    assert LineChunks() != LineChunks(use_unicode=False)
    assert repr(LineChunks(False)) == "LineChunks(use_unicode=False)"

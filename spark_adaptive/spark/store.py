"""The requirements file beside a checkpoint, through Hadoop's FileSystem (any store Spark uses).

:class:`HadoopRequirementsStore` implements
:class:`~spark_adaptive.core.streaming.persistence.RequirementsStore` with the same
py4j access to ``org.apache.hadoop.fs.FileSystem`` as
:mod:`spark_adaptive.spark.checkpoint`, so a checkpoint on HDFS, S3 or local
disk works alike, with the app's own Hadoop configuration (credentials
included).

Atomic replace: the new content goes to a hidden temporary file in the same
directory, which is then renamed over the old one. Local and most object
stores replace on rename; HDFS's ``rename`` refuses an existing target, so
then the old file is deleted and the rename repeated (Spark's own
``FileSystemBasedCheckpointFileManager`` does the same). A crash in that small
window leaves no file, and the query falls back to its default bounds.

Every method may be called from any thread (py4j gives each its own
connection); failures raise :class:`~spark_adaptive.errors.PersistenceError`
with the store's own message.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from spark_adaptive.core.streaming.persistence import RELATIVE_PATH, decode, encode
from spark_adaptive.core.streaming.requirements import ResourceRequirements
from spark_adaptive.errors import PersistenceError
from spark_adaptive.spark.jvm import jvm

if TYPE_CHECKING:
    from pyspark import SparkContext


class HadoopRequirementsStore:
    """Reads and writes ``<checkpoint>/spark-adaptive/requirements.json``."""

    def __init__(self, sc: SparkContext) -> None:
        self._sc = sc

    def _target(self, checkpoint: str) -> tuple[Any, Any]:
        """The file's Hadoop ``Path`` and its ``FileSystem``."""
        j = jvm(self._sc)
        path = j.org.apache.hadoop.fs.Path(j.org.apache.hadoop.fs.Path(checkpoint), RELATIVE_PATH)
        return path, path.getFileSystem(self._sc._jsc.hadoopConfiguration())

    def load(self, checkpoint: str) -> ResourceRequirements | None:
        try:
            path, fs = self._target(checkpoint)
            if not fs.exists(path):
                return None
            stream = fs.open(path)
            try:
                text = str(jvm(self._sc).org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
            finally:
                stream.close()
        except Exception as e:  # py4j errors carry the store's message
            raise PersistenceError(f"cannot read {checkpoint}/{RELATIVE_PATH}: "
                                   f"{_message(e)}") from e
        try:
            return decode(text)
        except ValueError as e:
            raise ValueError(f"{checkpoint}/{RELATIVE_PATH} is not a requirements file: {e}"
                             ) from None

    def save(self, checkpoint: str, requirements: ResourceRequirements) -> None:
        data = bytearray(encode(requirements).encode("utf-8"))
        temp = None
        fs = None
        try:
            path, fs = self._target(checkpoint)
            j = jvm(self._sc)
            parent = path.getParent()
            fs.mkdirs(parent)
            temp = j.org.apache.hadoop.fs.Path(parent, f".requirements.json.{uuid.uuid4().hex}.tmp")
            out = fs.create(temp, False)
            try:
                out.write(data)
            finally:
                out.close()
            if not fs.rename(temp, path):
                # HDFS does not rename over an existing file.
                if fs.exists(path):
                    fs.delete(path, False)
                if not fs.rename(temp, path):
                    raise OSError(f"renaming {temp.toString()} to {path.toString()} failed")
            temp = None
        except Exception as e:
            raise PersistenceError(f"cannot write {checkpoint}/{RELATIVE_PATH}: "
                                   f"{_message(e)}") from e
        finally:
            if temp is not None and fs is not None:
                _delete_quietly(fs, temp)

    def remove(self, checkpoint: str) -> None:
        try:
            path, fs = self._target(checkpoint)
            if fs.exists(path):
                fs.delete(path, False)
        except Exception as e:
            raise PersistenceError(f"cannot delete {checkpoint}/{RELATIVE_PATH}: "
                                   f"{_message(e)}") from e


def _delete_quietly(fs: Any, path: Any) -> None:
    try:
        fs.delete(path, False)
    except Exception:  # best effort: a stray hidden temp file is harmless
        pass


def _message(e: Exception) -> str:
    """The first line of a py4j error (the Java exception), or the Python message."""
    java = getattr(e, "java_exception", None)
    if java is not None:
        return str(java.toString())
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__

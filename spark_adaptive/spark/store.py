"""The files beside a checkpoint, through Hadoop's FileSystem (any store Spark uses).

:class:`HadoopRequirementsStore` implements
:class:`~spark_adaptive.core.streaming.persistence.RequirementsStore` and
:class:`HadoopHistoryStore` implements
:class:`~spark_adaptive.core.streaming.history_store.HistoryStore`, both with
the same py4j access to ``org.apache.hadoop.fs.FileSystem`` as
:mod:`spark_adaptive.spark.checkpoint`, so a checkpoint on HDFS, S3 or local
disk works alike, with the app's own Hadoop configuration (credentials
included).

Atomic replace: the new content goes to a hidden temporary file in the same
directory, which is then renamed over the old one. Local and most object
stores replace on rename; HDFS's ``rename`` refuses an existing target, so
then the old file is deleted and the rename repeated (Spark's own
``FileSystemBasedCheckpointFileManager`` does the same). A crash in that small
window leaves no file, and the query falls back to its default bounds (or an
empty history).

Every method may be called from any thread (py4j gives each its own
connection); failures raise :class:`~spark_adaptive.errors.PersistenceError`
with the store's own message.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from spark_adaptive.core.streaming import history_store
from spark_adaptive.core.streaming.history import SavedHistory
from spark_adaptive.core.streaming.persistence import RELATIVE_PATH, decode, encode
from spark_adaptive.core.streaming.requirements import ResourceRequirements
from spark_adaptive.errors import PersistenceError
from spark_adaptive.spark.jvm import error_text, jvm

if TYPE_CHECKING:
    from pyspark import SparkContext


class CheckpointFile:
    """One file at ``relative`` under any checkpoint location: its text read, written
    atomically, deleted. Errors are py4j's (or ``OSError``), for the caller to word."""

    def __init__(self, sc: SparkContext, relative: str) -> None:
        self._sc = sc
        self._relative = relative
        self._name = relative.rsplit("/", 1)[-1]

    def _target(self, checkpoint: str) -> tuple[Any, Any]:
        """The file's Hadoop ``Path`` and its ``FileSystem``."""
        j = jvm(self._sc)
        path = j.org.apache.hadoop.fs.Path(j.org.apache.hadoop.fs.Path(checkpoint),
                                           self._relative)
        return path, path.getFileSystem(self._sc._jsc.hadoopConfiguration())

    def read(self, checkpoint: str) -> str | None:
        """The file's text; None if there is no file."""
        path, fs = self._target(checkpoint)
        if not fs.exists(path):
            return None
        stream = fs.open(path)
        try:
            return str(jvm(self._sc).org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def write(self, checkpoint: str, text: str) -> None:
        """Replace the file with ``text``, through a hidden temporary file renamed over it."""
        data = bytearray(text.encode("utf-8"))
        temp = None
        path, fs = self._target(checkpoint)
        try:
            j = jvm(self._sc)
            parent = path.getParent()
            fs.mkdirs(parent)
            temp = j.org.apache.hadoop.fs.Path(parent, f".{self._name}.{uuid.uuid4().hex}.tmp")
            out = _unchecksummed(j, fs).create(temp, False)
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
        finally:
            if temp is not None:
                _delete_quietly(fs, temp)

    def delete(self, checkpoint: str) -> None:
        """Delete the file if there is one."""
        path, fs = self._target(checkpoint)
        if fs.exists(path):
            fs.delete(path, False)


def _unchecksummed(j: Any, fs: Any) -> Any:
    """The file system to write the temporary file with: a checksummed one's raw file
    system. Hadoop's local file system writes a ``.crc`` beside each file, and when a
    write fails on a full disk its stream's ``close`` stops at the failing flush and
    leaves the file open (the space is then never freed); the raw stream closes. The
    rename through ``fs`` then drops the target's old ``.crc``, and the file is read
    without one (its JSON is checked when decoded)."""
    checksummed = j.java.lang.Class.forName("org.apache.hadoop.fs.ChecksumFileSystem")
    return fs.getRawFileSystem() if checksummed.isInstance(fs) else fs


class HadoopRequirementsStore:
    """Reads and writes ``<checkpoint>/spark-adaptive/requirements.json``."""

    def __init__(self, sc: SparkContext) -> None:
        self._file = CheckpointFile(sc, RELATIVE_PATH)

    def load(self, checkpoint: str) -> ResourceRequirements | None:
        try:
            text = self._file.read(checkpoint)
        except Exception as e:  # py4j errors carry the store's message
            raise PersistenceError(f"cannot read {checkpoint}/{RELATIVE_PATH}: "
                                   f"{error_text(e)}") from e
        if text is None:
            return None
        try:
            return decode(text)
        except ValueError as e:
            raise ValueError(f"{checkpoint}/{RELATIVE_PATH} is not a requirements file: {e}"
                             ) from None

    def save(self, checkpoint: str, requirements: ResourceRequirements) -> None:
        try:
            self._file.write(checkpoint, encode(requirements))
        except Exception as e:
            raise PersistenceError(f"cannot write {checkpoint}/{RELATIVE_PATH}: "
                                   f"{error_text(e)}") from e

    def remove(self, checkpoint: str) -> None:
        try:
            self._file.delete(checkpoint)
        except Exception as e:
            raise PersistenceError(f"cannot delete {checkpoint}/{RELATIVE_PATH}: "
                                   f"{error_text(e)}") from e


class HadoopHistoryStore:
    """Reads and writes ``<checkpoint>/spark-adaptive/history.json``."""

    def __init__(self, sc: SparkContext) -> None:
        self._file = CheckpointFile(sc, history_store.HISTORY_PATH)

    def load(self, checkpoint: str) -> SavedHistory | None:
        where = history_store.history_file(checkpoint)
        try:
            text = self._file.read(checkpoint)
        except Exception as e:
            raise PersistenceError(f"cannot read {where}: {error_text(e)}") from e
        if text is None:
            return None
        try:
            return history_store.decode(text)
        except ValueError as e:
            raise ValueError(f"{where} is not a rescale history: {e}") from None

    def save(self, checkpoint: str, history: SavedHistory) -> None:
        where = history_store.history_file(checkpoint)
        try:
            self._file.write(checkpoint, history_store.encode(history))
        except Exception as e:
            raise PersistenceError(f"cannot write {where}: {error_text(e)}") from e


def _delete_quietly(fs: Any, path: Any) -> None:
    try:
        fs.delete(path, False)
    except Exception:  # best effort: a stray hidden temp file is harmless
        pass

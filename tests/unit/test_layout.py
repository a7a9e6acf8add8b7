"""The one boundary to the JVM: what import-linter cannot see, read from the source.

import-linter (``lint-imports``) enforces the import contracts in pyproject.toml. A JVM
handle reached through an attribute (``sc._jvm``, ``df._jdf``) is no import, so this
test reads the package's source for them: they belong in ``spark_adaptive/spark/``.
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "spark_adaptive"
#: PySpark's handles on JVM objects (``_jrdd_deserializer`` is a Python serializer).
JVM_HANDLE = re.compile(r"\._(jvm|jsc|jrdd|jdf|jwrite|jsq|jconf|jsparkSession|gateway)\b")


def test_jvm_handles_appear_only_in_the_spark_boundary() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "spark" and path.parent.parent == PACKAGE:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if JVM_HANDLE.search(line):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}")
    assert found == []


def test_no_module_imports_another_by_string() -> None:
    found = [str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py")
             if re.search(r"import_module\(|__import__\(", p.read_text())]
    assert found == []

"""The ``spark-adaptive`` command.

``spark-adaptive install-hook`` places ``spark_adaptive_startup.pth`` in this
interpreter's site-packages. A regular ``pip install`` does that by itself; an
editable install (``pip install -e``) does not, so the set-up runs this.
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
from pathlib import Path

PTH_NAME = "spark_adaptive_startup.pth"
PTH_LINE = "import _spark_adaptive_startup\n"


def install_hook(site_packages: str | None = None) -> Path:
    target = Path(site_packages or sysconfig.get_paths()["purelib"]) / PTH_NAME
    if not target.exists() or target.read_text() != PTH_LINE:
        target.write_text(PTH_LINE)
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spark-adaptive",
                                 description="Elastic scaling for Apache Spark.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    hook = sub.add_parser("install-hook", help="enable zero-code activation in this environment")
    hook.add_argument("--site-packages", default=None)
    args = ap.parse_args(argv)
    if args.cmd == "install-hook":
        print(f"installed {install_hook(args.site_packages)}")
        return 0
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())

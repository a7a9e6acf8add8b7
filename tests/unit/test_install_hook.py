"""``spark-adaptive install-hook``: the .pth it writes, and how it fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from spark_adaptive import cli

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_pth_is_the_one_install_hook_writes() -> None:
    assert (ROOT / cli.PTH_NAME).read_text() == cli.PTH_LINE


def _start_python_with(site_dir: Path) -> subprocess.CompletedProcess[str]:
    code = (f"import site, sys; site.addsitedir({str(site_dir)!r}); "
            "print('_spark_adaptive_startup' in sys.modules)")
    return subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          cwd=site_dir, timeout=60)


def test_the_pth_left_behind_by_an_uninstall_breaks_no_python_start(tmp_path: Path) -> None:
    cli.install_hook(str(tmp_path))  # the module itself is not in tmp_path
    done = _start_python_with(tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "False"
    assert "Error processing" not in done.stderr, done.stderr


def test_the_pth_loads_the_hook_where_it_is_installed(tmp_path: Path) -> None:
    cli.install_hook(str(tmp_path))
    (tmp_path / "_spark_adaptive_startup.py").write_text(
        (ROOT / "_spark_adaptive_startup.py").read_text())
    done = _start_python_with(tmp_path)
    assert done.stdout.strip() == "True", done.stderr


def test_remove_deletes_the_hook(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["install-hook", "--site-packages", str(tmp_path)]) == 0
    assert (tmp_path / cli.PTH_NAME).exists()
    assert cli.main(["install-hook", "--site-packages", str(tmp_path), "--remove"]) == 0
    assert not (tmp_path / cli.PTH_NAME).exists()
    assert "removed" in capsys.readouterr().out


def test_a_directory_it_cannot_write_is_exit_2_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nonexistent"
    assert cli.main(["install-hook", "--site-packages", str(missing)]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "Traceback" not in err


def test_a_directory_python_does_not_read_gets_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["install-hook", "--site-packages", str(tmp_path)]) == 0
    assert "not on this interpreter's sys.path" in capsys.readouterr().err

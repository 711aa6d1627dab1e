"""`maxkernel port` on bad input: one line on stderr, exit 2, no traceback (fast: no jax compile runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from maxkernel.tpu_tools.cli.main import main  # noqa: E402

SOURCES = Path(__file__).parent / "sources"


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("no_model.py", "no Model: define class Model(nn.Module)"),
        ("bad_init.py", "inputs cannot be built: Model(*get_init_inputs())"),
        ("random_forward.py", "draws random numbers in eval mode (aten.randn_like (line 7))"),
        ("fails_itself.py", "source_error: the source fails on its own in forward at line 7"),
        ("untranslatable.py", "no path can translate aten.sort (line 7:"),
        ("missing.py", "source file not found"),
    ],
)
def test_bad_source_is_one_line_and_exit_2(source, says, tmp_path, capsys):
    rc = main(["port", str(SOURCES / source), "--out", str(tmp_path / "port.py")])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert says in err, err
    assert len(err.splitlines()) == 1, err
    assert not (tmp_path / "port.py").exists()  # nothing written for a source that cannot be ported


def test_check_and_out_together_is_a_usage_error(tmp_path, capsys):
    rc = main(["port", str(SOURCES / "dense_relu.py"), "--check", "a.py", "--out", str(tmp_path / "b.py")])
    assert rc == 2
    assert "give one" in capsys.readouterr().err

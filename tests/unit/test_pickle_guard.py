"""Pickles inside PyTorch archives are read opcode by opcode, never run: a .pt2 whose sample
inputs are a pickle payload is refused before torch.export.load sees it."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
import zipfile

import pytest

from navigator.errors import UserInputError
from navigator.sources.pickle_guard import check_archive, pickle_globals

torch = pytest.importorskip("torch")


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_globals_are_named_without_running_anything(tmp_path):
    marker = tmp_path / "ran"
    for protocol in (0, 2, 4, 5):   # GLOBAL / INST (text), STACK_GLOBAL with memoized strings
        names = pickle_globals(io.BytesIO(pickle.dumps(_Payload(marker), protocol=protocol)))
        assert any(n.endswith(".system") for n in names), (protocol, names)
    assert not marker.exists()
    assert pickle_globals(io.BytesIO(pickle.dumps({"a": [1, 2.0, "x"]}, protocol=4))) == []


def test_a_stack_global_built_from_unknown_values_is_unnamed():
    # STACK_GLOBAL over two values that are not plain strings (here: ints) cannot be named
    data = pickle.PROTO + bytes([4]) + pickle.BININT1 + b"\x01" + pickle.BININT1 + b"\x02" + pickle.STACK_GLOBAL \
        + pickle.STOP
    assert pickle_globals(io.BytesIO(data)) == ["?"]


def _pt2(tmp_path, payload=None):
    class M(torch.nn.Module):
        def forward(self, x):
            return x * 2

    good = tmp_path / "good.pt2"
    torch.export.save(torch.export.export(M(), (torch.rand(2, 3),)), str(good))
    if payload is None:
        return good
    buf = io.BytesIO()
    torch.save(payload, buf)
    bad = tmp_path / "bad.pt2"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            dst.writestr(info, buf.getvalue() if info.filename.endswith("sample_inputs/model.pt") else data)
    return bad


def test_an_exported_program_passes_and_a_payload_is_refused(tmp_path):
    check_archive(_pt2(tmp_path))
    marker = tmp_path / "ran"
    bad = _pt2(tmp_path, _Payload(marker))
    with pytest.raises(UserInputError, match=r"would import posix\.system|would import os\.system"):
        check_archive(bad)
    assert not marker.exists()


@pytest.mark.slow
def test_convert_refuses_the_payload_in_one_line_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    bad = _pt2(tmp_path, _Payload(marker))
    r = subprocess.run([sys.executable, "-m", "navigator", "convert", str(bad), "--workdir", str(tmp_path / "wd"),
                        "--shapes", "x:2x3", "--no-profile"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "weights_only loader refuses" in lines[0] and "Traceback" not in r.stderr
    assert not marker.exists()

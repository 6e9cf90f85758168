"""scripts/e2e_model.py --quick --device cpu --no-compile, in a subprocess: a small random Llama through lowbit.nn
(NF4 against transformers + bitsandbytes where bitsandbytes runs here and against `lowbit quantize`'s folder where
the CLI is found, int8 and fp8-block layers within their documented bounds, the decode latency table) exits 0 with
an 'ok' summary. The CLI is $LOWBIT_CLI, else the newest build*/tools/lowbit/lowbit (ctest sets LOWBIT_CLI)."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers", reason="transformers is not installed")
pytest.importorskip("safetensors", reason="safetensors is not installed")

import lowbit  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts",
                      "e2e_model.py")


def test_e2e_model_quick():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), HF_HUB_OFFLINE="1",
               LOWBIT_PYTHON_DIR=os.path.dirname(os.path.dirname(os.path.abspath(lowbit.__file__))))
    done = subprocess.run([sys.executable, SCRIPT, "--quick", "--device", "cpu", "--no-compile"], env=env,
                          capture_output=True, text=True, timeout=600)
    out = done.stdout
    assert done.returncode == 0, (out + done.stderr)[-6000:]
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("summary: e2e_model ok;"), out[-6000:]
    assert "DIFFER" not in summary and "lowbit-int8" in summary and "lowbit-fp8" in summary, summary
    assert "| lowbit-nf4 |" in out, out[-6000:]  # the latency table
    assert "FAIL" not in out, out[-6000:]

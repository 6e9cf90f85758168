#!/usr/bin/env bash
# ctest python.pip_install: `pip install .` from a copy of the source tree into
# a temporary target folder, then import the installed package and run one op.
# Builds the C++ library again (CPU only, -DLOWBIT_CUDA=OFF) to keep CI lean;
# no build isolation, so it needs no network (scripts/deps installed
# scikit-build-core and nanobind).
#   usage: pip_install_check.sh <source root> [python]
set -euo pipefail
src=$(cd "$1" && pwd)
py=${2:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "pip_install_check: copying $src (tracked and untracked files, no build folders) to $tmp/src"
mkdir -p "$tmp/src"
(cd "$src" && tar -c --exclude='./build*' --exclude='./.git' --exclude='./out' --exclude='__pycache__' .) |
  (cd "$tmp/src" && tar -x)

echo "pip_install_check: $py -m pip install --no-build-isolation --target $tmp/site (LOWBIT_CUDA=OFF)"
start=$SECONDS
"$py" -m pip install --quiet --no-build-isolation --no-deps --target "$tmp/site" \
  -C cmake.define.LOWBIT_CUDA=OFF -C build-dir="$tmp/build" "$tmp/src"
echo "pip_install_check: installed in $((SECONDS - start)) s:"
(cd "$tmp/site" && find lowbit -type f | sort | sed 's/^/  /')

echo "pip_install_check: importing the installed package"
cd "$tmp"
PYTHONPATH="$tmp/site" LOWBIT_EXPECT_DIR="$tmp/site/lowbit" "$py" - <<'PY'
import os
import numpy as np
import lowbit
import lowbit.functional as F

where = os.path.dirname(lowbit.__file__)
assert os.path.samefile(where, os.environ["LOWBIT_EXPECT_DIR"]), f"imported lowbit from {where}"
x = np.linspace(-1, 1, 1000, dtype=np.float32)
packed, state = F.quantize_4bit(x, quant_type="nf4")
y = F.dequantize_4bit(packed, state)
assert y.shape == x.shape and float(np.abs(y - x).max()) < 0.2
mm = lowbit.Matmul(lowbit.MatmulConfig(N=4, K=32, W_dtype="int4"))
out = mm(np.ones((2, 32), np.float16), mm.transform_weight(np.ones((4, 32), np.int8)))
assert out.shape == (2, 4) and bool((out == 32).all()), out
for stub in ("__init__.pyi", "_lowbit.pyi", "py.typed"):
    assert os.path.exists(os.path.join(where, stub)), f"{stub} missing from the installed package"
print(f"pip_install_check: lowbit {lowbit.__version__} from {where}: quantize_4bit/dequantize_4bit/Matmul ok")
PY
echo "pip_install_check: 1 passed, 0 failed"

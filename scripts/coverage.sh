#!/usr/bin/env bash
# Reports which CUDA driver and NVML functions simgpu implements: every
# function declared in .deps/include/cuda.h and .deps/include/nvml.h, as the
# symbol a program built against the header links to, checked against the
# dynamic symbols libsimgpu.so defines. A report, not a test.
#
#   scripts/coverage.sh [--summary] [LIBRARY]
#
# LIBRARY defaults to target/debug/libsimgpu.so (`cargo build -p simgpu`).
# --summary prints the counts only.
#
# A header name that cuda.h or nvml.h maps to a versioned symbol
# (`#define cuMemAlloc cuMemAlloc_v2`, `#define nvmlInit nvmlInit_v2`) counts
# as both symbols: programs built against the header link the versioned one,
# older binaries the base one, and a real driver exports both. Exports that
# no header declares (per-thread `_ptsz`/`_ptds` variants, for one) are
# listed last.
set -euo pipefail
cd "$(dirname "$0")/.."

summary=0
if [ "${1:-}" = "--summary" ]; then
    summary=1
    shift
fi
library=${1:-target/debug/libsimgpu.so}
include=.deps/include

if [ ! -f "$library" ]; then
    echo "coverage: $library not found: build it first (cargo build -p simgpu)" >&2
    exit 1
fi
for header in cuda.h nvml.h; do
    if [ ! -f "$include/$header" ]; then
        echo "coverage: $include/$header not found: run scripts/setup.sh" >&2
        exit 1
    fi
done
command -v nm >/dev/null 2>&1 || { echo "coverage: nm (binutils) is required" >&2; exit 1; }

symbols=$(mktemp)
trap 'rm -f "$symbols"' EXIT
nm -D --defined-only "$library" | awk '{ print $NF }' >"$symbols"

python3 - "$include" "$summary" "$library" "$symbols" <<'PY'
import re
import sys
import textwrap

include, summary, library, symbols_file = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4]
exported = {line.strip() for line in open(symbols_file) if line.strip()}

# (header, prefix, the macro that precedes each declared function's name)
HEADERS = [("cuda.h", "cu", "CUDAAPI"), ("nvml.h", "nvml", "DECLDIR")]


def header_symbols(path, prefix, marker):
    """Every symbol the header's declarations stand for: each declared name,
    and the versioned symbol a `#define name target` maps it to."""
    text = open(path, encoding="utf-8", errors="replace").read()
    # The marker precedes the name, or a pointer return type and the name
    # (`const DECLDIR char* nvmlErrorString(`).
    declared = set(re.findall(rf"\b{marker}\s+(?:\w+\s*\*\s*)?({prefix}[A-Za-z0-9_]+)\s*\(", text))
    # `#define cuMemcpy __CUDA_API_PTDS(cuMemcpy)` names the default-stream
    # symbol inside the macro call; a plain define names it directly.
    define = re.compile(rf"^\s*#\s*define\s+({prefix}[A-Za-z0-9_]+)\s+(?:__CUDA_API_PT(?:DS|SZ)\()?({prefix}[A-Za-z0-9_]+)\)?\s*$", re.M)
    mapped = {target for name, target in define.findall(text) if name in declared}
    return declared | mapped


def wrapped(names):
    return textwrap.fill(" ".join(sorted(names)), width=100, initial_indent="    ", subsequent_indent="    ")


print(f"simgpu coverage of {include}/cuda.h and nvml.h by {library}")
declared_anywhere = set()
for header, prefix, marker in HEADERS:
    symbols = header_symbols(f"{include}/{header}", prefix, marker)
    declared_anywhere |= symbols
    have = symbols & exported
    missing = symbols - exported
    share = 100.0 * len(have) / max(len(symbols), 1)
    print(f"\n{header}: {len(symbols)} functions, {len(have)} exported ({share:.1f}%), {len(missing)} missing")
    if not summary:
        print(f"  exported ({len(have)}):\n{wrapped(have)}")
        print(f"  missing ({len(missing)}):\n{wrapped(missing)}")

extra = {s for s in exported if re.match(r"(cu|nvml)[A-Z]", s)} - declared_anywhere
print(f"\nexported but declared in neither header: {len(extra)}")
if not summary and extra:
    print(wrapped(extra))
PY

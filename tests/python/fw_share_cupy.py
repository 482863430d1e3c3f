"""Holds MIB mebibytes through CuPy until its stdin closes, for the test
that two frameworks' processes of one tenant share one cap
(tests/frameworks.rs). Prints key=value lines."""
import sys

import cupy

mib = int(sys.argv[1])
held = cupy.empty(mib << 20, dtype=cupy.uint8)
cupy.cuda.Device().synchronize()
print(f"held_mib={held.nbytes >> 20}", flush=True)
print("ready=1", flush=True)
sys.stdin.read()

"""A PyTorch client of the fairness benchmark: a one-op loop (an in-place
add on a small CUDA tensor) for SECONDS, synchronising every 1000 ops, or
with ITEM_EVERY, reading one value back (`.item()`, as a training loop's
logging does) every ITEM_EVERY ops.

    torch_oploop.py SECONDS [ITEM_EVERY]

Prints started=1, waits for a line on stdin (or its end), so that several
tenants start their loops together, then prints ops=N, wall_s=W and
rate=N/W. On simgpu each op's kernel runs for SIMGPU_KERNEL_US.

Tenants compared by their rates must start together: each counts its own
SECONDS from its start, so the tenant ready first (PyTorch's import and
CUDA initialisation take seconds, and vary) runs alone before the other
starts, and the other alone after it ends, each at the whole device's
rate. For a 25 beside a 75 over 12 s, one second between their starts
turns 25 % of the ops into 29 %."""
import sys
import time

import torch


def main():
    seconds = float(sys.argv[1])
    item_every = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    x = torch.ones(16, device="cuda")
    for _ in range(200):
        x.add_(1)
    torch.cuda.synchronize()
    print("started=1", flush=True)
    sys.stdin.readline()
    ops = 0
    start = time.monotonic()
    until = start + seconds
    while time.monotonic() < until:
        if item_every:
            for _ in range(item_every):
                x.add_(1)
            x[0].item()
            ops += item_every
            continue
        for _ in range(1000):
            x.add_(1)
        torch.cuda.synchronize()
        ops += 1000
    wall = time.monotonic() - start
    print(f"ops={ops}")
    print(f"wall_s={wall:.6f}")
    print(f"rate={ops / wall:.1f}", flush=True)


if __name__ == "__main__":
    main()

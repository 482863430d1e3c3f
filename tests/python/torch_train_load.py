"""A PyTorch training loop as a tenant that keeps its device busy: an MLP
trained with Adam, each step's kernels queued behind the last step's.

    torch_train_load.py SECONDS [item [HOST_US]]

Builds the model and runs warm-up steps, prints started=1, waits for a
line on stdin (so that several tenants start together), then trains for
SECONDS of wall time, four steps queued at any time, printing as each step
ends mark=T:N (T the system's monotonic clock in seconds, N the steps done), so
that tenants' progress can be compared over the same stretch of time; at
the end it prints steps=N. Every step launches the same kernels, so on
simgpu (each kernel SIMGPU_KERNEL_US long) steps are proportional to the
device time the tenant got.

With `item`, each step ends with `loss.item()` (the loop synchronises
every step, as most training loops do for logging), then HOST_US of host
work (a data loader's time; default 0): nothing stays queued."""
import collections
import sys
import time

import torch


def main():
    seconds = float(sys.argv[1])
    item = len(sys.argv) > 2 and sys.argv[2] == "item"
    host_s = (float(sys.argv[3]) if len(sys.argv) > 3 else 0.0) / 1e6
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64, device="cuda"), torch.randint(0, 10, (32,), device="cuda")

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        return loss

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    print("started=1", flush=True)
    sys.stdin.readline()
    steps = 0
    start = time.monotonic()
    print(f"mark={start:.6f}:0")
    if item:
        while time.monotonic() - start < seconds:
            step().item()
            steps += 1
            print(f"mark={time.monotonic():.6f}:{steps}")
            host_until = time.monotonic() + host_s
            while time.monotonic() < host_until:
                pass
        print(f"steps={steps}", flush=True)
        return
    # Four steps stay queued, so the device never waits for Python; each
    # step's end is known when the wait on its event returns.
    queued = collections.deque()
    while time.monotonic() - start < seconds:
        step()
        done = torch.cuda.Event()
        done.record()
        queued.append(done)
        if len(queued) > 4:
            queued.popleft().synchronize()
            steps += 1
            print(f"mark={time.monotonic():.6f}:{steps}")
    torch.cuda.synchronize()
    print(f"steps={steps + len(queued)}", flush=True)


if __name__ == "__main__":
    main()

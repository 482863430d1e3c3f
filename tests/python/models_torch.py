"""PyTorch on simgpu: training steps through cuBLAS and cuDNN, events and
stream waits, a CUDA graph, the cudaMallocAsync allocator, a copy
between two devices and NCCL's single-process path. Each section prints key=value lines; a section that
fails prints `<section>=error <message>` and the script goes on, so one
run reports every section. The sections to run are the arguments (all by
default). `compiled` (torch.compile) is not in the default set: its first
run compiles for tens of seconds."""
import os
import sys
import time

import torch

from sections import report

SECTIONS = sys.argv[1:] or ["mlp", "conv", "events", "graph", "devices", "async_alloc"]


def train(model, make_batch, steps, prefix):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        x, y = make_batch()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    # Kernels compute nothing on simgpu: what matters is that every step
    # ran and the optimizer's state lives on the device.
    state = opt.state[next(iter(model.parameters()))]
    print(f"{prefix}.steps={int(state['step'].item())}", flush=True)
    print(f"{prefix}.state_device={state['exp_avg'].device}", flush=True)


def mlp():
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).cuda()
    train(model, lambda: (torch.randn(16, 32, device="cuda"), torch.randint(0, 10, (16,), device="cuda")), 3, "mlp")
    half = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    print(f"mlp.fp16_matmul_shape={tuple((half @ half).shape)}", flush=True)


def conv():
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 10),
    ).cuda()
    batch = lambda: (torch.randn(4, 3, 16, 16, device="cuda"), torch.randint(0, 10, (4,), device="cuda"))
    train(model, batch, 3, "conv")
    with torch.backends.cudnn.flags(enabled=False):
        train(model, batch, 1, "conv_no_cudnn")


def events():
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    a = torch.randn(256, 256, device="cuda")
    start.record()
    for _ in range(20):
        a = a @ a
    end.record()
    end.synchronize()
    print(f"events.elapsed_ms={start.elapsed_time(end):.6f}", flush=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        b = a * 2
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    print(f"events.side_query={int(side.query())}", flush=True)
    print(f"events.wait_shape={tuple(b.shape)}", flush=True)


def graph():
    x = torch.randn(64, 64, device="cuda")
    w = torch.randn(64, 64, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # warm-up outside capture, as PyTorch advises
            y = torch.relu(x @ w)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x @ w
        # A pause in the middle of the capture, as a long model's Python
        # makes: under gpuslice's arbitration the shim's helper thread finds
        # the process idle meanwhile and synchronises the context, which a
        # driver forbids during a global-mode capture unless that thread is
        # in relaxed mode.
        time.sleep(0.05)
        y = torch.relu(y)
    for _ in range(10):
        g.replay()
    torch.cuda.synchronize()
    print("graph.replays=10", flush=True)
    print(f"graph.out_shape={tuple(y.shape)}", flush=True)


def devices():
    count = torch.cuda.device_count()
    print(f"devices.count={count}", flush=True)
    print(f"devices.can_access_peer={int(torch.cuda.can_device_access_peer(0, 1))}", flush=True)
    src = torch.arange(1 << 20, dtype=torch.float32, device="cuda:0")
    dst = src.to("cuda:1")
    torch.cuda.synchronize(1)
    # Copies really copy: simgpu's device memory is host memory.
    print(f"devices.copy_equal={int(torch.equal(dst.cpu(), src.cpu()))}", flush=True)
    print(f"devices.copy_device={dst.device}", flush=True)
    back = dst.to("cuda:0")
    print(f"devices.back_equal={int(torch.equal(back.cpu(), src.cpu()))}", flush=True)


def async_alloc():
    assert torch.cuda.get_allocator_backend() == "cudaMallocAsync", torch.cuda.get_allocator_backend()
    t = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    print(f"async_alloc.reserved_bytes={stats['reserved_bytes.all.current']}", flush=True)
    print(f"async_alloc.allocated_bytes={stats['allocated_bytes.all.current']}", flush=True)
    del t


def nccl():
    # NCCL's single-process path: a communicator of one rank (NCCL reads
    # the topology through NVML and the driver), an all-reduce and a
    # broadcast on device 0, and the group torn down.
    import tempfile

    import torch.distributed as dist

    store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
    dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=torch.device("cuda:0"))
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    torch.cuda.synchronize()
    print(f"nccl.backend={dist.get_backend()}", flush=True)
    print(f"nccl.world_size={dist.get_world_size()}", flush=True)
    print(f"nccl.version={'.'.join(map(str, torch.cuda.nccl.version()))}", flush=True)
    dist.destroy_process_group()


def compiled():
    # torch.compile: Inductor generates Triton kernels, compiles them to a
    # cubin on the CPU, and loads and launches them through the driver.
    import torch._dynamo

    @torch.compile
    def fused(x, y):
        return torch.sin(x) * y + 1

    x = torch.randn(4096, device="cuda")
    y = torch.randn(4096, device="cuda")
    z = fused(x, y)
    torch.cuda.synchronize()
    print(f"compiled.device={z.device}", flush=True)
    print(f"compiled.shape={tuple(z.shape)}", flush=True)
    print(f"compiled.graphs={torch._dynamo.utils.counters['stats']['unique_graphs']}", flush=True)


print(f"torch={torch.__version__} allocator={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', 'native')}", flush=True)
for section in SECTIONS:
    report(section, globals()[section])
print("done=1", flush=True)

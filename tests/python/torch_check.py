"""What PyTorch sees on simgpu, bare or under a cap: an opt-in check
(scripts/check-pytorch.sh), not part of the test command, since PyTorch's
wheels are several GiB. Prints key=value lines."""
import torch

print(f"torch={torch.__version__} cuda={torch.version.cuda}", flush=True)
print(f"available={int(torch.cuda.is_available())}", flush=True)
free, total = torch.cuda.mem_get_info()
print(f"mem_get_info_total_mib={total >> 20}", flush=True)
print(f"mem_get_info_free_mib={free >> 20}", flush=True)
blocks = []
try:
    while len(blocks) < 4096:
        blocks.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
    print("oom=0", flush=True)
except torch.OutOfMemoryError as e:
    print(f"oom=1 after_mib={len(blocks) * 64}", flush=True)
    print(f"oom_message={str(e).splitlines()[0][:160]}", flush=True)
print(f"memory_reserved_mib={torch.cuda.memory_reserved() >> 20}", flush=True)
blocks.clear()
torch.cuda.empty_cache()
again = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print(f"recovered=1 memory_reserved_mib={torch.cuda.memory_reserved() >> 20}", flush=True)

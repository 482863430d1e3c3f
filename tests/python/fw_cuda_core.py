"""cuda.core on simgpu: a kernel compiled by Program (NVRTC) to a cubin and
to PTX, loaded (cuLibraryLoadData), launched on a stream and synchronised,
and a device synchronisation. Prints key=value lines for tests/frameworks.rs.
"""
import warnings

from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch

# NVRTC 13.5 warns that its PTX is newer than simgpu's 13.0 driver; simgpu
# loads it anyway (it reads only the entry names).
warnings.simplefilter("ignore", RuntimeWarning)

dev = Device(0)
dev.set_current()
print(f"arch={dev.arch}")
stream = dev.create_stream()
code = 'extern "C" __global__ void ping(int *out) { if (out) *out = 1; }\n'
for target in ("cubin", "ptx"):
    program = Program(code, code_type="c++", options=ProgramOptions(arch=f"sm_{dev.arch}"))
    kernel = program.compile(target).get_kernel("ping")
    launch(stream, LaunchConfig(grid=4, block=128), kernel, 0)
    stream.sync()
    print(f"{target}.launch=ok")
try:
    Program(code, code_type="c++", options=ProgramOptions(arch=f"sm_{dev.arch}")).compile("cubin").get_kernel("no_such_kernel")
    print("missing=found")
except Exception as e:  # cuda.core raises CUDAError naming the driver's code
    print(f"missing={'CUDA_ERROR_NOT_FOUND' if 'CUDA_ERROR_NOT_FOUND' in str(e) else type(e).__name__ + ': ' + str(e)}")
dev.sync()
print("sync=ok")
print("done=1")

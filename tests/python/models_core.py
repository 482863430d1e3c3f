"""cuda.core on simgpu: a managed-memory resource, a pinned-memory resource,
closing a private pool, and a graph built by stream capture and launched.
Prints key=value lines; a failing section prints `<name>=error ...`."""
import sys

from cuda.core import Device, DeviceMemoryResource, DeviceMemoryResourceOptions

from sections import report


dev = Device(0)
dev.set_current()
stream = dev.create_stream()


def managed():
    from cuda.core import ManagedMemoryResource
    mr = ManagedMemoryResource()
    buf = mr.allocate(1 << 20, stream=stream)
    stream.sync()
    print(f"managed.size={buf.size}", flush=True)
    print(f"managed.is_managed={int(mr.is_managed)}", flush=True)
    buf.close(stream)


def pinned():
    from cuda.core import PinnedMemoryResource
    mr = PinnedMemoryResource()
    buf = mr.allocate(1 << 20, stream=stream)
    stream.sync()
    print(f"pinned.size={buf.size}", flush=True)
    print(f"pinned.host_accessible={int(mr.is_host_accessible)}", flush=True)
    buf.close(stream)


def private_pool():
    mr = DeviceMemoryResource(dev.device_id, options=DeviceMemoryResourceOptions(max_size=64 << 20))
    buf = mr.allocate(4 << 20, stream=stream)
    buf.close(stream)
    stream.sync()
    mr.close()
    print("private_pool.closed=1", flush=True)


def graph():
    from cuda.core import LaunchConfig, Program, ProgramOptions, launch
    code = 'extern "C" __global__ void ping(int x) {}'
    kernel = Program(code, code_type="c++", options=ProgramOptions(arch=f"sm_{dev.arch}")).compile("cubin").get_kernel("ping")
    gb = stream.create_graph_builder().begin_building()
    for _ in range(2):
        launch(gb, LaunchConfig(grid=4, block=128), kernel, 0)
    g = gb.end_building().complete()
    for _ in range(3):
        g.launch(stream)
    stream.sync()
    print("graph.launches=3", flush=True)


def user_objects():
    """A user object moved into a graph lives while the graph or an
    executable made from it does, and its destructor runs (on a thread of
    the driver's) once both are gone."""
    import ctypes
    import threading
    from cuda.bindings import driver as drv

    fired = threading.Event()
    callback_type = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    destroy = callback_type(lambda _data: fired.set())
    address = ctypes.cast(destroy, ctypes.c_void_p).value
    no_sync = drv.CUuserObject_flags.CU_USER_OBJECT_NO_DESTRUCTOR_SYNC
    err, obj = drv.cuUserObjectCreate(0, drv.CUhostFn(address), 1, no_sync)
    assert err == drv.CUresult.CUDA_SUCCESS, err
    err, graph = drv.cuGraphCreate(0)
    assert err == drv.CUresult.CUDA_SUCCESS, err
    (err,) = drv.cuGraphRetainUserObject(graph, obj, 1, drv.CUuserObjectRetain_flags.CU_GRAPH_USER_OBJECT_MOVE)
    assert err == drv.CUresult.CUDA_SUCCESS, err
    err, exe = drv.cuGraphInstantiate(graph, 0)
    assert err == drv.CUresult.CUDA_SUCCESS, err
    drv.cuGraphDestroy(graph)
    print(f"user_objects.after_graph={int(fired.wait(0.2))}", flush=True)
    drv.cuGraphExecDestroy(exe)
    print(f"user_objects.after_exec={int(fired.wait(10))}", flush=True)
    print(f"user_objects.without_flag={int(drv.cuUserObjectCreate(0, drv.CUhostFn(address), 1, 0)[0])}", flush=True)


for section in sys.argv[1:] or ["managed", "pinned", "private_pool", "graph", "user_objects"]:
    report(section, globals()[section])
print("done=1", flush=True)

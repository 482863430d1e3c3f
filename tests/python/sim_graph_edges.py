"""Graph edge data on simgpu (CUgraphEdgeData: ports and type), called
through the driver's exported symbols as a C program would: programmatic
edges between kernel nodes, as XLA's command buffers add them on sm_90,
added with the node (cuGraphAddNode_v2) and later (cuGraphAddDependencies_v2),
read back, refused where cuda.h says they are invalid, removed only when
named with their data, kept by a clone, and launched. Prints key=value
lines (`<key>=<CUresult>`) for tests/simgpu_graph_edges.rs.
"""
import ctypes as C
import struct

cu = C.CDLL("libcuda.so.1")
P = C.c_void_p


def rc(key, value):
    print(f"{key}={value}")
    return value


class EdgeData(C.Structure):
    _fields_ = [("from_port", C.c_ubyte), ("to_port", C.c_ubyte), ("type", C.c_ubyte), ("reserved", C.c_ubyte * 5)]


def edge(from_port=0, to_port=0, kind=0, reserved=0):
    e = EdgeData(from_port, to_port, kind)
    e.reserved[0] = reserved
    return e


DEFAULT = edge()
# CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC, CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
PROGRAMMATIC = edge(1, 0, 1)
# CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER
LAUNCH_ORDER = edge(2, 0, 1)

PTX = b""".version 8.0
.target sm_90
.address_size 64
.visible .entry first() { ret; }
.visible .entry second() { ret; }
.visible .entry third() { ret; }
\0"""


def node_params_kernel(func):
    """CUgraphNodeParams (256 bytes): type 0, then CUDA_KERNEL_NODE_PARAMS_v3."""
    body = struct.pack("<Q7I", func, 1, 1, 1, 32, 1, 1, 0) + struct.pack("<QQQQ", 0, 0, 0, 0)
    raw = struct.pack("<I12x", 0) + body
    return C.create_string_buffer(raw + b"\0" * (256 - len(raw)), 256)


def node_params_memset(dst):
    """CUgraphNodeParams: type 2, CUDA_MEMSET_NODE_PARAMS_v2."""
    body = struct.pack("<QQIIQQQ", dst, 0, 0, 1, 16, 1, 0)
    raw = struct.pack("<I12x", 2) + body
    return C.create_string_buffer(raw + b"\0" * (256 - len(raw)), 256)


def main():
    rc("init", cu.cuInit(0))
    dev = C.c_int()
    rc("device", cu.cuDeviceGet(C.byref(dev), 0))
    ctx = P()
    rc("retain", cu.cuDevicePrimaryCtxRetain(C.byref(ctx), dev))
    rc("set_current", cu.cuCtxSetCurrent(ctx))
    module = P()
    rc("module", cu.cuModuleLoadData(C.byref(module), PTX))
    funcs = {}
    for name in ("first", "second", "third"):
        f = P()
        rc(f"func.{name}", cu.cuModuleGetFunction(C.byref(f), module, name.encode()))
        funcs[name] = f.value
    dptr = C.c_ulonglong()
    rc("alloc", cu.cuMemAlloc_v2(C.byref(dptr), C.c_size_t(1 << 16)))

    graph = P()
    rc("graph", cu.cuGraphCreate(C.byref(graph), 0))

    def add(key, params, deps, data):
        node = P()
        n = len(deps)
        deps_arr = (P * max(n, 1))(*deps)
        data_arr = (EdgeData * max(n, 1))(*data) if data is not None else None
        r = cu.cuGraphAddNode_v2(C.byref(node), graph, deps_arr if n else None, data_arr, C.c_size_t(n), params)
        rc(key, r)
        return node.value

    a = add("add.first", node_params_kernel(funcs["first"]), [], None)
    # A kernel node after a kernel node, by a programmatic edge, as XLA adds it.
    b = add("add.second_programmatic", node_params_kernel(funcs["second"]), [a], [PROGRAMMATIC])
    # Refused: a programmatic edge into a memset node; a non-zero incoming
    # port; the programmatic port on an ordinary edge; reserved bytes set;
    # an unknown type; an unknown port.
    add("add.memset_programmatic", node_params_memset(dptr.value), [b], [PROGRAMMATIC])
    add("add.to_port", node_params_kernel(funcs["third"]), [b], [edge(0, 1, 0)])
    add("add.port_without_type", node_params_kernel(funcs["third"]), [b], [edge(1, 0, 0)])
    add("add.reserved", node_params_kernel(funcs["third"]), [b], [edge(1, 0, 1, reserved=1)])
    add("add.unknown_type", node_params_kernel(funcs["third"]), [b], [edge(0, 0, 2)])
    add("add.unknown_port", node_params_kernel(funcs["third"]), [b], [edge(3, 0, 1)])
    # A memset node after a kernel by an ordinary edge; a kernel node with
    # no edge, joined afterwards by a launch-order edge.
    m = add("add.memset_default", node_params_memset(dptr.value), [b], [DEFAULT])
    c = add("add.third", node_params_kernel(funcs["third"]), [], None)
    frm, to = (P * 1)(b), (P * 1)(c)
    rc("deps.launch_order", cu.cuGraphAddDependencies_v2(graph, frm, to, (EdgeData * 1)(LAUNCH_ORDER), C.c_size_t(1)))
    names = {a: "first", b: "second", c: "third", m: "memset"}

    # Every edge with its data; a query without room for the data is lossy.
    count = C.c_size_t(0)
    rc("edges.count_rc", cu.cuGraphGetEdges_v2(graph, None, None, None, C.byref(count)))
    rc("edges.count", count.value)
    n = count.value
    f_arr, t_arr, d_arr = (P * n)(), (P * n)(), (EdgeData * n)()
    count = C.c_size_t(n)
    rc("edges.rc", cu.cuGraphGetEdges_v2(graph, f_arr, t_arr, d_arr, C.byref(count)))
    listed = [f"{names[f_arr[i]]}>{names[t_arr[i]]}:{d_arr[i].from_port}/{d_arr[i].to_port}/{d_arr[i].type}" for i in range(count.value)]
    rc("edges.list", ",".join(listed))
    count = C.c_size_t(n)
    rc("edges.lossy", cu.cuGraphGetEdges_v2(graph, f_arr, t_arr, None, C.byref(count)))
    count = C.c_size_t(n)
    rc("edges.legacy_lossy", cu.cuGraphGetEdges(graph, f_arr, t_arr, C.byref(count)))
    deps, deps_data, count = (P * 4)(), (EdgeData * 4)(), C.c_size_t(4)
    rc("deps_of_second.rc", cu.cuGraphNodeGetDependencies_v2(P(b), deps, deps_data, C.byref(count)))
    rc("deps_of_second", f"{names[deps[0]]}:{deps_data[0].from_port}/{deps_data[0].type}")
    count = C.c_size_t(4)
    rc("deps_of_memset.legacy", cu.cuGraphNodeGetDependencies(P(m), deps, C.byref(count)))
    count = C.c_size_t(4)
    rc("dependents_of_first.lossy", cu.cuGraphNodeGetDependentNodes_v2(P(a), deps, None, C.byref(count)))

    # Cloned with its data.
    clone = P()
    rc("clone", cu.cuGraphClone(C.byref(clone), graph))
    count = C.c_size_t(n)
    rc("clone.edges.rc", cu.cuGraphGetEdges_v2(clone, f_arr, t_arr, d_arr, C.byref(count)))
    rc("clone.programmatic", sum(1 for i in range(count.value) if d_arr[i].type == 1))

    # Launched: every node runs, the programmatic ones in dependency order.
    exec_ = P()
    rc("instantiate", cu.cuGraphInstantiateWithFlags(C.byref(exec_), graph, C.c_ulonglong(0)))
    stream = P()
    rc("stream", cu.cuStreamCreate(C.byref(stream), 0))
    for i in range(3):
        rc(f"launch.{i}", cu.cuGraphLaunch(exec_, stream))
    rc("sync", cu.cuStreamSynchronize(stream))

    # Removing an edge names its data: the default data does not name the
    # programmatic edge; its own data does.
    frm, to = (P * 1)(a), (P * 1)(b)
    rc("remove.default_data", cu.cuGraphRemoveDependencies_v2(graph, frm, to, None, C.c_size_t(1)))
    rc("remove.own_data", cu.cuGraphRemoveDependencies_v2(graph, frm, to, (EdgeData * 1)(PROGRAMMATIC), C.c_size_t(1)))
    count = C.c_size_t(0)
    cu.cuGraphGetEdges_v2(graph, None, None, None, C.byref(count))
    rc("edges.after_remove", count.value)

    rc("exec_destroy", cu.cuGraphExecDestroy(exec_))
    rc("clone_destroy", cu.cuGraphDestroy(clone))
    rc("graph_destroy", cu.cuGraphDestroy(graph))
    print("done=1")


main()

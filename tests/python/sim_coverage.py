"""The driver functions the CUDA runtime and NVIDIA's libraries look up at
start, called through NVIDIA's cuda-bindings (every entry point resolved
through cuGetProcAddress_v2): features a simulated device lacks answer as a
driver without them does, and core calls have their effects (bytes copied,
values set, graph edges). Prints key=value lines; `<key>=<CUresult>` for
each call, and the effects under other keys.
"""
import ctypes

from cuda.bindings import driver as cu


def rc(key, result):
    """Prints `key=<CUresult>` and returns the call's other values."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    print(f"{key}={int(err)}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def show(key, value):
    print(f"{key}={value}")


def read(ptr, n):
    back = bytearray(n)
    rc("_dtoh", cu.cuMemcpyDtoH(back, ptr, n))
    return bytes(back)


def attribute(dev, name):
    return rc("_attr", cu.cuDeviceGetAttribute(getattr(cu.CUdevice_attribute, name), dev))


def absent_features(dev, ctx):
    """Graphics interop, external memory and semaphores, IPC, NvSci."""
    rc("gl_get_devices", cu.cuGLGetDevices(1, cu.CUGLDeviceList.CU_GL_DEVICE_LIST_ALL))
    rc("gl_register_buffer", cu.cuGraphicsGLRegisterBuffer(1, 0))
    rc("vdpau_get_device", cu.cuVDPAUGetDevice(1, 0))
    rc("egl_consumer_connect", cu.cuEGLStreamConsumerConnect(0))
    rc("graphics_unregister", cu.cuGraphicsUnregisterResource(cu.CUgraphicsResource(0x1234)))

    desc = cu.CUDA_EXTERNAL_MEMORY_HANDLE_DESC()
    desc.type = cu.CUexternalMemoryHandleType.CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD
    desc.handle.fd = 0
    desc.size = 1 << 20
    rc("import_external_memory", cu.cuImportExternalMemory(desc))
    sem = cu.CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC()
    sem.type = cu.CUexternalSemaphoreHandleType.CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD
    rc("import_external_semaphore", cu.cuImportExternalSemaphore(sem))
    rc("destroy_external_memory", cu.cuDestroyExternalMemory(cu.CUexternalMemory(0x1234)))

    ptr = rc("ipc_alloc", cu.cuMemAlloc(1 << 20))
    rc("ipc_get_mem_handle", cu.cuIpcGetMemHandle(ptr))
    rc("ipc_free", cu.cuMemFree(ptr))
    event = rc("ipc_event", cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING | cu.CUevent_flags.CU_EVENT_INTERPROCESS))
    rc("ipc_get_event_handle", cu.cuIpcGetEventHandle(event))
    show("attr.ipc_event_supported", attribute(dev, "CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED"))
    show("attr.multicast_supported", attribute(dev, "CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED"))
    show("attr.host_native_atomic", attribute(dev, "CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED"))
    show("attr.timeline_semaphore_interop", attribute(dev, "CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED"))
    show("attr.mempool_handle_types", attribute(dev, "CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES"))
    show("attr.sparse_arrays", attribute(dev, "CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED"))
    show("attr.deferred_mapping_arrays", attribute(dev, "CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED"))


def copies_and_fills():
    """3D copies, 2D fills and copy batches, checked byte for byte."""
    pitch, rows, depth = 64, 4, 3
    dev_bytes = pitch * rows * depth
    dptr = rc("c3d_alloc", cu.cuMemAlloc(dev_bytes))
    rc("c3d_zero", cu.cuMemsetD8(dptr, 0, dev_bytes))
    host = bytes((i * 7 + 1) % 251 for i in range(16 * 2 * 2))
    host_buf = ctypes.create_string_buffer(host, len(host))

    # A 16 x 2 x 2 box from a tight host buffer to (x=8, y=1, z=1) of the
    # pitched device volume.
    p = cu.CUDA_MEMCPY3D()
    p.srcMemoryType = cu.CUmemorytype.CU_MEMORYTYPE_HOST
    p.srcHost = ctypes.addressof(host_buf)
    p.srcPitch = 16
    p.srcHeight = 2
    p.dstMemoryType = cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
    p.dstDevice = dptr
    p.dstPitch = pitch
    p.dstHeight = rows
    p.dstXInBytes = 8
    p.dstY = 1
    p.dstZ = 1
    p.WidthInBytes = 16
    p.Height = 2
    p.Depth = 2
    rc("memcpy3d", cu.cuMemcpy3D(p))
    got = read(dptr, dev_bytes)
    want = bytearray(dev_bytes)
    for z in range(2):
        for y in range(2):
            at = (1 + z) * rows * pitch + (1 + y) * pitch + 8
            src = (z * 2 + y) * 16
            want[at:at + 16] = host[src:src + 16]
    show("memcpy3d.bytes_ok", int(got == bytes(want)))

    stream = rc("c3d_stream", cu.cuStreamCreate(0))
    back = ctypes.create_string_buffer(len(host))
    q = cu.CUDA_MEMCPY3D()
    q.srcMemoryType = cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
    q.srcDevice = dptr
    q.srcPitch = pitch
    q.srcHeight = rows
    q.srcXInBytes = 8
    q.srcY = 1
    q.srcZ = 1
    q.dstMemoryType = cu.CUmemorytype.CU_MEMORYTYPE_HOST
    q.dstHost = ctypes.addressof(back)
    q.dstPitch = 16
    q.dstHeight = 2
    q.WidthInBytes = 16
    q.Height = 2
    q.Depth = 2
    rc("memcpy3d_async", cu.cuMemcpy3DAsync(q, stream))
    rc("c3d_sync", cu.cuStreamSynchronize(stream))
    show("memcpy3d_async.bytes_ok", int(back.raw == host))
    bad = cu.CUDA_MEMCPY3D()
    bad.srcMemoryType = cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
    bad.srcDevice = dptr
    bad.srcPitch = 4
    bad.dstMemoryType = cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
    bad.dstDevice = dptr
    bad.dstPitch = pitch
    bad.WidthInBytes = 16
    bad.Height = 1
    bad.Depth = 1
    rc("memcpy3d_pitch_too_small", cu.cuMemcpy3D(bad))

    # A 2D fill of 5 bytes in 3 rows, synchronous and on a stream.
    rc("memset2d", cu.cuMemsetD2D8(dptr, pitch, 0xAB, 5, 3))
    got = read(dptr, pitch * 3)
    show("memset2d.bytes_ok", int(all(got[r * pitch:r * pitch + 5] == b"\xab" * 5 and got[r * pitch + 5] != 0xAB for r in range(3))))
    rc("memset2d_async", cu.cuMemsetD2D8Async(int(dptr) + 32, pitch, 0xCD, 4, 2, stream))
    rc("memset2d_sync", cu.cuStreamSynchronize(stream))
    got = read(dptr, pitch * 2)
    show("memset2d_async.bytes_ok", int(got[32:36] == b"\xcd" * 4 and got[pitch + 32:pitch + 36] == b"\xcd" * 4))

    # 16- and 32-bit fills: a 2D fill of 3 x 2 16-bit elements, and of
    # 2 x 2 32-bit ones on a stream.
    wide = rc("wide_alloc", cu.cuMemAlloc(2 * pitch))
    rc("wide_zero", cu.cuMemsetD8(wide, 0, 2 * pitch))
    rc("memset2d16", cu.cuMemsetD2D16(wide, pitch, 0xBEEF, 3, 2))
    rc("memset2d32_async", cu.cuMemsetD2D32Async(cu.CUdeviceptr(int(wide) + 16), pitch, 0xA1B2C3D4, 2, 2, stream))
    rc("wide_sync", cu.cuStreamSynchronize(stream))
    got = read(wide, 2 * pitch)
    row16 = b"\xef\xbe" * 3
    row32 = b"\xd4\xc3\xb2\xa1" * 2
    show("memset2d_wide.bytes_ok", int(all(got[r * pitch:r * pitch + 6] == row16 and got[r * pitch + 6:r * pitch + 8] == b"\0\0"
                                          and got[r * pitch + 16:r * pitch + 24] == row32 for r in range(2))))
    rc("memset16_misaligned", cu.cuMemsetD16(cu.CUdeviceptr(int(wide) + 1), 1, 1))
    rc("wide_free", cu.cuMemFree(wide))

    # Two device-to-device copies in one batch.
    other = rc("batch_alloc", cu.cuMemAlloc(256))
    rc("batch_zero", cu.cuMemsetD8(other, 0, 256))
    attrs = cu.CUmemcpyAttributes()
    attrs.srcAccessOrder = cu.CUmemcpySrcAccessOrder.CU_MEMCPY_SRC_ACCESS_ORDER_STREAM
    rc("batch", cu.cuMemcpyBatchAsync([other, cu.CUdeviceptr(int(other) + 128)], [dptr, cu.CUdeviceptr(int(dptr) + 32)], [5, 4], 2, [attrs], [0], 1, stream))
    rc("batch_sync", cu.cuStreamSynchronize(stream))
    got = read(other, 256)
    show("batch.bytes_ok", int(got[0:5] == b"\xab" * 5 and got[128:132] == b"\xcd" * 4 and got[5] == 0))
    rc("batch_legacy_stream", cu.cuMemcpyBatchAsync([other], [dptr], [4], 1, [attrs], [0], 1, cu.CUstream(0)))
    rc("c3d_free", cu.cuMemFree(dptr))
    rc("batch_free", cu.cuMemFree(other))
    return stream


def managed(dev, stream):
    """Range attributes and stream attachment of managed memory."""
    mptr = rc("managed_alloc", cu.cuMemAllocManaged(1 << 16, cu.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL))
    value = rc("range_read_mostly", cu.cuMemRangeGetAttribute(4, cu.CUmem_range_attribute.CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, mptr, 1 << 16))
    show("range_read_mostly.value", int(value))
    rc("attach", cu.cuStreamAttachMemAsync(stream, mptr, 0, cu.CUmemAttach_flags.CU_MEM_ATTACH_SINGLE))
    rc("attach_bad_flags", cu.cuStreamAttachMemAsync(stream, mptr, 0, 3))
    plain = rc("plain_alloc", cu.cuMemAlloc(1 << 16))
    rc("attach_not_managed", cu.cuStreamAttachMemAsync(stream, plain, 0, cu.CUmemAttach_flags.CU_MEM_ATTACH_SINGLE))
    rc("managed_free", cu.cuMemFree(mptr))
    rc("plain_free", cu.cuMemFree(plain))


def graphs(ctx, stream):
    """Edges, typed nodes that run at launch, cloning, capture into a graph."""
    graph = rc("graph_create", cu.cuGraphCreate(0))
    a = rc("node_a", cu.cuGraphAddEmptyNode(graph, None, 0))
    b = rc("node_b", cu.cuGraphAddEmptyNode(graph, [a], 1))
    c = rc("node_c", cu.cuGraphAddEmptyNode(graph, None, 0))
    rc("add_deps", cu.cuGraphAddDependencies(graph, [b], [c], None, 1))
    rc("add_deps_again", cu.cuGraphAddDependencies(graph, [b], [c], None, 1))
    frm, to, _, n = rc("edges", cu.cuGraphGetEdges(graph, 4))
    names = {int(a): "a", int(b): "b", int(c): "c"}
    show("edges.list", ",".join(f"{names[int(f)]}>{names[int(t)]}" for f, t in list(zip(frm, to))[:n]))
    deps, _, n = rc("deps_of_c", cu.cuGraphNodeGetDependencies(c, 4))
    show("deps_of_c.list", ",".join(names[int(x)] for x in deps[:n]))
    dependents, _, n = rc("dependents_of_a", cu.cuGraphNodeGetDependentNodes(a, 4))
    show("dependents_of_a.list", ",".join(names[int(x)] for x in dependents[:n]))
    rc("remove_deps", cu.cuGraphRemoveDependencies(graph, [b], [c], None, 1))
    roots, n = rc("roots", cu.cuGraphGetRootNodes(graph, 4))
    show("roots.list", ",".join(sorted(names[int(x)] for x in roots[:n])))
    rc("remove_missing", cu.cuGraphRemoveDependencies(graph, [b], [c], None, 1))

    # A memset node then a memcpy node after it; they run at launch.
    src = rc("g_src", cu.cuMemAlloc(64))
    dst = rc("g_dst", cu.cuMemAlloc(64))
    rc("g_zero", cu.cuMemsetD8(dst, 0, 64))
    ms = cu.CUDA_MEMSET_NODE_PARAMS()
    ms.dst = src
    ms.value = 0x5A
    ms.elementSize = 1
    ms.width = 64
    ms.height = 1
    memset_node = rc("memset_node", cu.cuGraphAddMemsetNode(graph, [c], 1, ms, ctx))
    cp = cu.CUDA_MEMCPY3D()
    cp.srcMemoryType = cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
    cp.srcDevice = src
    cp.srcPitch = 64
    cp.dstMemoryType = cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
    cp.dstDevice = dst
    cp.dstPitch = 64
    cp.WidthInBytes = 32
    cp.Height = 1
    cp.Depth = 1
    memcpy_node = rc("memcpy_node", cu.cuGraphAddMemcpyNode(graph, [memset_node], 1, cp, ctx))
    kind = rc("memcpy_node_type", cu.cuGraphNodeGetType(memcpy_node))
    show("memcpy_node_type.value", int(kind))
    show("dst_before_launch", read(dst, 64).count(0x5A))
    exec_ = rc("instantiate", cu.cuGraphInstantiate(graph, 0))
    rc("launch", cu.cuGraphLaunch(exec_, stream))
    rc("launch_sync", cu.cuStreamSynchronize(stream))
    got = read(dst, 64)
    show("graph_copy.bytes", got.count(0x5A))

    # Nodes run in an order their edges allow, not the order they were
    # added in: a copy added first, made to depend on a fill added after.
    ordered = rc("order_graph", cu.cuGraphCreate(0))
    rc("order_zero", cu.cuMemsetD8(dst, 0, 64))
    rc("order_src_zero", cu.cuMemsetD8(src, 0, 64))
    copy_first = rc("order_copy", cu.cuGraphAddMemcpyNode(ordered, None, 0, cp, ctx))
    ms.value = 0x77
    fill_after = rc("order_fill", cu.cuGraphAddMemsetNode(ordered, None, 0, ms, ctx))
    rc("order_edge", cu.cuGraphAddDependencies(ordered, [fill_after], [copy_first], None, 1))
    order_exec = rc("order_instantiate", cu.cuGraphInstantiate(ordered, 0))
    rc("order_launch", cu.cuGraphLaunch(order_exec, stream))
    rc("order_sync", cu.cuStreamSynchronize(stream))
    show("order.bytes", read(dst, 64).count(0x77))
    rc("_order_exec_destroy", cu.cuGraphExecDestroy(order_exec))
    rc("_order_destroy", cu.cuGraphDestroy(ordered))
    ms.value = 0x5A

    # The generic form: a memset node described by CUgraphNodeParams; a
    # memory-allocation node, which graphs here do not hold.
    generic = cu.CUgraphNodeParams()
    generic.type = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_MEMSET
    generic.memset.dst = src
    generic.memset.value = 1
    generic.memset.elementSize = 4
    generic.memset.width = 4
    generic.memset.height = 1
    generic.memset.ctx = ctx
    node = rc("generic_memset", cu.cuGraphAddNode(graph, None, None, 0, generic))
    show("generic_memset.type", int(rc("_generic_type", cu.cuGraphNodeGetType(node))))
    alloc = cu.CUgraphNodeParams()
    alloc.type = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_MEM_ALLOC
    rc("generic_mem_alloc", cu.cuGraphAddNode(graph, None, None, 0, alloc))
    back = rc("generic_get_params", cu.cuGraphNodeGetParams(node))
    show("generic_get_params.type", int(back.type))
    show("generic_get_params.width", int(back.memset.width))
    owner = rc("containing_graph", cu.cuGraphNodeGetContainingGraph(node))
    show("containing_graph.same", int(int(owner) == int(graph)))
    first_id = rc("graph_id", cu.cuGraphGetId(graph))
    other = rc("_other_graph", cu.cuGraphCreate(0))
    second_id = rc("_other_id", cu.cuGraphGetId(other))
    show("graph_id.distinct", int(int(first_id) != int(second_id)))
    rc("_other_destroy", cu.cuGraphDestroy(other))
    rc("_generic_destroy", cu.cuGraphDestroyNode(node))

    clone = rc("clone", cu.cuGraphClone(graph))
    found = rc("find_in_clone", cu.cuGraphNodeFindInClone(memcpy_node, clone))
    kind = rc("clone_node_type", cu.cuGraphNodeGetType(found))
    show("clone_node_type.value", int(kind))
    _, _, _, n = rc("clone_edges", cu.cuGraphGetEdges(clone, 8))
    show("clone_edges.count", n)

    rc("disable", cu.cuGraphNodeSetEnabled(exec_, memset_node, 0))
    enabled = rc("get_enabled", cu.cuGraphNodeGetEnabled(exec_, memset_node))
    show("get_enabled.value", int(enabled))
    rc("destroy_node", cu.cuGraphDestroyNode(a))
    n = rc("nodes_after_destroy", cu.cuGraphGetNodes(graph, 0))[1]
    show("nodes_after_destroy.count", n)

    # Capture into the graph after the memcpy node.
    cap = rc("capture_stream", cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
    rc("capture_to_graph", cu.cuStreamBeginCaptureToGraph(cap, graph, [memcpy_node], None, 1,
                                                          cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
    rc("update_capture_deps", cu.cuStreamUpdateCaptureDependencies(cap, [memcpy_node], None, 1, 0))
    ended = rc("end_capture", cu.cuStreamEndCapture(cap))
    show("end_capture.same_graph", int(int(ended) == int(graph)))
    rc("update_capture_deps_not_capturing", cu.cuStreamUpdateCaptureDependencies(cap, [memcpy_node], None, 1, 0))

    # A graph with a memset node, instantiated, then updated from a graph
    # of the same shape that sets another value; and the same memset as a
    # child graph of a third graph.
    def memset_graph(value):
        g = rc("_upd_graph", cu.cuGraphCreate(0))
        p = cu.CUDA_MEMSET_NODE_PARAMS()
        p.dst = dst
        p.value = value
        p.elementSize = 4
        p.width = 16
        p.height = 1
        rc("_upd_node", cu.cuGraphAddMemsetNode(g, None, 0, p, ctx))
        return g

    first, second = memset_graph(0x11111111), memset_graph(0x22222222)
    upd_exec = rc("upd_instantiate", cu.cuGraphInstantiate(first, 0))
    info = rc("exec_update", cu.cuGraphExecUpdate(upd_exec, second))
    show("exec_update.result", int(info.result))
    rc("upd_launch", cu.cuGraphLaunch(upd_exec, stream))
    rc("upd_sync", cu.cuStreamSynchronize(stream))
    show("exec_update.bytes", read(dst, 64).count(0x22))
    parent = rc("child_parent", cu.cuGraphCreate(0))
    rc("child_node", cu.cuGraphAddChildGraphNode(parent, None, 0, first))
    child_exec = rc("child_instantiate", cu.cuGraphInstantiate(parent, 0))
    rc("child_launch", cu.cuGraphLaunch(child_exec, stream))
    rc("child_sync", cu.cuStreamSynchronize(stream))
    show("child_graph.bytes", read(dst, 64).count(0x11))
    taller = memset_graph(0x33333333)
    rc("_taller_extra", cu.cuGraphAddEmptyNode(taller, None, 0))
    rc("exec_update_topology", cu.cuGraphExecUpdate(upd_exec, taller))
    for g in (first, second, parent, taller):
        rc("_upd_destroy", cu.cuGraphDestroy(g))
    rc("_upd_exec_destroy", cu.cuGraphExecDestroy(upd_exec))
    rc("_child_exec_destroy", cu.cuGraphExecDestroy(child_exec))

    rc("exec_destroy", cu.cuGraphExecDestroy(exec_))
    rc("clone_destroy", cu.cuGraphDestroy(clone))
    rc("graph_destroy", cu.cuGraphDestroy(graph))
    rc("g_free_src", cu.cuMemFree(src))
    rc("g_free_dst", cu.cuMemFree(dst))


def objects_and_devices(dev):
    """Texture objects keep their description; devices by PCI bus id."""
    buf = rc("tex_alloc", cu.cuMemAlloc(4096))
    res = cu.CUDA_RESOURCE_DESC()
    res.resType = cu.CUresourcetype.CU_RESOURCE_TYPE_LINEAR
    res.res.linear.devPtr = buf
    res.res.linear.format = cu.CUarray_format.CU_AD_FORMAT_FLOAT
    res.res.linear.numChannels = 1
    res.res.linear.sizeInBytes = 4096
    tex = cu.CUDA_TEXTURE_DESC()
    obj = rc("tex_create", cu.cuTexObjectCreate(res, tex, None))
    back = rc("tex_resource", cu.cuTexObjectGetResourceDesc(obj))
    show("tex_resource.size", int(back.res.linear.sizeInBytes))
    rc("tex_destroy", cu.cuTexObjectDestroy(obj))
    rc("tex_destroy_again", cu.cuTexObjectDestroy(obj))
    rc("tex_free", cu.cuMemFree(buf))

    ops = [cu.CUatomicOperation.CU_ATOMIC_OPERATION_INTEGER_ADD, cu.CUatomicOperation.CU_ATOMIC_OPERATION_CAS]
    caps = rc("host_atomics", cu.cuDeviceGetHostAtomicCapabilities(ops, 2, dev))
    show("host_atomics.caps", ",".join(str(int(c)) for c in caps))
    rc("host_atomics_none", cu.cuDeviceGetHostAtomicCapabilities(ops, 0, dev))

    pool = rc("default_pool", cu.cuDeviceGetDefaultMemPool(dev))
    rc("pool_export_no_handle_type", cu.cuMemPoolExportToShareableHandle(
        pool, cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))

    ctx = rc("ctx_current", cu.cuCtxGetCurrent())
    event = rc("ctx_event", cu.cuEventCreate(0))
    rc("ctx_record_event", cu.cuCtxRecordEvent(ctx, event))
    rc("ctx_wait_event", cu.cuCtxWaitEvent(ctx, event))
    rc("ctx_event_query", cu.cuEventQuery(event))

    bus_id = rc("bus_id", cu.cuDeviceGetPCIBusId(32, dev))
    bus_id = bytes(bus_id).split(b"\x00")[0]
    found = rc("by_bus_id", cu.cuDeviceGetByPCIBusId(bus_id))
    show("by_bus_id.same", int(int(found) == int(dev)))
    rc("by_bus_id_unknown", cu.cuDeviceGetByPCIBusId(b"0000:ff:1f.7"))


def main():
    rc("init", cu.cuInit(0))
    dev = rc("device", cu.cuDeviceGet(0))
    ctx = rc("retain", cu.cuDevicePrimaryCtxRetain(dev))
    rc("set_current", cu.cuCtxSetCurrent(ctx))
    absent_features(dev, ctx)
    stream = copies_and_fills()
    managed(dev, stream)
    graphs(ctx, stream)
    objects_and_devices(dev)
    print("done=1")


main()

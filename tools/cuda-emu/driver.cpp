// A CUDA driver and NVRTC that run on the CPU, for testing plumb's CUDA backend on a machine with
// no GPU: built as one shared library that `run.sh` puts on LD_LIBRARY_PATH as libcuda.so and
// libnvrtc.so, where cudarc loads them by name. One device ("CPU emulation", compute capability
// 9.0 by default); device memory is host memory; every call on a stream runs when it is made
// (one in-order queue), except under stream capture, where launches, copies and sets are
// recorded into a graph and replayed by cuGraphLaunch. NVRTC's "CUBIN" is a shared object that
// translate.py builds with g++; cuModuleLoadData loads it. See prelude.h for the device side.
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tensor_map.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
enum {
    OK = 0,
    INVALID_VALUE = 1,
    OUT_OF_MEMORY = 2,
    INVALID_DEVICE = 101,
    INVALID_IMAGE = 200,
    INVALID_HANDLE = 400,
    NOT_FOUND = 500,
    LAUNCH_FAILED = 719,
    NOT_SUPPORTED = 801,
    CAPTURE_UNSUPPORTED = 900,
};

namespace {

struct EmuKernel {
    const char* name;
    void* fn;
    void (*call)(void*, void**);
    int num_params;
    const unsigned* sizes;
};
typedef const EmuKernel* (*KernelsFn)(int*);
typedef const char* (*LaunchFn)(const EmuKernel*, const unsigned*, const unsigned*, unsigned, void**, unsigned,
                                unsigned long long, unsigned);

// A module's kernels share its statics (the `__shared__` variables, the scheduler): one launch
// at a time runs in it. Each load of a module is a copy of its own, so backends on different
// threads (parallel tests) run their launches side by side.
struct Module {
    void* lib;
    std::map<std::string, const EmuKernel*> kernels;
    LaunchFn launch;
    std::mutex running;
};

struct Function {
    Module* module;
    const EmuKernel* kernel;
    int max_dynamic_smem = 48 * 1024;
};

struct Node {
    enum Kind { KERNEL, COPY, SET8, SET32 } kind;
    Function* f = nullptr;
    unsigned grid[3] = {}, block[3] = {}, smem = 0, cluster = 1;
    std::vector<std::vector<unsigned char>> args;
    unsigned long long grid_id = 0;  // given at instantiation
    void* dst = nullptr;
    const void* src = nullptr;
    size_t n = 0;
    unsigned value = 0;
};

struct Graph {
    std::vector<Node> nodes;
};

struct Stream {
    Graph* capturing = nullptr;
};

struct Event {
    double at_ms = 0;
};

std::mutex lock;  // the allocation count
int ctx_token;  // the one context's handle points here
Stream default_stream;
size_t allocated;

unsigned order() {
    const char* o = getenv("PLUMB_CUDA_EMU_ORDER");
    if (!o) return 0;
    return (strstr(o, "blocks-reversed") ? 1u : 0u) | (strstr(o, "threads-reversed") ? 2u : 0u);
}

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int env_int(const char* name, int fallback) {
    const char* v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

Stream* stream_of(void* s) {
    return s ? (Stream*)s : &default_stream;
}

// %gridid: each launch a new number, except that a graph's kernel node keeps the one it was
// given when the graph was instantiated, on every replay (as a GPU does).
std::atomic<unsigned long long> grid_ids{0};

CUresult run(Function* f, const unsigned grid[3], const unsigned block[3], unsigned smem, unsigned cluster,
             void** params, unsigned long long grid_id = 0) {
    if ((int)smem > f->max_dynamic_smem) {
        fprintf(stderr, "cuda-emu: %s asks for %u bytes of dynamic shared memory, %d allowed\n", f->kernel->name, smem,
                f->max_dynamic_smem);
        return INVALID_VALUE;
    }
    std::lock_guard<std::mutex> g(f->module->running);
    const char* err = f->module->launch(f->kernel, grid, block, smem, params, order(), grid_id ? grid_id : ++grid_ids, cluster);
    if (err) {
        fprintf(stderr, "cuda-emu: %s (grid %u,%u,%u, block %u,%u,%u): %s\n", f->kernel->name, grid[0], grid[1],
                grid[2], block[0], block[1], block[2], err);
        return LAUNCH_FAILED;
    }
    return OK;
}

CUresult launch(Function* f, const unsigned grid[3], const unsigned block[3], unsigned smem, unsigned cluster,
                void* stream, void** params) {
    if (!f || !params) return INVALID_VALUE;
    Stream* s = stream_of(stream);
    if (s->capturing) {
        Node node{Node::KERNEL};
        node.f = f;
        memcpy(node.grid, grid, sizeof node.grid);
        memcpy(node.block, block, sizeof node.block);
        node.smem = smem;
        node.cluster = cluster;
        for (int i = 0; i < f->kernel->num_params; i++) {
            const unsigned char* p = (const unsigned char*)params[i];
            node.args.emplace_back(p, p + f->kernel->sizes[i]);
        }
        s->capturing->nodes.push_back(std::move(node));
        return OK;
    }
    return run(f, grid, block, smem, cluster, params);
}

CUresult copy(void* dst, const void* src, size_t n, void* stream) {
    Stream* s = stream_of(stream);
    if (s->capturing) {
        Node node{Node::COPY};
        node.dst = dst;
        node.src = src;
        node.n = n;
        s->capturing->nodes.push_back(std::move(node));
        return OK;
    }
    memmove(dst, src, n);
    return OK;
}

CUresult set(void* dst, unsigned value, size_t n, bool word, void* stream) {
    Stream* s = stream_of(stream);
    if (s->capturing) {
        Node node{word ? Node::SET32 : Node::SET8};
        node.dst = dst;
        node.value = value;
        node.n = n;
        s->capturing->nodes.push_back(std::move(node));
        return OK;
    }
    if (word)
        for (size_t i = 0; i < n; i++) ((unsigned*)dst)[i] = value;
    else
        memset(dst, (int)value, n);
    return OK;
}

// NVRTC's program: the source, then the built module's bytes and the compiler's messages.
struct Program {
    std::string source, image, log;
};

std::string emu_dir() {
    if (const char* d = getenv("PLUMB_CUDA_EMU_DIR")) return d;
    Dl_info info;
    if (dladdr((void*)&emu_dir, &info) && info.dli_fname) {
        std::string p = info.dli_fname;
        return p.substr(0, p.rfind('/'));
    }
    return ".";
}

bool read_file(const std::string& path, std::string* out) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) return false;
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out->append(buf, n);
    fclose(f);
    return true;
}

}  // namespace

extern "C" {

// ---- initialization, devices, contexts ----
CUresult cuInit(unsigned) { return OK; }
CUresult cuDriverGetVersion(int* v) {
    *v = 13000;
    return OK;
}
CUresult cuDeviceGetCount(int* n) {
    *n = 1;
    return OK;
}
CUresult cuDeviceGet(CUdevice* d, int ordinal) {
    if (ordinal != 0) return INVALID_DEVICE;
    *d = 0;
    return OK;
}
CUresult cuDeviceGetName(char* name, int len, CUdevice) {
    snprintf(name, len, "CPU emulation (tools/cuda-emu) of sm_%d%d", env_int("PLUMB_CUDA_EMU_CC_MAJOR", 9),
             env_int("PLUMB_CUDA_EMU_CC_MINOR", 0));
    return OK;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
    *bytes = (size_t)env_int("PLUMB_CUDA_EMU_MEM_GB", 8) << 30;
    return OK;
}
CUresult cuDeviceGetAttribute(int* v, int attr, CUdevice) {
    switch (attr) {
        case 1: case 2: case 3: *v = 1024; break;               // threads per block, block x, y
        case 4: *v = 64; break;                                // block z
        case 5: *v = 0x7fffffff; break;                        // grid x
        case 6: case 7: *v = 65535; break;                     // grid y, z
        case 8: *v = 48 * 1024; break;                         // shared memory per block
        case 10: *v = 32; break;                               // warp size
        case 12: case 82: *v = 65536; break;                   // registers per block, per SM
        case 13: *v = 1980000; break;                          // clock (kHz)
        case 16: *v = env_int("PLUMB_CUDA_EMU_SMS", 132); break;
        case 36: *v = 3201000; break;                          // memory clock (kHz)
        case 37: *v = 6144; break;                             // bus width (bits)
        case 38: *v = 50 * 1024 * 1024; break;                 // L2
        case 39: *v = 2048; break;                             // threads per SM
        case 41: *v = 1; break;                                // unified addressing
        case 75: *v = env_int("PLUMB_CUDA_EMU_CC_MAJOR", 9); break;
        case 76: *v = env_int("PLUMB_CUDA_EMU_CC_MINOR", 0); break;
        case 81: *v = 233472; break;                           // shared memory per SM
        case 97: *v = 232448; break;                           // shared memory per block, opt-in
        case 106: *v = 32; break;                              // blocks per SM
        case 120: *v = 1; break;                               // cluster launch
        default: *v = 0;
    }
    return OK;
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, CUdevice) {
    *ctx = &ctx_token;
    return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return OK; }
CUresult cuDevicePrimaryCtxRelease(CUdevice) { return OK; }
CUresult cuCtxSetCurrent(void*) { return OK; }
CUresult cuCtxGetCurrent(void** ctx) {
    *ctx = &ctx_token;
    return OK;
}
CUresult cuCtxPushCurrent_v2(void*) { return OK; }
CUresult cuCtxPopCurrent_v2(void** ctx) {
    if (ctx) *ctx = &ctx_token;
    return OK;
}
CUresult cuCtxGetDevice(CUdevice* d) {
    *d = 0;
    return OK;
}
CUresult cuCtxSynchronize() { return OK; }
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
    const size_t all = (size_t)env_int("PLUMB_CUDA_EMU_MEM_GB", 8) << 30;
    *total = all;
    *free_bytes = all > allocated ? all - allocated : 0;
    return OK;
}
CUresult cuGetErrorName(CUresult e, const char** s) {
    static thread_local char buf[64];
    snprintf(buf, sizeof buf, "CUDA_ERROR_%d (cuda-emu)", e);
    *s = buf;
    return OK;
}
CUresult cuGetErrorString(CUresult e, const char** s) { return cuGetErrorName(e, s); }

// ---- memory ----
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
    void* m = aligned_alloc(256, (n + 255) / 256 * 256 + 256);
    if (!m) return OUT_OF_MEMORY;
    // Device memory starts as garbage: NaN bytes, so a kernel reading what nothing wrote shows it.
    if (n <= ((size_t)256 << 20)) memset(m, 0xff, n);
    std::lock_guard<std::mutex> g(lock);
    allocated += n;
    *p = (CUdeviceptr)m;
    return OK;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
    free((void*)p);
    return OK;
}
CUresult cuMemAllocAsync(CUdeviceptr* p, size_t n, void*) { return cuMemAlloc_v2(p, n); }
CUresult cuMemFreeAsync(CUdeviceptr p, void*) { return cuMemFree_v2(p); }
CUresult cuMemAllocHost_v2(void** p, size_t n) {
    *p = malloc(n ? n : 1);
    return *p ? OK : OUT_OF_MEMORY;
}
CUresult cuMemHostAlloc(void** p, size_t n, unsigned) { return cuMemAllocHost_v2(p, n); }
CUresult cuMemFreeHost(void* p) {
    free(p);
    return OK;
}
CUresult cuMemHostRegister_v2(void*, size_t, unsigned) { return OK; }
CUresult cuMemHostUnregister(void*) { return OK; }
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* d, void* p, unsigned) {
    *d = (CUdeviceptr)p;
    return OK;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void* s, size_t n) { return copy((void*)d, s, n, nullptr); }
CUresult cuMemcpyDtoH_v2(void* d, CUdeviceptr s, size_t n) { return copy(d, (const void*)s, n, nullptr); }
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy((void*)d, (const void*)s, n, nullptr); }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* s, size_t n, void* st) { return copy((void*)d, s, n, st); }
CUresult cuMemcpyDtoHAsync_v2(void* d, CUdeviceptr s, size_t n, void* st) { return copy(d, (const void*)s, n, st); }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void* st) {
    return copy((void*)d, (const void*)s, n, st);
}
CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy((void*)d, (const void*)s, n, nullptr); }
CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, void* st) { return copy((void*)d, (const void*)s, n, st); }
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return set((void*)d, v, n, false, nullptr); }
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void* st) { return set((void*)d, v, n, false, st); }
CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned v, size_t n) { return set((void*)d, v, n, true, nullptr); }
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, void* st) { return set((void*)d, v, n, true, st); }
CUresult cuPointerGetAttribute(void* out, int attr, CUdeviceptr p) {
    if (attr == 1) {  // context
        *(void**)out = &ctx_token;
        return OK;
    }
    if (attr == 2) {  // memory type: device
        *(unsigned*)out = 2;
        return OK;
    }
    return NOT_SUPPORTED;
}

// ---- streams and events ----
CUresult cuStreamCreate(void** s, unsigned) {
    *s = new Stream;
    return OK;
}
CUresult cuStreamCreateWithPriority(void** s, unsigned, int) { return cuStreamCreate(s, 0); }
CUresult cuStreamDestroy_v2(void* s) {
    delete (Stream*)s;
    return OK;
}
CUresult cuStreamSynchronize(void*) { return OK; }
CUresult cuStreamQuery(void*) { return OK; }
CUresult cuStreamWaitEvent(void*, void*, unsigned) { return OK; }
CUresult cuStreamBeginCapture_v2(void* s, int) {
    Stream* st = stream_of(s);
    if (st->capturing) return INVALID_VALUE;
    st->capturing = new Graph;
    return OK;
}
CUresult cuStreamEndCapture(void* s, void** graph) {
    Stream* st = stream_of(s);
    if (!st->capturing) return INVALID_VALUE;
    *graph = st->capturing;
    st->capturing = nullptr;
    return OK;
}
CUresult cuStreamIsCapturing(void* s, int* status) {
    *status = stream_of(s)->capturing ? 1 : 0;
    return OK;
}
CUresult cuEventCreate(void** e, unsigned) {
    *e = new Event;
    return OK;
}
CUresult cuEventDestroy_v2(void* e) {
    delete (Event*)e;
    return OK;
}
CUresult cuEventRecord(void* e, void* s) {
    if (stream_of(s)->capturing) return CAPTURE_UNSUPPORTED;
    ((Event*)e)->at_ms = now_ms();
    return OK;
}
CUresult cuEventRecordWithFlags(void* e, void* s, unsigned) { return cuEventRecord(e, s); }
CUresult cuEventSynchronize(void*) { return OK; }
CUresult cuEventQuery(void*) { return OK; }
CUresult cuEventElapsedTime(float* ms, void* a, void* b) {
    *ms = (float)(((Event*)b)->at_ms - ((Event*)a)->at_ms);
    return OK;
}
CUresult cuEventElapsedTime_v2(float* ms, void* a, void* b) { return cuEventElapsedTime(ms, a, b); }

// ---- graphs ----
CUresult cuGraphInstantiateWithFlags(void** exec, void* graph, unsigned long long) {
    Graph* g = new Graph(*(Graph*)graph);
    for (Node& n : g->nodes)
        if (n.kind == Node::KERNEL) n.grid_id = ++grid_ids;
    *exec = g;
    return OK;
}
CUresult cuGraphLaunch(void* exec, void* stream) {
    if (stream_of(stream)->capturing) return CAPTURE_UNSUPPORTED;
    for (Node& n : ((Graph*)exec)->nodes) {
        CUresult r = OK;
        if (n.kind == Node::KERNEL) {
            std::vector<void*> params;
            for (auto& a : n.args) params.push_back(a.data());
            r = run(n.f, n.grid, n.block, n.smem, n.cluster, params.data(), n.grid_id);
        } else if (n.kind == Node::COPY) {
            r = copy(n.dst, n.src, n.n, nullptr);
        } else {
            r = set(n.dst, n.value, n.n, n.kind == Node::SET32, nullptr);
        }
        if (r != OK) return r;
    }
    return OK;
}
CUresult cuGraphUpload(void*, void*) { return OK; }
CUresult cuGraphExecDestroy(void* exec) {
    delete (Graph*)exec;
    return OK;
}
CUresult cuGraphDestroy(void* graph) {
    delete (Graph*)graph;
    return OK;
}

// ---- modules, functions, launches ----
CUresult cuModuleLoadData(void** module, const void* image) {
    const unsigned char* p = (const unsigned char*)image;
    // An ELF shared object for x86-64 (e_machine 62) is what translate.py builds; a GPU's CUBIN
    // is ELF too, for machine 190, and is refused here.
    if (memcmp(p, "\x7f" "ELF", 4) != 0 || p[18] != 62) {
        fprintf(stderr, "cuda-emu: the module is not one the emulator built (a GPU's CUBIN?)\n");
        return INVALID_IMAGE;
    }
    // The image's size: the ELF header's section table ends it.
    const uint64_t shoff = *(const uint64_t*)(p + 0x28);
    const uint16_t shentsize = *(const uint16_t*)(p + 0x3a), shnum = *(const uint16_t*)(p + 0x3c);
    const size_t size = shoff + (size_t)shentsize * shnum;
    char path[] = "/tmp/cuda-emu-module-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return INVALID_IMAGE;
    const bool written = write(fd, p, size) == (ssize_t)size;
    close(fd);
    void* lib = written ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (!getenv("PLUMB_CUDA_EMU_KEEP_MODULES")) unlink(path);  // kept: perf can name the kernels
    if (!lib) {
        fprintf(stderr, "cuda-emu: loading the module: %s\n", dlerror());
        return INVALID_IMAGE;
    }
    auto kernels = (KernelsFn)dlsym(lib, "emu_kernels");
    auto launch_fn = (LaunchFn)dlsym(lib, "emu_launch");
    if (!kernels || !launch_fn) return INVALID_IMAGE;
    Module* m = new Module{lib, {}, launch_fn, {}};
    int n = 0;
    const EmuKernel* k = kernels(&n);
    for (int i = 0; i < n; i++) m->kernels[k[i].name] = &k[i];
    *module = m;
    return OK;
}
CUresult cuModuleUnload(void* module) {
    Module* m = (Module*)module;
    dlclose(m->lib);
    delete m;
    return OK;
}
CUresult cuModuleGetFunction(void** f, void* module, const char* name) {
    Module* m = (Module*)module;
    auto it = m->kernels.find(name);
    if (it == m->kernels.end()) return NOT_FOUND;
    *f = new Function{m, it->second};
    return OK;
}
// A module's `__device__` variable: its address and size in the loaded object (device memory is
// host memory here).
CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, void* module, const char* name) {
    Module* m = (Module*)module;
    void* at = dlsym(m->lib, name);
    if (!at) return NOT_FOUND;
    Dl_info info;
    const ElfW(Sym)* sym = nullptr;
    if (!dladdr1(at, &info, (void**)&sym, RTLD_DL_SYMENT) || !sym) return NOT_FOUND;
    if (dptr) *dptr = (CUdeviceptr)at;
    if (bytes) *bytes = sym->st_size;
    return OK;
}
CUresult cuFuncSetAttribute(void* f, int attr, int v) {
    if (attr == 8) ((Function*)f)->max_dynamic_smem = v;
    return OK;
}
CUresult cuFuncGetAttribute(int* v, int attr, void* f) {
    switch (attr) {
        case 0: *v = 1024; break;
        case 4: *v = 32; break;
        case 8: *v = ((Function*)f)->max_dynamic_smem; break;
        default: *v = 0;
    }
    return OK;
}
CUresult cuFuncSetCacheConfig(void*, int) { return OK; }
// What fits on one SM of the emulated device: threads, blocks and shared memory (1 KB reserved a block).
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, void*, int threads, size_t smem) {
    int by_threads = threads > 0 ? 2048 / threads : 32;
    int by_smem = (int)(233472 / (smem + 1024));
    *n = by_threads < by_smem ? by_threads : by_smem;
    if (*n > 32) *n = 32;
    return OK;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, void* f, int threads, size_t smem, unsigned) {
    return cuOccupancyMaxActiveBlocksPerMultiprocessor(n, f, threads, smem);
}
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, void* stream, void** params, void** extra) {
    if (extra) return NOT_SUPPORTED;
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    return launch((Function*)f, grid, block, smem, 1, stream, params);
}
struct LaunchConfig {
    unsigned grid[3], block[3], smem;
    void* stream;
    void* attrs;
    unsigned num_attrs;
};
// CUlaunchAttribute: its id, 4 bytes of padding, then a 64-byte value.
struct LaunchAttribute {
    unsigned id;
    char pad[4];
    unsigned value[16];
};
enum { LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4 };
CUresult cuLaunchKernelEx(const LaunchConfig* c, void* f, void** params, void** extra) {
    if (extra) return NOT_SUPPORTED;
    unsigned cluster = 1;
    const LaunchAttribute* attrs = (const LaunchAttribute*)c->attrs;
    for (unsigned i = 0; i < c->num_attrs; i++) {
        if (attrs[i].id != LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) continue;  // programmatic launch: nothing to do
        if (attrs[i].value[1] > 1 || attrs[i].value[2] > 1) return NOT_SUPPORTED;  // clusters along x only
        cluster = attrs[i].value[0] ? attrs[i].value[0] : 1;
    }
    return launch((Function*)f, c->grid, c->block, c->smem, cluster, c->stream, params);
}
// A tiled tensor map as the TMA copies of prelude.h read it (tensor_map.h), checked as the
// driver checks one: rank 1 to 5, a global address 16-byte aligned, strides multiples of 16
// below 2^40, boxes of 1 to 256 elements a dimension, a box's rows whole 16-byte chunks and, when
// swizzled, no wider than the swizzle's span. No interleave, zeros past the tensor, element
// strides of 1 only.
CUresult cuTensorMapEncodeTiled(void* map, int dtype, unsigned rank, void* address, const uint64_t* dims,
                                const uint64_t* strides, const unsigned* box, const unsigned* elem_strides,
                                int interleave, int swizzle, int, int oob_fill) {
    memset(map, 0, 128);
    const uint32_t es = emu::tensor_map_elem_bytes((uint32_t)dtype);
    if (!map || !es || rank < 1 || rank > 5 || !dims || !box || !elem_strides || (rank > 1 && !strides))
        return INVALID_VALUE;
    if (interleave != 0 || oob_fill != 0) return NOT_SUPPORTED;  // no interleave; zeros past the tensor
    if ((uintptr_t)address % 16 != 0 || swizzle < 0 || swizzle > 3) return INVALID_VALUE;
    for (unsigned d = 0; d < rank; d++) {
        if (dims[d] == 0 || dims[d] > (1ull << 32) || box[d] == 0 || box[d] > 256) return INVALID_VALUE;
        if (elem_strides[d] != 1) return NOT_SUPPORTED;
    }
    for (unsigned d = 0; d + 1 < rank; d++)
        if (strides[d] % 16 != 0 || strides[d] >= (1ull << 40)) return INVALID_VALUE;
    if ((box[0] * es) % 16 != 0) return INVALID_VALUE;
    if (swizzle && box[0] * es > (16u << swizzle)) return INVALID_VALUE;
    emu::TensorMap m{};
    m.magic = emu::TENSOR_MAP_MAGIC;
    m.dtype = (uint32_t)dtype;
    m.rank = rank;
    m.swizzle = (uint32_t)swizzle;
    m.elem_bytes = es;
    m.address = (uint64_t)(uintptr_t)address;
    for (unsigned d = 0; d < 5; d++) {
        m.dims[d] = d < rank ? dims[d] : 1;
        m.box[d] = d < rank ? box[d] : 1;
    }
    for (unsigned d = 0; d + 1 < rank; d++) m.strides[d] = strides[d];
    memcpy(map, &m, sizeof m);
    return OK;
}

// ---- NVRTC ----
int nvrtcVersion(int* major, int* minor) {
    // Not a real NVRTC's version, so a kernel cache never takes this module for a GPU's CUBIN.
    *major = 99;
    *minor = 0;
    return 0;
}
int nvrtcCreateProgram(void** prog, const char* src, const char*, int num_headers, const char* const*,
                       const char* const*) {
    if (num_headers) return 3;  // NVRTC_ERROR_INVALID_INPUT: plumb passes none
    *prog = new Program{src, "", ""};
    return 0;
}
int nvrtcDestroyProgram(void** prog) {
    delete (Program*)*prog;
    *prog = nullptr;
    return 0;
}
int nvrtcCompileProgram(void* prog, int n, const char* const* opts) {
    Program* p = (Program*)prog;
    char dir[] = "/tmp/cuda-emu-build-XXXXXX";
    if (!mkdtemp(dir)) return 6;  // NVRTC_ERROR_COMPILATION
    const std::string src = std::string(dir) + "/kernels.cu", out = std::string(dir) + "/module.so",
                      log = std::string(dir) + "/log";
    FILE* f = fopen(src.c_str(), "wb");
    fwrite(p->source.data(), 1, p->source.size(), f);
    fclose(f);
    std::string cmd = "python3 '" + emu_dir() + "/translate.py' '" + src + "' '" + out + "'";
    for (int i = 0; i < n; i++) cmd += std::string(" '") + opts[i] + "'";
    cmd += " >'" + log + "' 2>&1";
    const int rc = system(cmd.c_str());
    read_file(log, &p->log);
    const bool built = rc == 0 && read_file(out, &p->image);
    std::string rm = std::string("rm -rf '") + dir + "'";
    if (system(rm.c_str()) != 0) fprintf(stderr, "cuda-emu: could not remove %s\n", dir);
    return built ? 0 : 6;
}
int nvrtcGetCUBINSize(void* prog, size_t* n) {
    *n = ((Program*)prog)->image.size();
    return 0;
}
int nvrtcGetCUBIN(void* prog, char* out) {
    const std::string& im = ((Program*)prog)->image;
    memcpy(out, im.data(), im.size());
    return 0;
}
int nvrtcGetProgramLogSize(void* prog, size_t* n) {
    *n = ((Program*)prog)->log.size() + 1;
    return 0;
}
int nvrtcGetProgramLog(void* prog, char* out) {
    const std::string& l = ((Program*)prog)->log;
    memcpy(out, l.c_str(), l.size() + 1);
    return 0;
}
const char* nvrtcGetErrorString(int r) { return r ? "NVRTC error (cuda-emu)" : "NVRTC_SUCCESS"; }

}  // extern "C"

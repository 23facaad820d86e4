#include <dlfcn.h>
#include <stdio.h>
#include <chrono>
#include <vector>
struct EmuKernel { const char* name; void* fn; void (*call)(void*, void**); int num_params; const unsigned* sizes; };
typedef const EmuKernel* (*KernelsFn)(int*);
typedef const char* (*LaunchFn)(const EmuKernel*, const unsigned*, const unsigned*, unsigned, void**, unsigned);
int main(int argc, char** argv) {
  void* lib = dlopen(argv[1], RTLD_NOW); if (!lib) { printf("%s\n", dlerror()); return 1; }
  int n; const EmuKernel* k = ((KernelsFn)dlsym(lib, "emu_kernels"))(&n);
  LaunchFn launch = (LaunchFn)dlsym(lib, "emu_launch");
  std::vector<float> o(256 * 100);
  float* op = o.data(); int iters = 100;
  void* params[] = {&op, &iters};
  unsigned grid[3] = {100, 1, 1}, block[3] = {256, 1, 1};
  auto t0 = std::chrono::steady_clock::now();
  const char* e = launch(k, grid, block, 0, params, 0);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("err %s o[5]=%f: %.1f ns per thread-barrier\n", e ? e : "none", o[5], s * 1e9 / (100.0 * 256 * 100));
}

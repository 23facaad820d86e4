extern "C" __global__ void bar_loop(float* out, int n) { float a = threadIdx.x; for (int i = 0; i < n; i++) { a += 1; __syncthreads(); } out[blockIdx.x * blockDim.x + threadIdx.x] = a; }

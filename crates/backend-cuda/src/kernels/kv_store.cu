// Roundings shared by the kernels that write bf16 and the K/V cache's element types: the float ->
// bf16 rounding of the tensor-core inputs and the KV store's element types, their exact widenings
// back to f32, and their stores.

// float -> bf16 bits, round to nearest even (NaN stays a quiet NaN).
__device__ __forceinline__ u32 bf16_bits(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// The element types K and V are stored in (KvStore): values are rounded to them once, by
// write_kv (or the split `linear` that writes them: linear.cu), and read back exactly (widened to
// f32) by every row that attends to them.
#define KV_F32 0
#define KV_F16 1
#define KV_BF16 2

template <int ST> struct Kv;
template <> struct Kv<KV_F32> {
    static constexpr int BYTES = 4;
    __device__ static float4 load4(const u8* p) { return *(const float4*)p; }
    __device__ static float load1(const u8* p) { return *(const float*)p; }
    __device__ static void store(u8* p, float x) { *(float*)p = x; }
};
__device__ __forceinline__ float half_bits_f32(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
template <> struct Kv<KV_F16> {
    static constexpr int BYTES = 2;
    __device__ static float4 load4(const u8* p) {
        const uint2 u = *(const uint2*)p;
        return make_float4(half_bits_f32(u.x & 0xffffu), half_bits_f32(u.x >> 16), half_bits_f32(u.y & 0xffffu),
                           half_bits_f32(u.y >> 16));
    }
    __device__ static float load1(const u8* p) { return half_bits_f32(*(const unsigned short*)p); }
    __device__ static void store(u8* p, float x) {
        unsigned short h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
        *(unsigned short*)p = h;
    }
};
template <> struct Kv<KV_BF16> {
    static constexpr int BYTES = 2;
    __device__ static float4 load4(const u8* p) {
        const uint2 u = *(const uint2*)p;
        return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                           __uint_as_float(u.y & 0xffff0000u));
    }
    __device__ static float load1(const u8* p) { return __uint_as_float((u32)*(const unsigned short*)p << 16); }
    __device__ static void store(u8* p, float x) { *(unsigned short*)p = (unsigned short)bf16_bits(x); }
};

// A K or V element stored at p, rounded to the store `st` (KV_F32, KV_F16 or KV_BF16) as
// Kv<st>::store rounds it: for a kernel that takes the store as an argument.
__device__ __forceinline__ void kv_store_as(int st, u8* p, float x) {
    if (st == KV_F16)
        Kv<KV_F16>::store(p, x);
    else if (st == KV_BF16)
        Kv<KV_BF16>::store(p, x);
    else
        Kv<KV_F32>::store(p, x);
}
__device__ __forceinline__ int kv_bytes(int st) {
    return st == KV_F32 ? 4 : 2;
}

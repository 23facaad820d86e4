// What the emulated driver's cuTensorMapEncodeTiled writes into a CUtensorMap's 128 bytes and
// the emulated TMA copies read back (driver.cpp writes it, prelude.h's `tma_load` reads it).
// Ranks 1 to 5, tiled, without interleave.
#pragma once
#include <stdint.h>

namespace emu {

constexpr uint64_t TENSOR_MAP_MAGIC = 0x656d752d746d6170ull;  // "emu-tmap"

struct TensorMap {
    uint64_t magic;
    uint32_t dtype, rank, swizzle, elem_bytes;
    uint64_t address;
    uint64_t dims[5];     // elements, innermost first (1 past the rank)
    uint64_t strides[4];  // bytes between consecutive indices of dimensions 1.. (innermost: the element)
    uint32_t box[5];      // elements of a box, innermost first (1 past the rank)
};
static_assert(sizeof(TensorMap) <= 128, "a CUtensorMap is 128 bytes");

// CUtensorMapDataType's element sizes (UINT8 .. TFLOAT32_FTZ); 0: not a type the driver takes.
inline uint32_t tensor_map_elem_bytes(uint32_t dtype) {
    static const uint32_t bytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
    return dtype < sizeof bytes / sizeof bytes[0] ? bytes[dtype] : 0;
}

// The bytes a 16-byte chunk moves by under CUtensorMapSwizzle `swizzle` (0 none, 1 32B, 2 64B,
// 3 128B): the chunk index (address bits 4..) XORed with the 128-byte row index (bits 7..), as
// many bits as the span has chunks. Applied to shared-memory addresses, as the hardware does.
inline uint32_t swizzle_address(uint32_t a, uint32_t swizzle) {
    if (swizzle == 0) return a;
    const uint32_t chunks_mask = (1u << swizzle) - 1;  // 32B: 1 bit, 64B: 2, 128B: 3
    return a ^ (((a >> 7) & chunks_mask) << 4);
}

}  // namespace emu

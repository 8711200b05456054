// CRC-32C (Castagnoli), the checksum of checkpoint files. Uses the SSE4.2 instruction where the
// processor has it and a table otherwise; both give the same value.
#ifndef RINGMASTER_TRAINER_CHECKPOINT_CRC32C_H_
#define RINGMASTER_TRAINER_CHECKPOINT_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace ringmaster::trainer {

// Extends `crc` (0 for a fresh checksum) over n bytes.
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);

// The portable (table) implementation, exposed for the test that compares the two.
uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t n);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CHECKPOINT_CRC32C_H_

#include "transport/link.hpp"

#include "core/check.hpp"

namespace kizuna::transport {

void Link::check_message(const MessageTag& got, std::uint64_t got_bytes, const MessageTag& expected,
                         std::uint64_t expected_bytes) {
  if (got == expected && got_bytes == expected_bytes) return;
  if (got.seq == expected.seq && got.index == expected.index && got.call != expected.call) {
    mismatched_call_ = got.call;
    KIZUNA_THROW(ErrorCode::Mismatch, "rank ", peer_, " sent message #", got.index, " of collective #", got.seq,
                 " for another call (code 0x", std::hex, got.call, " where 0x", expected.call, " was expected)");
  }
  KIZUNA_THROW(ErrorCode::Mismatch, "rank ", peer_, " sent message #", got.index, " of collective #", got.seq, " (",
               got_bytes, " bytes) where message #", expected.index, " of collective #", expected.seq, " (",
               expected_bytes, " bytes) was expected: the ranks are not running the same collectives");
}

}  // namespace kizuna::transport

#include "trainer/comm/unique_id_exchange.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ringmaster::trainer {
namespace {

bool IsLowerHex(const std::string& s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

std::string UniqueIdKey(const std::string& prefix, const std::string& group) {
  return absl::StrCat(prefix, "/", group, "/unique_id");
}

absl::StatusOr<std::string> ExchangeUniqueId(
    KeyValueStore* store, const std::string& prefix, const std::string& group, int rank, int size,
    size_t id_bytes, const std::function<absl::StatusOr<std::string>()>& make,
    absl::Duration timeout) {
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not a member of group ", group, " of size ", size));
  }
  const std::string key = UniqueIdKey(prefix, group);
  if (rank == 0) {
    ASSIGN_OR_RETURN(std::string id, make());
    if (id.size() != id_bytes) {
      return absl::InternalError(
          absl::StrCat("a unique id of ", id.size(), " bytes, want ", id_bytes));
    }
    RETURN_IF_ERROR(
        Annotate(store->Set(key, absl::BytesToHexString(id)), absl::StrCat("publishing ", key)));
    return id;
  }
  absl::StatusOr<std::string> hex = store->Wait(key, timeout);
  if (!hex.ok()) return Annotate(hex.status(), absl::StrCat("waiting for rank 0's ", key));
  if (hex->size() != 2 * id_bytes || !IsLowerHex(*hex)) {
    return absl::DataLossError(absl::StrCat(
        key, " holds ", hex->size(), " characters that are not a hex id of ", id_bytes, " bytes"));
  }
  return absl::HexStringToBytes(*hex);
}

}  // namespace ringmaster::trainer

#include "ps_server/process_sets.h"

#include <algorithm>

namespace tfps {

bool InProcessSet(const std::vector<int32_t>& members, int rank) {
  return members.empty() || std::binary_search(members.begin(), members.end(), rank);
}

std::string DescribeProcessSet(const std::vector<int32_t>& members) {
  if (members.empty()) return "all workers";
  std::string text = "{";
  for (size_t i = 0; i < members.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(members[i]);
  }
  return text + "}";
}

Status CheckProcessSetPush(const Head& head, int num_workers, const std::string& where) {
  const Header& h = head.header;
  if ((h.flags & kFlagProcessSet) == 0) return Status::Ok();
  // DecodeHead checked that the ranks are >= 0 and strictly increasing.
  if (head.members.back() >= num_workers) {
    return InvalidArgument("worker " + std::to_string(h.sender) + " pushed for process set " +
                           DescribeProcessSet(head.members) + ", but rank " +
                           std::to_string(head.members.back()) + " is not a worker (there are " +
                           std::to_string(num_workers) + "; " + where + ")");
  }
  if (!InProcessSet(head.members, h.sender)) {
    return InvalidArgument("worker " + std::to_string(h.sender) + " pushed for process set " +
                           DescribeProcessSet(head.members) +
                           ", which it is not a member of (" + where + ")");
  }
  return Status::Ok();
}

}  // namespace tfps

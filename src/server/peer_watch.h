#pragma once
// Noticing that an HTTP client has gone away while its request waits (queued, or generating a
// non-streaming answer). cpp-httplib 0.11 (Debian 12) gives a handler no socket and only learns
// of a closed peer when a write fails, so a waiting request would keep its queue place or slot
// until it finished. PeerWatch finds the connection's socket among this process's descriptors
// by its address pair and peeks at it: a readable socket with no data means the peer closed it.
// Linux only (/proc/self/fd); on any failure it reports "open", never a false disconnect.
#include <chrono>
#include <string>

namespace mlxcel::server {

class PeerWatch {
 public:
  PeerWatch(std::string local_addr, int local_port, std::string remote_addr, int remote_port);
  // True once the peer has closed (or reset) the connection.
  bool closed();
  // closed(), but looks at most every 200 ms (cheap to call per event).
  bool closed_throttled();

 private:
  int find_fd() const;
  std::string local_addr_, remote_addr_;
  int local_port_, remote_port_;
  int fd_ = -1;
  bool searched_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace mlxcel::server

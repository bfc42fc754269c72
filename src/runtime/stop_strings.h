#pragma once
// Stop strings matched across token boundaries. Text arrives in pieces (detokenized deltas); the
// matcher releases only text that can no longer be the start of a stop string, so the caller
// never emits part of a stop sequence, and reports a match as soon as one completes. The stop
// string itself is not part of the output (OpenAI semantics).
#include <string>
#include <string_view>
#include <vector>

namespace mlxcel::runtime {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string emit;      // text safe to show now
    bool stopped = false;  // a stop string completed; nothing more will be emitted
    int which = -1;        // index of the stop string that matched
  };

  Result push(std::string_view piece);
  // End of generation without a stop: release what was held back.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace mlxcel::runtime

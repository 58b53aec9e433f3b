#include "common/clock.h"

namespace deepinfer {
namespace {
class RealClock final : public Clock {
 public:
  int64_t NowNanos() const override { return MonotonicNanos(); }
};
}  // namespace

Clock* Clock::Real() {
  static RealClock* clock = new RealClock();  // never destroyed: no static destructor order issue
  return clock;
}

}  // namespace deepinfer

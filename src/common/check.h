// Invariant checks. A failed CHECK is a bug in deepinfer, never bad user input (bad input gets
// an absl::Status): it prints file:line, the condition and an optional message, then aborts.
//
//   CHECK(ptr != nullptr) << "block " << id;
//   CHECK_EQ(a, b); CHECK_LT(i, n);
//   DCHECK(...)  - compiled out in NDEBUG builds (hot paths).
#ifndef DEEPINFER_COMMON_CHECK_H_
#define DEEPINFER_COMMON_CHECK_H_

#include <sstream>

namespace deepinfer::internal {

// Collects the streamed message and aborts in its destructor.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `CHECK(x) << msg` compile as a void expression in both branches of ?:.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace deepinfer::internal

#define CHECK(condition)                    \
  (__builtin_expect(!!(condition), 1))      \
      ? (void)0                             \
      : ::deepinfer::internal::Voidify() &  \
            ::deepinfer::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#define DEEPINFER_CHECK_OP_(a, op, b) CHECK((a)op(b)) << "(" << (a) << " vs " << (b) << ") "
#define CHECK_EQ(a, b) DEEPINFER_CHECK_OP_(a, ==, b)
#define CHECK_NE(a, b) DEEPINFER_CHECK_OP_(a, !=, b)
#define CHECK_LT(a, b) DEEPINFER_CHECK_OP_(a, <, b)
#define CHECK_LE(a, b) DEEPINFER_CHECK_OP_(a, <=, b)
#define CHECK_GT(a, b) DEEPINFER_CHECK_OP_(a, >, b)
#define CHECK_GE(a, b) DEEPINFER_CHECK_OP_(a, >=, b)

#ifdef NDEBUG
#define DCHECK(condition) \
  while (false) CHECK(condition)
#else
#define DCHECK(condition) CHECK(condition)
#endif
#define DCHECK_EQ(a, b) DCHECK((a) == (b))
#define DCHECK_LT(a, b) DCHECK((a) < (b))
#define DCHECK_LE(a, b) DCHECK((a) <= (b))

#endif  // DEEPINFER_COMMON_CHECK_H_

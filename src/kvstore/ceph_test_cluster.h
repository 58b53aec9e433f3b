// CephTestCluster (test- and bench-only header): drives scripts/ceph-test-cluster.sh, the
// throwaway single-machine Ceph cluster (1 mon, 1 mgr, 3 memstore OSDs, EC pool `kv` k=2 m=1).
// With $DEEPINFER_CEPH_CONF set, uses that running cluster instead (its pool `kv`, client
// `deepinfer`) and never starts, stops or damages daemons of it (OSD-loss tests skip).
// Not thread-safe; one object per process.
#ifndef DEEPINFER_KVSTORE_CEPH_TEST_CLUSTER_H_
#define DEEPINFER_KVSTORE_CEPH_TEST_CLUSTER_H_

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "kvstore/rados_config.h"

namespace deepinfer::kvstore::testing {

class CephTestCluster {
 public:
  // Starts a cluster under a fresh $TMPDIR directory (or adopts $DEEPINFER_CEPH_CONF).
  // ok() tells whether it is up; the script's output goes to stderr.
  CephTestCluster() {
    if (const char* conf = std::getenv("DEEPINFER_CEPH_CONF"); conf != nullptr && *conf) {
      conf_ = conf;
      ok_ = true;
      return;
    }
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/deepinfer-ceph-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) return;
    dir_ = tmpl;
    Stopwatch sw;
    // Stops the cluster if this process dies without running the destructor.
    setenv("CEPH_TEST_CLUSTER_OWNER_PID", std::to_string(getpid()).c_str(), 1);
    ok_ = Script("start", "") == 0;
    start_seconds_ = sw.ElapsedSeconds();
    conf_ = dir_ + "/ceph.conf";
  }
  ~CephTestCluster() {
    if (!dir_.empty()) Script("stop", "");
  }
  CephTestCluster(const CephTestCluster&) = delete;
  CephTestCluster& operator=(const CephTestCluster&) = delete;

  bool ok() const { return ok_; }
  // Whether this object started the cluster (and may stop or kill its daemons).
  bool owned() const { return !dir_.empty(); }
  double start_seconds() const { return start_seconds_; }
  const std::string& conf() const { return conf_; }
  const std::string& dir() const { return dir_; }

  // A store config for pool `kv` as client.deepinfer, in RADOS namespace `ns`.
  RadosStoreConfig Config(const std::string& ns, int64_t timeout_ms = 30000) const {
    RadosStoreConfig c;
    c.pool = "kv";
    c.conf_path = conf_;
    c.client_id = "deepinfer";
    c.name_space = ns;
    c.timeout_ms = timeout_ms;
    return c;
  }
  std::string Url(const std::string& ns = "") const {
    return absl::StrCat("rados://kv?conf=", conf_, "&id=deepinfer", ns.empty() ? "" : "&ns=", ns);
  }

  // scripts/ceph-test-cluster.sh CMD DIR [ARG]; the exit status.
  int Script(const std::string& cmd, const std::string& arg) const {
    const std::string line = absl::StrCat(DEEPINFER_SOURCE_DIR "/scripts/ceph-test-cluster.sh ",
                                          cmd, " ", dir_, arg.empty() ? "" : " ", arg, " >&2");
    const int rc = std::system(line.c_str());
    if (rc != 0) LOG(WARNING) << "'" << line << "' exited with " << rc;
    return rc;
  }
  // The `ceph` CLI against this cluster (admin); its exit status.
  int Ceph(const std::string& args) const {
    return std::system(absl::StrCat("timeout 60 ceph -c ", conf_, " ", args, " >&2").c_str());
  }

 private:
  std::string dir_;
  std::string conf_;
  bool ok_ = false;
  double start_seconds_ = 0;
};

}  // namespace deepinfer::kvstore::testing

#endif  // DEEPINFER_KVSTORE_CEPH_TEST_CLUSTER_H_

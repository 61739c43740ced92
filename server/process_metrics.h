// The process_* metrics that Prometheus client libraries conventionally export, read from Linux's
// /proc when scraped (prometheus-cpp has no process collector):
//   process_cpu_seconds_total       counter: user + system CPU time
//   process_resident_memory_bytes   gauge: resident set size
//   process_virtual_memory_bytes    gauge: virtual memory size
//   process_open_fds                gauge: open file descriptors
//   process_max_fds                 gauge: the descriptor limit (RLIMIT_NOFILE)
//   process_start_time_seconds      gauge: start time, seconds since the Unix epoch
// A metric whose source cannot be read (no /proc: not Linux) is left out.
//
// Thread-safety: CollectProcessMetrics may run on any thread at once.
#ifndef POSENC_SERVER_PROCESS_METRICS_H_
#define POSENC_SERVER_PROCESS_METRICS_H_

#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace posenc::server {

std::vector<prometheus::MetricFamily> CollectProcessMetrics();

// CollectProcessMetrics as a prometheus::Collectable, for an Exposer or a serializer.
class ProcessCollector final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override { return CollectProcessMetrics(); }
};

}  // namespace posenc::server

#endif  // POSENC_SERVER_PROCESS_METRICS_H_

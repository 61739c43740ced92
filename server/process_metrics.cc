#include "server/process_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>

#include "prometheus/client_metric.h"
#include "prometheus/metric_type.h"

namespace posenc::server {
namespace {

struct ProcStat {
  double cpu_seconds = 0;
  double start_seconds_after_boot = 0;
  double virtual_bytes = 0;
  double resident_bytes = 0;
};

// /proc/self/stat (proc(5)): the fields after the command name, which is in parentheses and may
// itself hold spaces and parentheses, so reading starts after the last ')'. Field 3 is the
// first after it; utime and stime are fields 14 and 15, starttime 22, vsize 23, rss 24.
std::optional<ProcStat> ReadProcStat() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(paren + 1));
  std::string field;
  std::array<double, 25> value{};
  for (int i = 3; i <= 24 && fields >> field; ++i) {
    value[static_cast<size_t>(i)] = std::strtod(field.c_str(), nullptr);
  }
  if (!fields) return std::nullopt;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  if (ticks <= 0 || page <= 0) return std::nullopt;
  return ProcStat{(value[14] + value[15]) / ticks, value[22] / ticks, value[23], value[24] * page};
}

// The boot time, seconds since the epoch ("btime" in /proc/stat).
std::optional<double> BootTime() {
  std::ifstream in("/proc/stat");
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime" && in >> value) return value;
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return std::nullopt;
}

std::optional<double> OpenFds() {
  std::error_code error;
  double count = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", error), end; !error && it != end;
       it.increment(error)) {
    ++count;
  }
  if (error) return std::nullopt;
  return count - 1;  // the iterator's own descriptor
}

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type,
                                double value) {
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return prometheus::MetricFamily{name, help, type, {metric}};
}

}  // namespace

std::vector<prometheus::MetricFamily> CollectProcessMetrics() {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  if (const std::optional<ProcStat> stat = ReadProcStat()) {
    out.push_back(Family("process_cpu_seconds_total", "Total user and system CPU time, seconds",
                         MetricType::Counter, stat->cpu_seconds));
    out.push_back(Family("process_resident_memory_bytes", "Resident memory size, bytes",
                         MetricType::Gauge, stat->resident_bytes));
    out.push_back(Family("process_virtual_memory_bytes", "Virtual memory size, bytes",
                         MetricType::Gauge, stat->virtual_bytes));
    if (const std::optional<double> boot = BootTime()) {
      out.push_back(Family("process_start_time_seconds",
                           "Start time of the process since the Unix epoch, seconds",
                           MetricType::Gauge, *boot + stat->start_seconds_after_boot));
    }
  }
  if (const std::optional<double> fds = OpenFds()) {
    out.push_back(Family("process_open_fds", "Open file descriptors", MetricType::Gauge, *fds));
  }
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    out.push_back(Family("process_max_fds", "Maximum number of open file descriptors",
                         MetricType::Gauge, static_cast<double>(limit.rlim_cur)));
  }
  return out;
}

}  // namespace posenc::server

// Shared helpers of the bench programs: latency summaries, the results file,
// the printed table. Controller thread only (rank 0); nothing here calls crown.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace crown::bench {

using Clock = std::chrono::steady_clock;

inline double microsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

inline double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// p50/p99 of a set of round trips, in microseconds.
struct LatencySummary {
  double p50 = 0;
  double p99 = 0;
  double mean = 0;
  double min = 0;
  double max = 0;
  std::size_t samples = 0;
};

// Nearest-rank percentile: always one of the measured values, never an
// interpolation between two of them.
inline double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

inline LatencySummary summarize(std::vector<double> micros) {
  LatencySummary s;
  if (micros.empty()) return s;
  std::sort(micros.begin(), micros.end());
  s.p50 = percentile(micros, 0.50);
  s.p99 = percentile(micros, 0.99);
  s.min = micros.front();
  s.max = micros.back();
  double sum = 0;
  for (double m : micros) sum += m;
  s.mean = sum / static_cast<double>(micros.size());
  s.samples = micros.size();
  return s;
}

inline nlohmann::json toJson(const LatencySummary& s) {
  return {{"p50_us", s.p50}, {"p99_us", s.p99}, {"mean_us", s.mean},
          {"min_us", s.min}, {"max_us", s.max}, {"samples", s.samples}};
}

inline double ratio(double a, double b) { return b > 0 ? a / b : 0; }

/// Where `<bench>.json` goes: argv[1] (a directory, or a file ending in
/// .json), else $CROWN_BENCH_RESULTS, else bench/results under the cwd.
inline std::filesystem::path resultsFile(int argc, char** argv, const std::string& bench) {
  std::filesystem::path where = "bench/results";
  if (argc > 1 && argv[1][0] != '\0') {
    where = argv[1];
    if (where.extension() == ".json") return where;
  } else if (const char* env = std::getenv("CROWN_BENCH_RESULTS"); env && *env) {
    where = env;
  }
  return where / (bench + ".json");
}

inline void writeResults(const std::filesystem::path& file, const nlohmann::json& results) {
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
  std::ofstream out(file);
  if (!out) throw std::runtime_error("cannot write " + file.string());
  out << results.dump(2) << "\n";
  std::cout << "results: " << file.string() << std::endl;
}

/// One row of the printed table; `cells` are already formatted.
inline void printRow(const std::string& name, const std::vector<std::string>& cells) {
  std::printf("%-32s", name.c_str());
  for (const auto& cell : cells) std::printf(" %14s", cell.c_str());
  std::printf("\n");
}

inline std::string fixed(double value, int digits = 2) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

}  // namespace crown::bench

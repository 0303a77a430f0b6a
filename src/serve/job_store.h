// The server's durable job list: one SQLite database (jobs.sqlite3 under the data folder) with a
// row per job. Every status change is written before it is reported, so a server killed at any
// moment restarts with every job it had accepted: finished ones with their files, queued ones still
// queued, and the one that was running marked failed (mark_interrupted). Progress within a stage is
// kept in memory only; the row holds the progress of the last status change.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace h3::serve {

struct JobRecord {
  std::string id;
  int64_t seq = 0;         // arrival order
  int64_t created_at = 0;  // unix seconds
  int64_t completed_at = 0;
  std::string status;   // queued, in_progress, completed, failed
  int progress = 0;     // 0-100
  std::string request;  // the normalized request (JSON text)
  std::string error_code, error_message;
  std::string size;     // "WxH" of the output
  std::string seconds;  // duration of the output, e.g. "5.2"
};

class JobStore {
 public:
  // Opens (creating when needed) the database at `path`. Throws h3::Error kIo.
  explicit JobStore(const std::string& path);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  void insert(const JobRecord& job);
  // Writes status, progress, error and completed_at of `job` (other fields never change).
  void update(const JobRecord& job);
  void remove(const std::string& id);
  // Every job in arrival order.
  std::vector<JobRecord> all();
  // Marks jobs left in_progress by a previous process as failed with `code` and `message`;
  // returns their ids.
  std::vector<std::string> mark_interrupted(const std::string& code, const std::string& message);
  int64_t next_seq();

 private:
  void exec(const std::string& sql);
  std::mutex mu_;
  sqlite3* db_ = nullptr;
};

}  // namespace h3::serve

#include "serve/job_store.h"

#include <sqlite3.h>

#include <memory>

#include "core/status.h"

namespace h3::serve {

namespace {

struct Stmt {
  sqlite3_stmt* s = nullptr;
  Stmt(sqlite3* db, const char* sql) {
    H3_CHECK(sqlite3_prepare_v2(db, sql, -1, &s, nullptr) == SQLITE_OK, ErrorCode::kIo,
             "job store: ", sqlite3_errmsg(db));
  }
  ~Stmt() { sqlite3_finalize(s); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  void text(int i, const std::string& v) {
    sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void integer(int i, int64_t v) { sqlite3_bind_int64(s, i, v); }
  std::string col_text(int i) {
    const unsigned char* t = sqlite3_column_text(s, i);
    return t ? std::string(reinterpret_cast<const char*>(t),
                           static_cast<size_t>(sqlite3_column_bytes(s, i)))
             : std::string();
  }
  void done(sqlite3* db) {
    H3_CHECK(sqlite3_step(s) == SQLITE_DONE, ErrorCode::kIo, "job store: ", sqlite3_errmsg(db));
  }
};

}  // namespace

JobStore::JobStore(const std::string& path) {
  if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    h3::fail(ErrorCode::kIo, "cannot open the job store '", path, "': ", msg);
  }
  sqlite3_busy_timeout(db_, 5000);
  // WAL with synchronous=FULL: a committed status change survives kill -9 and power loss.
  exec("PRAGMA journal_mode=WAL");
  exec("PRAGMA synchronous=FULL");
  exec(
      "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, created_at "
      "INTEGER NOT NULL, completed_at INTEGER NOT NULL DEFAULT 0, status TEXT NOT NULL, progress "
      "INTEGER NOT NULL DEFAULT 0, request TEXT NOT NULL, error_code TEXT NOT NULL DEFAULT '', "
      "error_message TEXT NOT NULL DEFAULT '', size TEXT NOT NULL DEFAULT '', seconds TEXT NOT "
      "NULL DEFAULT '')");
}

JobStore::~JobStore() { sqlite3_close(db_); }

void JobStore::exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    h3::fail(ErrorCode::kIo, "job store: ", msg);
  }
}

void JobStore::insert(const JobRecord& j) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_,
          "INSERT INTO jobs (id, seq, created_at, completed_at, status, progress, request, "
          "error_code, error_message, size, seconds) VALUES (?,?,?,?,?,?,?,?,?,?,?)");
  st.text(1, j.id);
  st.integer(2, j.seq);
  st.integer(3, j.created_at);
  st.integer(4, j.completed_at);
  st.text(5, j.status);
  st.integer(6, j.progress);
  st.text(7, j.request);
  st.text(8, j.error_code);
  st.text(9, j.error_message);
  st.text(10, j.size);
  st.text(11, j.seconds);
  st.done(db_);
}

void JobStore::update(const JobRecord& j) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_,
          "UPDATE jobs SET status=?, progress=?, error_code=?, error_message=?, completed_at=? "
          "WHERE id=?");
  st.text(1, j.status);
  st.integer(2, j.progress);
  st.text(3, j.error_code);
  st.text(4, j.error_message);
  st.integer(5, j.completed_at);
  st.text(6, j.id);
  st.done(db_);
}

void JobStore::remove(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "DELETE FROM jobs WHERE id=?");
  st.text(1, id);
  st.done(db_);
}

std::vector<JobRecord> JobStore::all() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_,
          "SELECT id, seq, created_at, completed_at, status, progress, request, error_code, "
          "error_message, size, seconds FROM jobs ORDER BY seq");
  std::vector<JobRecord> out;
  int rc = 0;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    JobRecord j;
    j.id = st.col_text(0);
    j.seq = sqlite3_column_int64(st.s, 1);
    j.created_at = sqlite3_column_int64(st.s, 2);
    j.completed_at = sqlite3_column_int64(st.s, 3);
    j.status = st.col_text(4);
    j.progress = sqlite3_column_int(st.s, 5);
    j.request = st.col_text(6);
    j.error_code = st.col_text(7);
    j.error_message = st.col_text(8);
    j.size = st.col_text(9);
    j.seconds = st.col_text(10);
    out.push_back(std::move(j));
  }
  H3_CHECK(rc == SQLITE_DONE, ErrorCode::kIo, "job store: ", sqlite3_errmsg(db_));
  return out;
}

std::vector<std::string> JobStore::mark_interrupted(const std::string& code,
                                                    const std::string& message) {
  std::vector<std::string> ids;
  for (const JobRecord& j : all())
    if (j.status == "in_progress") ids.push_back(j.id);
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_,
          "UPDATE jobs SET status='failed', error_code=?, error_message=? WHERE "
          "status='in_progress'");
  st.text(1, code);
  st.text(2, message);
  st.done(db_);
  return ids;
}

int64_t JobStore::next_seq() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs");
  H3_CHECK(sqlite3_step(st.s) == SQLITE_ROW, ErrorCode::kIo, "job store: ", sqlite3_errmsg(db_));
  return sqlite3_column_int64(st.s, 0);
}

}  // namespace h3::serve

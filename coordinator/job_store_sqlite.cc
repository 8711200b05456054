#include "coordinator/job_store_sqlite.h"

#include <sqlite3.h>

#include <cstdint>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status.h"

namespace ringmaster::coordinator {
namespace {

// Identifies a Ringmaster job store ("RMJS") in the SQLite header (PRAGMA application_id), so that
// Open refuses any other SQLite database instead of writing tables into it.
constexpr int32_t kApplicationId = 0x524D4A53;
// Bumped on every schema change; Open refuses a database with a newer version and migrates an
// older one.
constexpr int kSchemaVersion = 4;
// How long a statement waits for a lock held by another connection (another process opening the
// same file) before failing with SQLITE_BUSY.
constexpr int kBusyTimeoutMs = 5000;

constexpr const char* kCreateSchema = R"sql(
CREATE TABLE jobs (
  job_id TEXT PRIMARY KEY NOT NULL,
  state INTEGER NOT NULL,
  submit_time INTEGER NOT NULL,
  status BLOB NOT NULL
);
CREATE INDEX jobs_by_submit_time ON jobs (submit_time);
CREATE INDEX jobs_by_state ON jobs (state);
CREATE TABLE events (
  job_id TEXT NOT NULL REFERENCES jobs (job_id),
  sequence INTEGER NOT NULL,
  event BLOB NOT NULL,
  PRIMARY KEY (job_id, sequence)
);
CREATE TABLE requests (
  request_id TEXT PRIMARY KEY NOT NULL,
  job_id TEXT NOT NULL REFERENCES jobs (job_id)
);
)sql";

// Version 2: cordoned nodes (a serialized v1.NodeCordon per node name).
constexpr const char* kCreateCordons = R"sql(
CREATE TABLE node_cordons (
  node TEXT PRIMARY KEY NOT NULL,
  cordon BLOB NOT NULL
);
)sql";

// Version 3: every job id ever stored, kept when the job is deleted (agents remember a job id's
// generations, so an id is never given to another job), and the index deleting a job's request
// ids needs.
constexpr const char* kCreateUsedJobIds = R"sql(
CREATE TABLE used_job_ids (
  job_id TEXT PRIMARY KEY NOT NULL
);
INSERT INTO used_job_ids (job_id) SELECT job_id FROM jobs;
CREATE INDEX requests_by_job ON requests (job_id);
)sql";

// Version 4: the agent identity each node name is bound to (node_identities.h).
constexpr const char* kCreateNodeIdentities = R"sql(
CREATE TABLE node_identities (
  node TEXT PRIMARY KEY NOT NULL,
  identity TEXT NOT NULL
);
)sql";

absl::StatusCode CodeForSqlite(int rc) {
  switch (rc & 0xff) {  // The primary result code of an extended one.
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::StatusCode::kDataLoss;
    case SQLITE_CANTOPEN:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_PROTOCOL:
    case SQLITE_NOLFS:
      return absl::StatusCode::kUnavailable;
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return absl::StatusCode::kResourceExhausted;
    default:
      return absl::StatusCode::kInternal;
  }
}

// "<what>: <sqlite3_errmsg> (sqlite error N)", with a code chosen from the SQLite result code.
absl::Status SqliteError(sqlite3* db, int rc, absl::string_view what) {
  // sqlite3_errmsg describes the connection's latest failure; fall back to the generic text for
  // `rc` when that is about something else.
  const char* message = (db != nullptr && (sqlite3_errcode(db) & 0xff) == (rc & 0xff))
                            ? sqlite3_errmsg(db)
                            : sqlite3_errstr(rc);
  return absl::Status(CodeForSqlite(rc),
                      absl::StrCat(what, ": ", message, " (sqlite error ", rc, ")"));
}

absl::Status ExecSql(sqlite3* db, const char* sql) {
  char* error = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &error);
  if (rc == SQLITE_OK) return absl::OkStatus();
  absl::Status status = absl::Status(
      CodeForSqlite(rc), absl::StrCat(sql, ": ", error != nullptr ? error : sqlite3_errstr(rc),
                                      " (sqlite error ", rc, ")"));
  sqlite3_free(error);
  return status;
}

// A prepared statement with bound parameters; finalized on destruction.
class Statement {
 public:
  static absl::StatusOr<Statement> Prepare(sqlite3* db, const char* sql) {
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr);
    if (rc != SQLITE_OK) {
      sqlite3_finalize(stmt);
      return SqliteError(db, rc, absl::StrCat("preparing `", sql, "`"));
    }
    return Statement(db, stmt);
  }

  Statement(Statement&& other) noexcept
      : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)) {}
  Statement& operator=(Statement&&) = delete;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() { sqlite3_finalize(stmt_); }

  // Parameters are numbered from 1.
  absl::Status BindText(int index, absl::string_view text) {
    // An empty view may have a null data pointer, which would bind NULL instead of ''.
    return Check(sqlite3_bind_text64(stmt_, index, text.empty() ? "" : text.data(), text.size(),
                                     SQLITE_TRANSIENT, SQLITE_UTF8),
                 "binding a text parameter");
  }
  absl::Status BindBlob(int index, absl::string_view bytes) {
    // A zero-length blob must not bind as NULL (a null data pointer would).
    return Check(sqlite3_bind_blob64(stmt_, index, bytes.empty() ? "" : bytes.data(), bytes.size(),
                                     SQLITE_TRANSIENT),
                 "binding a blob parameter");
  }
  absl::Status BindInt64(int index, int64_t value) {
    return Check(sqlite3_bind_int64(stmt_, index, value), "binding an integer parameter");
  }

  // Runs the statement to its next row: true if there is one, false once done.
  absl::StatusOr<bool> Step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return SqliteError(db_, rc, absl::StrCat("running `", sqlite3_sql(stmt_), "`"));
  }

  // Runs a statement that returns no rows.
  absl::Status Run() {
    ASSIGN_OR_RETURN(bool row, Step());
    if (row) return absl::InternalError(absl::StrCat("`", sqlite3_sql(stmt_), "` returned a row"));
    return absl::OkStatus();
  }

  // Makes the statement ready to run again with new parameters.
  void Reset() {
    // The error sqlite3_reset repeats is the one Step already returned.
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

  // Columns of the current row, numbered from 0. Views are valid until the next Step or Reset.
  int64_t ColumnInt64(int index) { return sqlite3_column_int64(stmt_, index); }
  absl::string_view ColumnBytes(int index) {
    // A blob's pointer must be read before its size (see sqlite3_column_blob).
    const void* data = sqlite3_column_blob(stmt_, index);
    int size = sqlite3_column_bytes(stmt_, index);
    if (data == nullptr) return absl::string_view();
    return absl::string_view(static_cast<const char*>(data), size);
  }

 private:
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}

  absl::Status Check(int rc, absl::string_view what) {
    if (rc == SQLITE_OK) return absl::OkStatus();
    return SqliteError(db_, rc, absl::StrCat(what, " of `", sqlite3_sql(stmt_), "`"));
  }

  sqlite3* db_;
  sqlite3_stmt* stmt_;
};

// Runs `body` between `begin` and COMMIT, rolling back if either fails.
template <typename Body>
absl::Status InTransaction(sqlite3* db, const char* begin, Body body) {
  RETURN_IF_ERROR(ExecSql(db, begin));
  absl::Status status = body();
  if (status.ok()) status = ExecSql(db, "COMMIT");
  // Some errors (SQLITE_FULL, SQLITE_IOERR, ...) already rolled the transaction back, and a failed
  // COMMIT (e.g. SQLITE_BUSY) leaves it open; roll back only what is still open. A failing
  // ROLLBACK is ignored: the error that caused it is the one to report, and SQLite then rolls back
  // itself when the connection next works or is closed.
  if (!status.ok() && sqlite3_get_autocommit(db) == 0) ExecSql(db, "ROLLBACK").IgnoreError();
  return status;
}

absl::StatusOr<int64_t> QueryInt64(sqlite3* db, const char* sql) {
  ASSIGN_OR_RETURN(Statement stmt, Statement::Prepare(db, sql));
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::InternalError(absl::StrCat("`", sql, "` returned no row"));
  return stmt.ColumnInt64(0);
}

absl::Status CheckJobId(const std::string& job_id) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: must not be empty");
  return absl::OkStatus();
}

absl::StatusOr<std::string> Serialize(const google::protobuf::Message& message,
                                      absl::string_view what) {
  std::string bytes;
  if (!message.SerializeToString(&bytes)) {
    return absl::InternalError(absl::StrCat("cannot serialize ", what));
  }
  return bytes;
}

absl::StatusOr<bool> JobExists(sqlite3* db, const std::string& job_id) {
  ASSIGN_OR_RETURN(Statement stmt, Statement::Prepare(db, "SELECT 1 FROM jobs WHERE job_id = ?1"));
  RETURN_IF_ERROR(stmt.BindText(1, job_id));
  return stmt.Step();
}

// Inserts the job row, or (with `replace`) updates the existing one in place, which keeps its
// rowid and therefore its place among jobs submitted at the same time.
absl::Status WriteJob(sqlite3* db, const v1::JobStatus& status, bool replace) {
  ASSIGN_OR_RETURN(std::string bytes,
                   Serialize(status, absl::StrCat("the status of job '", status.job_id(), "'")));
  ASSIGN_OR_RETURN(
      Statement stmt,
      Statement::Prepare(db, replace ? "INSERT INTO jobs (job_id, state, submit_time, status) "
                                       "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (job_id) DO UPDATE "
                                       "SET state = excluded.state, "
                                       "submit_time = excluded.submit_time, "
                                       "status = excluded.status"
                                     : "INSERT INTO jobs (job_id, state, submit_time, status) "
                                       "VALUES (?1, ?2, ?3, ?4)"));
  RETURN_IF_ERROR(stmt.BindText(1, status.job_id()));
  RETURN_IF_ERROR(stmt.BindInt64(2, status.state()));
  RETURN_IF_ERROR(stmt.BindInt64(3, status.submit_time_unix_nanos()));
  RETURN_IF_ERROR(stmt.BindBlob(4, bytes));
  RETURN_IF_ERROR(stmt.Run());
  ASSIGN_OR_RETURN(Statement used, Statement::Prepare(db,
                                                      "INSERT OR IGNORE INTO used_job_ids "
                                                      "(job_id) VALUES (?1)"));
  RETURN_IF_ERROR(used.BindText(1, status.job_id()));
  return used.Run();
}

// Appends `events` to the job's log, each of which must carry the next sequence number.
absl::Status WriteEvents(sqlite3* db, const std::string& job_id,
                         const std::vector<v1::JobEvent>& events) {
  if (events.empty()) return absl::OkStatus();
  int64_t last = 0;
  {
    ASSIGN_OR_RETURN(
        Statement stmt,
        Statement::Prepare(db, "SELECT COALESCE(MAX(sequence), 0) FROM events WHERE job_id = ?1"));
    RETURN_IF_ERROR(stmt.BindText(1, job_id));
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (row) last = stmt.ColumnInt64(0);
  }
  ASSIGN_OR_RETURN(
      Statement insert,
      Statement::Prepare(db, "INSERT INTO events (job_id, sequence, event) VALUES (?1, ?2, ?3)"));
  for (const v1::JobEvent& event : events) {
    if (event.sequence() != last + 1) {
      return absl::FailedPreconditionError(
          absl::StrCat("job '", job_id, "': event sequence ", event.sequence(),
                       " is not the next one (expected ", last + 1, ")"));
    }
    ASSIGN_OR_RETURN(std::string bytes, Serialize(event, absl::StrCat("event ", event.sequence(),
                                                                      " of job '", job_id, "'")));
    RETURN_IF_ERROR(insert.BindText(1, job_id));
    RETURN_IF_ERROR(insert.BindInt64(2, event.sequence()));
    RETURN_IF_ERROR(insert.BindBlob(3, bytes));
    RETURN_IF_ERROR(insert.Run());
    insert.Reset();
    last = event.sequence();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> LookUpRequest(sqlite3* db,
                                                         const std::string& request_id) {
  ASSIGN_OR_RETURN(Statement stmt,
                   Statement::Prepare(db, "SELECT job_id FROM requests WHERE request_id = ?1"));
  RETURN_IF_ERROR(stmt.BindText(1, request_id));
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return std::nullopt;
  return std::string(stmt.ColumnBytes(0));
}

// Creates the schema in an empty database, or checks that an existing one is ours and not newer.
absl::Status CheckOrCreateSchema(sqlite3* db) {
  ASSIGN_OR_RETURN(int64_t application_id, QueryInt64(db, "PRAGMA application_id"));
  ASSIGN_OR_RETURN(int64_t version, QueryInt64(db, "PRAGMA user_version"));
  ASSIGN_OR_RETURN(int64_t objects, QueryInt64(db, "SELECT COUNT(*) FROM sqlite_master"));
  if (application_id == 0 && version == 0 && objects == 0) {  // New (or empty) file.
    RETURN_IF_ERROR(ExecSql(db, kCreateSchema));
    RETURN_IF_ERROR(ExecSql(db, kCreateCordons));
    RETURN_IF_ERROR(ExecSql(db, kCreateUsedJobIds));
    RETURN_IF_ERROR(ExecSql(db, kCreateNodeIdentities));
    RETURN_IF_ERROR(ExecSql(db, absl::StrCat("PRAGMA application_id = ", kApplicationId).c_str()));
    return ExecSql(db, absl::StrCat("PRAGMA user_version = ", kSchemaVersion).c_str());
  }
  if (application_id != kApplicationId) {
    return absl::DataLossError(
        absl::StrCat("not a Ringmaster job store (a SQLite database with application_id ",
                     application_id, ", expected ", kApplicationId, ")"));
  }
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("schema version ", version, " is newer than this binary's (", kSchemaVersion,
                     "); run a newer coordinator"));
  }
  if (version < 1) {
    return absl::DataLossError(absl::StrCat("invalid schema version ", version));
  }
  if (version == kSchemaVersion) return absl::OkStatus();
  // Migrated within Initialize's transaction: all of it or none.
  if (version == 1) RETURN_IF_ERROR(ExecSql(db, kCreateCordons));
  if (version <= 2) RETURN_IF_ERROR(ExecSql(db, kCreateUsedJobIds));
  RETURN_IF_ERROR(ExecSql(db, kCreateNodeIdentities));  // versions 1 to 3
  return ExecSql(db, absl::StrCat("PRAGMA user_version = ", kSchemaVersion).c_str());
}

// Identity check, WAL mode and an integrity check, in that order: nothing is written to a file
// before it is known to be an empty database or a Ringmaster job store.
absl::Status Initialize(sqlite3* db) {
  RETURN_IF_ERROR(InTransaction(db, "BEGIN IMMEDIATE", [db] { return CheckOrCreateSchema(db); }));
  {
    // Must run outside a transaction; it answers with the journal mode now in force.
    ASSIGN_OR_RETURN(Statement stmt, Statement::Prepare(db, "PRAGMA journal_mode = WAL"));
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    absl::string_view mode = row ? stmt.ColumnBytes(0) : absl::string_view();
    if (mode != "wal") {
      return absl::UnavailableError(
          absl::StrCat("cannot switch to WAL journal mode (got '", mode, "')"));
    }
  }
  // Reads every page once: a damaged file is refused here rather than half loaded later.
  ASSIGN_OR_RETURN(Statement check, Statement::Prepare(db, "PRAGMA quick_check(1)"));
  ASSIGN_OR_RETURN(bool row, check.Step());
  absl::string_view result = row ? check.ColumnBytes(0) : absl::string_view();
  if (result != "ok") {
    return absl::DataLossError(absl::StrCat("integrity check failed: ", result));
  }
  return absl::OkStatus();
}

// One node's row of a per-node table (node_cordons, node_identities): deleted when `value` is
// nullopt, else inserted or replaced with `value` in `column`, bound as a blob (a serialized
// message) or as text. The caller holds the store's lock.
absl::Status PutNodeRow(sqlite3* db, absl::string_view table, absl::string_view column,
                        const std::string& node, const std::optional<std::string>& value,
                        bool as_blob) {
  if (!value.has_value()) {
    const std::string sql = absl::StrCat("DELETE FROM ", table, " WHERE node = ?1");
    ASSIGN_OR_RETURN(Statement stmt, Statement::Prepare(db, sql.c_str()));
    RETURN_IF_ERROR(stmt.BindText(1, node));
    return stmt.Run();
  }
  const std::string sql =
      absl::StrCat("INSERT INTO ", table, " (node, ", column, ") VALUES (?1, ?2) ",
                   "ON CONFLICT (node) DO UPDATE SET ", column, " = excluded.", column);
  ASSIGN_OR_RETURN(Statement stmt, Statement::Prepare(db, sql.c_str()));
  RETURN_IF_ERROR(stmt.BindText(1, node));
  RETURN_IF_ERROR(as_blob ? stmt.BindBlob(2, *value) : stmt.BindText(2, *value));
  return stmt.Run();
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteJobStore> store, SqliteJobStore::Open(path));
  return std::unique_ptr<JobStore>(std::move(store));
}

absl::StatusOr<std::unique_ptr<SqliteJobStore>> SqliteJobStore::Open(const std::string& path) {
  const std::string context = absl::StrCat("job store '", path, "'");
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status status = absl::UnavailableError(absl::StrCat(
        context, ": cannot open: ", db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc),
        " (sqlite error ", rc, ")"));
    sqlite3_close(db);  // Also allocated on most failures; a no-op on nullptr.
    return status;
  }
  std::unique_ptr<SqliteJobStore> store(
      new SqliteJobStore(db));  // Closes `db` on every return below.
  absl::MutexLock lock(&store->mu_);
  rc = sqlite3_busy_timeout(db, kBusyTimeoutMs);
  if (rc != SQLITE_OK) return SqliteError(db, rc, absl::StrCat(context, ": setting busy timeout"));
  // The first read of the file: one that is not SQLite fails here with SQLITE_NOTADB (DATA_LOSS).
  RETURN_IF_ERROR(Annotate(QueryInt64(db, "PRAGMA schema_version").status(),
                           absl::StrCat(context, ": reading the file")));
  RETURN_IF_ERROR(Annotate(store->Exec("PRAGMA foreign_keys = ON"), context));
  RETURN_IF_ERROR(Annotate(store->Exec("PRAGMA synchronous = FULL"), context));
  RETURN_IF_ERROR(Annotate(Initialize(store->db_), context));
  return store;
}

SqliteJobStore::~SqliteJobStore() {
  absl::MutexLock lock(&mu_);
  // Every statement is finalized when its call returns, so close cannot report SQLITE_BUSY; any
  // other failure here leaves nothing to do (committed data is already durable).
  sqlite3_close(db_);
}

absl::Status SqliteJobStore::Exec(const char* sql) { return ExecSql(db_, sql); }

absl::Status SqliteJobStore::PutJob(const v1::JobStatus& status) {
  RETURN_IF_ERROR(CheckJobId(status.job_id()));
  absl::MutexLock lock(&mu_);
  sqlite3* db = db_;
  return Annotate(
      InTransaction(db, "BEGIN IMMEDIATE", [&] { return WriteJob(db, status, /*replace=*/true); }),
      "JobStore::PutJob");
}

absl::Status SqliteJobStore::AppendEvent(const std::string& job_id, const v1::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  sqlite3* db = db_;
  return Annotate(InTransaction(db, "BEGIN IMMEDIATE",
                                [&]() -> absl::Status {
                                  ASSIGN_OR_RETURN(bool exists, JobExists(db, job_id));
                                  if (!exists) {
                                    return absl::NotFoundError(
                                        absl::StrCat("job '", job_id, "' was never stored"));
                                  }
                                  return WriteEvents(db, job_id, {event});
                                }),
                  "JobStore::AppendEvent");
}

absl::Status SqliteJobStore::PutJobWithEvents(const v1::JobStatus& status,
                                              const std::vector<v1::JobEvent>& events) {
  RETURN_IF_ERROR(CheckJobId(status.job_id()));
  absl::MutexLock lock(&mu_);
  sqlite3* db = db_;
  return Annotate(InTransaction(db, "BEGIN IMMEDIATE",
                                [&]() -> absl::Status {
                                  RETURN_IF_ERROR(WriteJob(db, status, /*replace=*/true));
                                  return WriteEvents(db, status.job_id(), events);
                                }),
                  "JobStore::PutJobWithEvents");
}

namespace {

// A stored event row as a JobEvent: DATA_LOSS unless it parses and carries its row's sequence.
absl::StatusOr<v1::JobEvent> ParseEventRow(const std::string& job_id, int64_t sequence,
                                           absl::string_view bytes) {
  v1::JobEvent event;
  if (!event.ParseFromArray(bytes.data(), bytes.size())) {
    return absl::DataLossError(absl::StrCat("job '", job_id, "': stored event ", sequence, " (",
                                            bytes.size(), " bytes) is not a valid JobEvent"));
  }
  if (event.sequence() != sequence) {
    return absl::DataLossError(absl::StrCat("job '", job_id, "': stored event ", sequence,
                                            " says it is event ", event.sequence()));
  }
  return event;
}

}  // namespace

absl::StatusOr<std::vector<StoredJob>> SqliteJobStore::LoadAll(size_t newest_events) {
  absl::MutexLock lock(&mu_);
  sqlite3* db = db_;
  std::vector<StoredJob> jobs;
  // One read transaction: a consistent snapshot of jobs and events.
  absl::Status status = InTransaction(db, "BEGIN", [&]() -> absl::Status {
    std::unordered_map<std::string, size_t> index;
    {
      ASSIGN_OR_RETURN(Statement stmt,
                       Statement::Prepare(db, "SELECT job_id, status FROM jobs ORDER BY rowid"));
      for (;;) {
        ASSIGN_OR_RETURN(bool row, stmt.Step());
        if (!row) break;
        std::string job_id(stmt.ColumnBytes(0));
        absl::string_view bytes = stmt.ColumnBytes(1);
        StoredJob job;
        if (!job.status.ParseFromArray(bytes.data(), bytes.size())) {
          return absl::DataLossError(absl::StrCat("job '", job_id, "': stored status (",
                                                  bytes.size(),
                                                  " bytes) is not a valid JobStatus"));
        }
        if (job.status.job_id() != job_id) {
          return absl::DataLossError(absl::StrCat("job '", job_id, "': stored status names job '",
                                                  job.status.job_id(), "'"));
        }
        index.emplace(job_id, jobs.size());
        jobs.push_back(std::move(job));
      }
    }
    ASSIGN_OR_RETURN(Statement stmt,
                     Statement::Prepare(db,
                                        "SELECT job_id, sequence, event FROM events "
                                        "ORDER BY job_id, sequence"));
    for (;;) {
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      std::string job_id(stmt.ColumnBytes(0));
      int64_t sequence = stmt.ColumnInt64(1);
      absl::string_view bytes = stmt.ColumnBytes(2);
      auto it = index.find(job_id);
      if (it == index.end()) {
        return absl::DataLossError(
            absl::StrCat("job '", job_id, "': event ", sequence, " of a job that is not stored"));
      }
      StoredJob& job = jobs[it->second];
      ASSIGN_OR_RETURN(v1::JobEvent event, ParseEventRow(job_id, sequence, bytes));
      if (sequence != job.event_count + 1) {
        return absl::DataLossError(absl::StrCat("job '", job_id,
                                                "': event log out of order at stored sequence ",
                                                sequence, " (expected ", job.event_count + 1, ")"));
      }
      job.event_count = sequence;
      job.events.push_back(std::move(event));
      if (job.events.size() > newest_events) job.events.pop_front();
    }
    return absl::OkStatus();
  });
  RETURN_IF_ERROR(Annotate(status, "JobStore::LoadAll"));
  return jobs;
}

absl::StatusOr<std::vector<v1::JobEvent>> SqliteJobStore::ReadEvents(const std::string& job_id,
                                                                     int64_t after_sequence,
                                                                     int64_t up_to_sequence) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::JobEvent> events;
  ASSIGN_OR_RETURN(Statement stmt, Statement::Prepare(db_,
                                                      "SELECT sequence, event FROM events WHERE "
                                                      "job_id = ?1 AND sequence > ?2 AND "
                                                      "sequence <= ?3 ORDER BY sequence"));
  RETURN_IF_ERROR(stmt.BindText(1, job_id));
  RETURN_IF_ERROR(stmt.BindInt64(2, after_sequence));
  RETURN_IF_ERROR(stmt.BindInt64(3, up_to_sequence));
  for (int64_t want = after_sequence + 1;; ++want) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row && want > up_to_sequence) break;
    if (!row || stmt.ColumnInt64(0) != want) {
      return absl::DataLossError(absl::StrCat("JobStore::ReadEvents: job '", job_id,
                                              "': stored event ", want, " is missing"));
    }
    absl::StatusOr<v1::JobEvent> event = ParseEventRow(job_id, want, stmt.ColumnBytes(1));
    if (!event.ok()) return Annotate(event.status(), "JobStore::ReadEvents");
    events.push_back(*std::move(event));
  }
  return events;
}

absl::StatusOr<std::optional<std::string>> SqliteJobStore::FindRequest(
    const std::string& request_id) {
  if (request_id.empty()) return std::nullopt;  // CreateJob stores no empty request id.
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::optional<std::string>> job_id = LookUpRequest(db_, request_id);
  if (!job_id.ok()) return Annotate(job_id.status(), "JobStore::FindRequest");
  return job_id;
}

absl::Status SqliteJobStore::CreateJob(const v1::JobStatus& status,
                                       const std::vector<v1::JobEvent>& events,
                                       const std::string& request_id) {
  RETURN_IF_ERROR(CheckJobId(status.job_id()));
  absl::MutexLock lock(&mu_);
  sqlite3* db = db_;
  absl::Status result = InTransaction(db, "BEGIN IMMEDIATE", [&]() -> absl::Status {
    if (!request_id.empty()) {
      ASSIGN_OR_RETURN(std::optional<std::string> existing, LookUpRequest(db, request_id));
      if (existing.has_value()) {
        return absl::AlreadyExistsError(
            absl::StrCat("request '", request_id, "' already created job '", *existing, "'"));
      }
    }
    ASSIGN_OR_RETURN(bool exists, JobExists(db, status.job_id()));
    if (exists) {
      return absl::FailedPreconditionError(
          absl::StrCat("job '", status.job_id(), "' already exists"));
    }
    RETURN_IF_ERROR(WriteJob(db, status, /*replace=*/false));
    RETURN_IF_ERROR(WriteEvents(db, status.job_id(), events));
    if (request_id.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(
        Statement stmt,
        Statement::Prepare(db, "INSERT INTO requests (request_id, job_id) VALUES (?1, ?2)"));
    RETURN_IF_ERROR(stmt.BindText(1, request_id));
    RETURN_IF_ERROR(stmt.BindText(2, status.job_id()));
    return stmt.Run();
  });
  return Annotate(result, "JobStore::CreateJob");
}

absl::StatusOr<bool> SqliteJobStore::JobIdUsed(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement stmt,
                   Statement::Prepare(db_, "SELECT 1 FROM used_job_ids WHERE job_id = ?1"));
  RETURN_IF_ERROR(stmt.BindText(1, job_id));
  return stmt.Step();
}

absl::Status SqliteJobStore::DeleteJobs(const std::vector<std::string>& job_ids) {
  absl::MutexLock lock(&mu_);
  sqlite3* db = db_;
  return Annotate(InTransaction(db, "BEGIN IMMEDIATE",
                                [&]() -> absl::Status {
                                  // Rows that refer to the job go first (REFERENCES jobs).
                                  for (const char* sql : {"DELETE FROM events WHERE job_id = ?1",
                                                          "DELETE FROM requests WHERE job_id = ?1",
                                                          "DELETE FROM jobs WHERE job_id = ?1"}) {
                                    ASSIGN_OR_RETURN(Statement stmt, Statement::Prepare(db, sql));
                                    for (const std::string& id : job_ids) {
                                      stmt.Reset();
                                      RETURN_IF_ERROR(stmt.BindText(1, id));
                                      RETURN_IF_ERROR(stmt.Run());
                                    }
                                  }
                                  return absl::OkStatus();
                                }),
                  "JobStore::DeleteJobs");
}

absl::Status SqliteJobStore::PutCordon(const std::string& node,
                                       const std::optional<v1::NodeCordon>& cordon) {
  if (node.empty()) return absl::InvalidArgumentError("node: must not be empty");
  absl::MutexLock lock(&mu_);
  std::optional<std::string> bytes;
  if (cordon.has_value()) {
    ASSIGN_OR_RETURN(bytes, Serialize(*cordon, absl::StrCat("the cordon of ", node)));
  }
  return PutNodeRow(db_, "node_cordons", "cordon", node, bytes, /*as_blob=*/true);
}

absl::StatusOr<std::vector<std::pair<std::string, v1::NodeCordon>>> SqliteJobStore::LoadCordons() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement stmt,
                   Statement::Prepare(db_, "SELECT node, cordon FROM node_cordons ORDER BY node"));
  std::vector<std::pair<std::string, v1::NodeCordon>> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    auto& [node, cordon] = out.emplace_back();
    node = std::string(stmt.ColumnBytes(0));
    const absl::string_view bytes = stmt.ColumnBytes(1);
    if (!cordon.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      return absl::DataLossError(absl::StrCat("the stored cordon of node ", node, " is corrupt"));
    }
  }
  return out;
}

absl::Status SqliteJobStore::PutNodeIdentity(const std::string& node,
                                             const std::optional<std::string>& identity) {
  if (node.empty()) return absl::InvalidArgumentError("node: must not be empty");
  absl::MutexLock lock(&mu_);
  if (identity.has_value() && identity->empty()) {
    return absl::InvalidArgumentError("identity: must not be empty");
  }
  return PutNodeRow(db_, "node_identities", "identity", node, identity, /*as_blob=*/false);
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
SqliteJobStore::LoadNodeIdentities() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(
      Statement stmt,
      Statement::Prepare(db_, "SELECT node, identity FROM node_identities ORDER BY node"));
  std::vector<std::pair<std::string, std::string>> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    out.emplace_back(std::string(stmt.ColumnBytes(0)), std::string(stmt.ColumnBytes(1)));
  }
  return out;
}

}  // namespace ringmaster::coordinator

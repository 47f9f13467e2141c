//! The controller's persistent state in SQLite: services, instances, placements, paths,
//! operations (JSON documents keyed by id) and an append-only event log. Several writes
//! can go in one transaction so that a journaled step and its effect land together.

use rusqlite::{params, Connection, OptionalExtension};
use serde::{de::DeserializeOwned, Serialize};
use std::path::Path;
use std::sync::Mutex;

/// The document tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// Service requests and their status.
    Services,
    /// VNF instances (one per deployed function).
    Instances,
    /// Placement decisions (tier and device chosen, and why).
    Placements,
    /// Hop-by-hop paths of services, as pushed to the forwarding enforcer.
    Paths,
    /// Long operations with their journaled steps.
    Operations,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::Services => "services",
            Table::Instances => "instances",
            Table::Placements => "placements",
            Table::Paths => "paths",
            Table::Operations => "operations",
        }
    }

    const ALL: [Table; 5] = [
        Table::Services,
        Table::Instances,
        Table::Placements,
        Table::Paths,
        Table::Operations,
    ];
}

/// One write of a batch.
#[derive(Debug, Clone)]
pub enum Write {
    /// Insert or replace a document.
    Put(Table, String, serde_json::Value),
    /// Remove a document (no error if absent).
    Delete(Table, String),
    /// Append an event.
    Event(String, serde_json::Value),
}

/// Errors of the store; they name the database file.
#[derive(Debug, thiserror::Error)]
#[error("state database {file}: {message}")]
pub struct StoreError {
    /// Database path.
    pub file: String,
    /// What went wrong.
    pub message: String,
}

/// A logged event.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EventRecord {
    /// Sequence number.
    pub seq: i64,
    /// Milliseconds since the Unix epoch.
    pub ts_ms: i64,
    /// Kind, e.g. `instance.deployed`.
    pub kind: String,
    /// Details.
    pub detail: serde_json::Value,
}

/// The SQLite state database.
pub struct Store {
    file: String,
    conn: Mutex<Connection>,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Store {
    /// Opens (creating if needed) the database at `path`; `:memory:` gives a private one.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let file = path.display().to_string();
        let err = |e: rusqlite::Error| StoreError {
            file: file.clone(),
            message: e.to_string(),
        };
        let conn = if file == ":memory:" {
            Connection::open_in_memory()
        } else {
            Connection::open(path)
        }
        .map_err(err)?;
        let mut sql = String::from(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY AUTOINCREMENT,
               ts_ms INTEGER NOT NULL, kind TEXT NOT NULL, detail TEXT NOT NULL);",
        );
        for t in Table::ALL {
            sql.push_str(&format!(
                "CREATE TABLE IF NOT EXISTS {} (id TEXT PRIMARY KEY, body TEXT NOT NULL,
                   updated_ms INTEGER NOT NULL);",
                t.name()
            ));
        }
        conn.execute_batch(&sql).map_err(err)?;
        Ok(Store {
            file,
            conn: Mutex::new(conn),
        })
    }

    fn err(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError {
            file: self.file.clone(),
            message: e.to_string(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies every write in one transaction (all or nothing).
    pub fn batch(&self, writes: &[Write]) -> Result<(), StoreError> {
        let mut c = self.lock();
        let tx = c.transaction().map_err(|e| self.err(e))?;
        let now = now_ms();
        for w in writes {
            match w {
                Write::Put(t, id, body) => tx.execute(
                    &format!(
                        "INSERT OR REPLACE INTO {} (id, body, updated_ms) VALUES (?1, ?2, ?3)",
                        t.name()
                    ),
                    params![id, body.to_string(), now],
                ),
                Write::Delete(t, id) => tx.execute(
                    &format!("DELETE FROM {} WHERE id = ?1", t.name()),
                    params![id],
                ),
                Write::Event(kind, detail) => tx.execute(
                    "INSERT INTO events (ts_ms, kind, detail) VALUES (?1, ?2, ?3)",
                    params![now, kind, detail.to_string()],
                ),
            }
            .map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))
    }

    /// Stores one document.
    pub fn put<T: Serialize>(&self, t: Table, id: &str, v: &T) -> Result<(), StoreError> {
        let body = serde_json::to_value(v).map_err(|e| self.err(e))?;
        self.batch(&[Write::Put(t, id.to_string(), body)])
    }

    /// Reads one document.
    pub fn get<T: DeserializeOwned>(&self, t: Table, id: &str) -> Result<Option<T>, StoreError> {
        let body: Option<String> = self
            .lock()
            .query_row(
                &format!("SELECT body FROM {} WHERE id = ?1", t.name()),
                params![id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        body.map(|b| {
            serde_json::from_str(&b).map_err(|e| self.err(format!("{}/{id}: {e}", t.name())))
        })
        .transpose()
    }

    /// Reads every document of a table, ordered by id as a person reads numbered ids
    /// (`op-2` before `op-10`, see [`natural_order`]).
    pub fn list<T: DeserializeOwned>(&self, t: Table) -> Result<Vec<T>, StoreError> {
        let c = self.lock();
        let mut st = c
            .prepare(&format!("SELECT id, body FROM {}", t.name()))
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.err(e))?;
        let mut docs = Vec::new();
        for row in rows {
            docs.push(row.map_err(|e| self.err(e))?);
        }
        docs.sort_by(|a, b| natural_order(&a.0, &b.0));
        docs.into_iter()
            .map(|(id, body)| {
                serde_json::from_str(&body).map_err(|e| self.err(format!("{}/{id}: {e}", t.name())))
            })
            .collect()
    }

    /// Removes one document.
    pub fn delete(&self, t: Table, id: &str) -> Result<(), StoreError> {
        self.batch(&[Write::Delete(t, id.to_string())])
    }

    /// The last `limit` events, oldest first.
    pub fn events(&self, limit: usize) -> Result<Vec<EventRecord>, StoreError> {
        let c = self.lock();
        let mut st = c
            .prepare(
                "SELECT seq, ts_ms, kind, detail FROM
                   (SELECT * FROM events ORDER BY seq DESC LIMIT ?1) ORDER BY seq",
            )
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map(params![limit as i64], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, ts_ms, kind, detail) = row.map_err(|e| self.err(e))?;
            out.push(EventRecord {
                seq,
                ts_ms,
                kind,
                detail: serde_json::from_str(&detail).unwrap_or(serde_json::Value::Null),
            });
        }
        Ok(out)
    }
}

/// Orders ids by their text with every run of digits compared as a number, so that
/// numbered ids (`op-9`, `op-10`, `fw-2-1`) list in the order they were made.
pub fn natural_order(a: &str, b: &str) -> std::cmp::Ordering {
    /// The id cut into alternating text and digit runs.
    fn runs(s: &str) -> impl Iterator<Item = &str> {
        let mut rest = s;
        std::iter::from_fn(move || {
            let first = rest.chars().next()?;
            let digit = first.is_ascii_digit();
            let end = rest
                .find(|c: char| c.is_ascii_digit() != digit)
                .unwrap_or(rest.len());
            let (run, tail) = rest.split_at(end);
            rest = tail;
            Some(run)
        })
    }
    let run_order = |x: &str, y: &str| {
        let num = |r: &str| r.bytes().all(|c| c.is_ascii_digit());
        if num(x) && num(y) {
            let (x, y) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
            x.len().cmp(&y.len()).then_with(|| x.cmp(y))
        } else {
            x.cmp(y)
        }
    };
    let (mut ra, mut rb) = (runs(a), runs(b));
    loop {
        match (ra.next(), rb.next()) {
            (Some(x), Some(y)) => match run_order(x, y) {
                std::cmp::Ordering::Equal => {}
                o => return o,
            },
            (x, y) => return x.is_some().cmp(&y.is_some()).then_with(|| a.cmp(b)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbered_ids_list_in_number_order() {
        let mut ids = vec![
            "op-10", "op-2", "op-1", "fw-1-10", "fw-1-9", "op-02x", "op-2x", "b",
        ];
        ids.sort_by(|a, b| natural_order(a, b));
        assert_eq!(
            ids,
            ["b", "fw-1-9", "fw-1-10", "op-1", "op-2", "op-02x", "op-2x", "op-10"]
        );
        let dir = std::env::temp_dir().join(format!("nfx-store-order-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let s = Store::open(&dir.join("state.db")).unwrap();
        for n in [1, 10, 2, 11, 3] {
            let id = format!("op-{n}");
            s.put(Table::Operations, &id, &json!({"id": id})).unwrap();
        }
        let all: Vec<serde_json::Value> = s.list(Table::Operations).unwrap();
        let got: Vec<&str> = all.iter().map(|v| v["id"].as_str().unwrap()).collect();
        assert_eq!(got, ["op-1", "op-2", "op-3", "op-10", "op-11"]);
        drop(s);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn documents_round_trip_across_reopen() {
        let dir = std::env::temp_dir().join(format!("nfx-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("state.db");
        {
            let s = Store::open(&db).unwrap();
            s.put(Table::Services, "web", &json!({"id": "web", "n": 1}))
                .unwrap();
            s.batch(&[
                Write::Put(Table::Instances, "i1".into(), json!({"id": "i1"})),
                Write::Event("x".into(), json!({"a": 1})),
                Write::Delete(Table::Paths, "none".into()),
            ])
            .unwrap();
        }
        let s = Store::open(&db).unwrap();
        let v: serde_json::Value = s.get(Table::Services, "web").unwrap().unwrap();
        assert_eq!(v["n"], 1);
        let all: Vec<serde_json::Value> = s.list(Table::Instances).unwrap();
        assert_eq!(all, vec![json!({"id": "i1"})]);
        let ev = s.events(10).unwrap();
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].kind, "x");
        s.delete(Table::Services, "web").unwrap();
        assert!(s
            .get::<serde_json::Value>(Table::Services, "web")
            .unwrap()
            .is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_documents_and_paths_name_the_file() {
        let s = Store::open(Path::new(":memory:")).unwrap();
        s.put(Table::Paths, "p", &json!("text")).unwrap();
        let e = s.get::<Vec<u8>>(Table::Paths, "p").unwrap_err();
        assert!(e.to_string().contains("paths/p"), "{e}");
        let e = Store::open(Path::new("/nonexistent/dir/x.db"))
            .err()
            .unwrap();
        assert!(e.to_string().contains("/nonexistent/dir/x.db"), "{e}");
        for i in 0..5 {
            s.batch(&[Write::Event(format!("k{i}"), json!(i))]).unwrap();
        }
        let ev = s.events(2).unwrap();
        assert_eq!(
            ev.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
            ["k3", "k4"]
        );
    }
}

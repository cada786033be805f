#!/usr/bin/env python3
"""A naive Jira importer, written as a user would in an afternoon: Python's json and sqlite3, one
thread, upserting projects, people, components, bugs and comments into a schema of its own, a
transaction per 1,000 issues (WAL, synchronous=NORMAL). The benchmark's baseline of what
squasherd must clearly beat (docs/BENCHMARKS.md, section j).

Usage: scripts/naive_import.py EXPORT.ndjson[.gz] STORE.sqlite
"""
import gzip
import json
import sqlite3
import sys
from datetime import datetime

SCHEMA = """
CREATE TABLE IF NOT EXISTS project (id INTEGER PRIMARY KEY, key TEXT UNIQUE NOT NULL, name TEXT);
CREATE TABLE IF NOT EXISTS person (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, display_name TEXT);
CREATE TABLE IF NOT EXISTS component (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL);
CREATE TABLE IF NOT EXISTS bug (id INTEGER PRIMARY KEY, key TEXT UNIQUE NOT NULL, jira_id TEXT, title TEXT, details TEXT,
    status TEXT, resolution TEXT, priority TEXT, type TEXT, labels TEXT, created REAL, updated REAL, resolved REAL,
    project INTEGER REFERENCES project, reporter INTEGER REFERENCES person, assignee INTEGER REFERENCES person);
CREATE TABLE IF NOT EXISTS bug_component (bug INTEGER NOT NULL, component INTEGER NOT NULL, PRIMARY KEY (bug, component));
CREATE TABLE IF NOT EXISTS comment (id INTEGER PRIMARY KEY, jira_id TEXT UNIQUE NOT NULL, body TEXT, created REAL,
    updated REAL, bug INTEGER REFERENCES bug, author INTEGER REFERENCES person);
CREATE INDEX IF NOT EXISTS comment_bug ON comment(bug);
"""


def when(text):
    return datetime.fromisoformat(text).timestamp() if text else None


def name(field):
    return field.get("name") if isinstance(field, dict) else None


def upsert_id(db, table, column, value, extra=None):
    if extra:
        (key, other), = extra.items()
        db.execute(f"INSERT INTO {table} ({column}, {key}) VALUES (?, ?) ON CONFLICT({column}) DO UPDATE SET {key} = excluded.{key}",
                   (value, other))
    else:
        db.execute(f"INSERT INTO {table} ({column}) VALUES (?) ON CONFLICT({column}) DO NOTHING", (value,))
    return db.execute(f"SELECT id FROM {table} WHERE {column} = ?", (value,)).fetchone()[0]


def person(db, field):
    if not isinstance(field, dict) or not field.get("name"):
        return None
    return upsert_id(db, "person", "name", field["name"], {"display_name": field.get("displayName")})


def main(path, store):
    db = sqlite3.connect(store, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.executescript(SCHEMA)
    opener = gzip.open if path.endswith(".gz") else open
    count = 0
    db.execute("BEGIN")
    with opener(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            issue = json.loads(line)
            f = issue["fields"]
            project = upsert_id(db, "project", "key", f["project"]["key"], {"name": f["project"].get("name")})
            row = (issue["key"], issue.get("id"), f.get("summary") or issue["key"], f.get("description"), name(f.get("status")),
                   name(f.get("resolution")), name(f.get("priority")), name(f.get("issuetype")), ",".join(f.get("labels") or []),
                   when(f.get("created")), when(f.get("updated")), when(f.get("resolutiondate")), project,
                   person(db, f.get("reporter")), person(db, f.get("assignee")))
            db.execute("""INSERT INTO bug (key, jira_id, title, details, status, resolution, priority, type, labels, created, updated,
                              resolved, project, reporter, assignee) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                          ON CONFLICT(key) DO UPDATE SET jira_id = excluded.jira_id, title = excluded.title, details = excluded.details,
                              status = excluded.status, resolution = excluded.resolution, priority = excluded.priority,
                              type = excluded.type, labels = excluded.labels, created = excluded.created, updated = excluded.updated,
                              resolved = excluded.resolved, project = excluded.project, reporter = excluded.reporter,
                              assignee = excluded.assignee""", row)
            bug = db.execute("SELECT id FROM bug WHERE key = ?", (issue["key"],)).fetchone()[0]
            db.execute("DELETE FROM bug_component WHERE bug = ?", (bug,))
            for component in f.get("components") or []:
                db.execute("INSERT OR IGNORE INTO bug_component VALUES (?, ?)", (bug, upsert_id(db, "component", "name", component["name"])))
            for comment in (f.get("comment") or {}).get("comments") or []:
                db.execute("""INSERT INTO comment (jira_id, body, created, updated, bug, author) VALUES (?, ?, ?, ?, ?, ?)
                              ON CONFLICT(jira_id) DO UPDATE SET body = excluded.body, created = excluded.created,
                                  updated = excluded.updated, bug = excluded.bug, author = excluded.author""",
                           (comment["id"], comment.get("body") or "", when(comment.get("created")), when(comment.get("updated")), bug,
                            person(db, comment.get("author"))))
            count += 1
            if count % 1000 == 0:
                db.execute("COMMIT")
                db.execute("BEGIN")
    db.execute("COMMIT")
    db.close()
    print(f"{count} issues")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    main(sys.argv[1], sys.argv[2])

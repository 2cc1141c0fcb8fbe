"""Ways to damage real files, shared by the hostile-file tests and the fuzz suite (test_fuzz.py)."""

import sqlite3


def loosen(conn: sqlite3.Connection, table: str) -> None:
    """Rebuild `table` without its constraints (NOT NULL, types), so any value can be written into it."""
    conn.execute(f'CREATE TABLE "loose_{table}" AS SELECT * FROM "{table}"')
    conn.execute(f'DROP TABLE "{table}"')
    conn.execute(f'ALTER TABLE "loose_{table}" RENAME TO "{table}"')


def edit_sqlite(path, *sql, loose=()) -> None:
    conn = sqlite3.connect(path)
    try:
        for table in loose:
            loosen(conn, table)
        for statement in sql:
            conn.execute(statement)
        conn.commit()
    finally:
        conn.close()

"""Named, persistent galleries of embedded items (SQLite WAL + append-only vector file)."""

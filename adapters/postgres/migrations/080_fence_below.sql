-- Hierarchical routes: a collection write reads the highest token of every
-- fence below its key (resource LIKE prefix || '%'). This index, in byte
-- order whatever the database's collation, makes that a range scan.
CREATE INDEX fence_resource_bytes ON fence (resource COLLATE "C");

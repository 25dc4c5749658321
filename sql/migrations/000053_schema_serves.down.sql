DROP TABLE ordo.schema_serves;

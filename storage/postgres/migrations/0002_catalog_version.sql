-- catalog_version changes with every write of an endpoint or a source,
-- so that every gateway can tell cheaply that its view of the catalog is
-- stale, whoever wrote it.
CREATE TABLE catalog_version (
    id      int    PRIMARY KEY,
    version bigint NOT NULL
);
INSERT INTO catalog_version (id, version) VALUES (1, 0);

CREATE FUNCTION bump_catalog_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE catalog_version SET version = version + 1 WHERE id = 1;
    PERFORM pg_notify('hookgate_catalog', '');
    RETURN NULL;
END $$;

CREATE TRIGGER endpoints_changed AFTER INSERT OR UPDATE OR DELETE ON endpoints
    FOR EACH STATEMENT EXECUTE FUNCTION bump_catalog_version();
CREATE TRIGGER sources_changed AFTER INSERT OR UPDATE OR DELETE ON sources
    FOR EACH STATEMENT EXECUTE FUNCTION bump_catalog_version();

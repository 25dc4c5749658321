ALTER TABLE ordo.messages ADD CONSTRAINT messages_tenant_id_fkey
    FOREIGN KEY (tenant_id) REFERENCES ordo.tenants (id) ON DELETE CASCADE;
